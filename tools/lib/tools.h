/* What the programs under tools/ share: the store daemon's main (shoald
 * and `shoal daemon` are the same program), the default socket path, and
 * parsing of sizes. Exit codes are the same in every program. */
#ifndef SHOAL_TOOLS_H
#define SHOAL_TOOLS_H

#include <stddef.h>
#include <stdint.h>

enum {
	SH_EXIT_OK = 0,
	SH_EXIT_FAIL = 1,     /* the operation failed; stderr says why */
	SH_EXIT_USAGE = 2,    /* bad arguments */
	SH_EXIT_NOTFOUND = 3, /* no such name or object */
	SH_EXIT_NOSTORE = 4,  /* no store at the socket */
	SH_EXIT_FULL = 5,     /* the store is full */
	SH_EXIT_INVALID = 6,  /* the input file is invalid */
};

/* $SHOAL_SOCKET, else shoald.sock in shoal_socket_dir() ($XDG_RUNTIME_DIR/shoal,
 * /run/shoal for root, /tmp/shoal-UID); exits when that directory is not
 * safe (another user's, open to others, a symlink). */
const char *sh_tools_default_socket(void);

/* "1024", "64K", "512M", "2G", "1T" (binary units) into *out; 0 or -1. */
int sh_tools_parse_size(const char *s, uint64_t *out);

/* Formats bytes as "1.5 GiB" into buf. */
const char *sh_tools_fmt_bytes(uint64_t v, char *buf, size_t len);

/* The store daemon: serves until SIGTERM or SIGINT. prog names it in
 * messages ("shoald" or "shoal daemon"). */
int sh_daemon_main(const char *prog, int argc, char **argv);
/* `shoal controller`: a task controller alone, until SIGTERM or SIGINT. */
int sh_controller_main(const char *prog, int argc, char **argv);

#endif
