/* `shoal cluster`: the command line (cluster.c), shared by the shoal
 * program and the Python module (whose supervisor is the same code in a
 * python3 process); the supervisor it starts (supervisor.c) and what it is
 * given; the helpers of a cluster's directory; and the control socket's
 * requests (cluster_req.c), which the supervisor parses from whoever
 * connects (fuzzed: fuzz_cluster_req). */
#ifndef SHOAL_TOOLS_CLUSTER_H
#define SHOAL_TOOLS_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SH_CLUSTER_REQ_MAX 4200
#define SH_CLUSTER_MAX_ENGINES 65536
#define SH_CLUSTER_REPLY_MAX 65536 /* a status, an error */

enum { SH_CLUSTER_STATUS = 1, SH_CLUSTER_ADD, SH_CLUSTER_STOP };

typedef struct sh_cluster_req {
	int op;
	uint32_t n;	  /* add: engines */
	int launcher;	  /* add: sh_launcher */
	char hosts[4096]; /* add: an absolute path, or "" */
} sh_cluster_req;

/* One request (n bytes at buf): "status", "stop", or "add\nN\nLAUNCHER[\nHOSTS]".
 * 0, or -1 with why. */
int sh_cluster_parse_request(const char *buf, size_t n, sh_cluster_req *r, char *why,
			     size_t whylen);

/* The request r as the supervisor reads it, into buf: its length, or -1. */
int sh_cluster_format_request(const sh_cluster_req *r, char *buf, size_t len);

/* A supervisor's configuration: what `shoal cluster start` was given. */
typedef struct sh_cluster_cfg {
	const char *name, *dir; /* the cluster's, and its directory */
	uint32_t n;		/* engines at start */
	int launcher;		/* sh_launcher */
	const char *hosts, *ssh, *tcp, *so, *python, *pkgdir;
	int scheme; /* shoal_scheme */
	int64_t timeout_ns;
	bool stores;
	const char *store_size, *store_args;
} sh_cluster_cfg;

/* Runs a cluster's supervisor until it is told to stop (supervisor.c):
 * "ok ..." or "error: ..." goes to ready_fd once the engines registered
 * or did not. Returns the exit code. */
int sh_cluster_serve(const sh_cluster_cfg *c, int ready_fd);

/* dir/file as a unix socket address: 0, or -1 when too long. */
struct sockaddr_un;
int sh_cluster_unix_addr(const char *dir, const char *file, struct sockaddr_un *a);
/* Removes the cluster's files in dir, then dir. */
void sh_cluster_cleanup_dir(const char *dir);

/* `shoal cluster ARGS` (argv[0] is "cluster"); self is the command line
 * that runs this function again (NULL-ended: {"/path/shoal", "cluster"}),
 * for the supervisor `start` leaves running. */
int sh_cluster_cli(const char *const *self, int argc, char **argv);

#endif
