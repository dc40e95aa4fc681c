/* `shoal cluster` (cluster.c): the command line, shared by the shoal
 * program and the Python module (whose supervisor is the same code in a
 * python3 process), and the control socket's requests, which the
 * supervisor parses from whoever connects (fuzzed: fuzz_cluster_req). */
#ifndef SHOAL_TOOLS_CLUSTER_H
#define SHOAL_TOOLS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#define SH_CLUSTER_REQ_MAX 4200
#define SH_CLUSTER_MAX_ENGINES 65536

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

/* `shoal cluster ARGS` (argv[0] is "cluster"); self is the command line
 * that runs this function again (NULL-ended: {"/path/shoal", "cluster"}),
 * for the supervisor `start` leaves running. */
int sh_cluster_cli(const char *const *self, int argc, char **argv);

#endif
