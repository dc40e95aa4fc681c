/* The clusters of the task farm (shoal/cluster.h), inside: a cluster's
 * directory and its control socket (control.c: the requests the
 * supervisor reads from whoever of its uid connects, checked as hostile
 * and fuzzed by fuzz_cluster_req; asking them), the supervisor
 * (supervisor.c) and what it is given, the public calls (start.c), the
 * launchers (launch.h). */
#ifndef SHOAL_CLUSTER_SUPERVISE_H
#define SHOAL_CLUSTER_SUPERVISE_H

#include <shoal/cluster.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SH_CLUSTER_REQ_MAX 4200
#define SH_CLUSTER_REPLY_MAX 65536 /* a status, an error */

enum { SH_CLUSTER_STATUS = 1, SH_CLUSTER_ADD, SH_CLUSTER_STOP };

typedef struct sh_cluster_req {
	int op;
	uint32_t n;	  /* add: engines */
	int launcher;	  /* add: shoal_launcher */
	char hosts[4096]; /* add: an absolute path, or "" */
} sh_cluster_req;

/* One request (n bytes at buf): "status", "stop", or "add\nN\nLAUNCHER[\nHOSTS]".
 * 0, or -1 with why. */
int sh_cluster_parse_request(const char *buf, size_t n, sh_cluster_req *r, char *why,
			     size_t whylen);

/* The request r as the supervisor reads it, into buf: its length, or -1. */
int sh_cluster_format_request(const sh_cluster_req *r, char *buf, size_t len);

/* Whether name is a cluster's name: 1 to 64 letters, digits, '.', '_', '-'
 * (not first: '.', '-'). */
bool sh_cluster_name_ok(const char *name);
/* The directory of cluster name (in shoal_socket_dir()): 0, or -1 when
 * there is no safe one or its sockets' paths would not fit. */
int sh_cluster_dir(const char *name, char *out, size_t len);
/* dir/file as a unix socket address: 0, or -1 when too long. */
struct sockaddr_un;
int sh_cluster_unix_addr(const char *dir, const char *file, struct sockaddr_un *a);
/* Removes the cluster's files in dir, then dir. */
void sh_cluster_cleanup_dir(const char *dir);
/* Sends req to the supervisor in dir and reads its answer into reply
 * (NUL-ended) until deadline. SHOAL_ENOENT when none answers there,
 * SHOAL_EPERM when another user serves the socket. */
int sh_cluster_ask(const char *dir, const char *req, char *reply, size_t len, int64_t deadline);
/* Reads what a supervisor says of its cluster (a status, or start's word)
 * into info: its lines "controller: ...", "secret: ...", "store: ...",
 * "engines: N registered, M asked for", "supervisor: pid P" (start's) or
 * "cluster NAME (supervisor pid P" (status's), and the whole text. */
void sh_cluster_info_parse(const char *text, shoal_cluster_info *info);

/* A supervisor's configuration: what shoal_cluster_start was given. */
typedef struct sh_cluster_cfg {
	const char *name, *dir; /* the cluster's, and its directory */
	uint32_t n;		/* engines at start */
	shoal_launcher launcher;
	const char *hosts, *ssh, *tcp, *so, *python, *pkgdir;
	shoal_scheme scheme;
	int64_t timeout_ns;
	bool stores;
	const char *store_size, *store_args;
} sh_cluster_cfg;

/* Runs a cluster's supervisor until it is told to stop (supervisor.c):
 * "ok ..." or "error: ..." goes to ready_fd once the engines registered
 * or did not. Returns the exit code: 0, or 1. */
int sh_cluster_serve(const sh_cluster_cfg *c, int ready_fd);

#endif
