/* A link: one connection between two processes on a host, the way every
 * on-host protocol here connects (the store, the task farm). A
 * SOCK_SEQPACKET unix socket carries the set-up, descriptors and liveness;
 * two rings in one memfd carry the messages, "up" from the side that
 * connected to the side that accepted, "down" back.
 *
 * Set-up: the connector sends a hello (magic, protocol, version); the
 * acceptor, a fiber of a server, makes the rings and a doorbell per ring
 * that it sleeps on (so that waiting blocks only its fiber), a pipe whose
 * read end only it holds (so that the connector cannot make it block),
 * and answers with the ring size, words of its protocol's own, and
 * descriptors: the rings, the doorbells' write ends, one end of a
 * doorbell for the connector's fibers, and what else the protocol adds.
 * The connector rings the acceptor's doorbells; a thread of it sleeps on
 * the rings' futexes, a fiber on its doorbell (ring.h: SH_RING_WAIT_BELL).
 *
 * Also here: where the default sockets live (a directory of this user's
 * that no one else may enter), listening, and who may connect (our uid,
 * root, a group). */
#ifndef SHOAL_RING_LINK_H
#define SHOAL_RING_LINK_H

#include "ring/ring.h"

#include <sys/types.h>

#define SH_LINK_MAGIC 0x4b4e4c53u /* "SLNK": the first word of a hello */
#define SH_LINK_INFO_MAX 8	  /* words of a protocol's own in the answer */
#define SH_LINK_FDS_MAX 4	  /* descriptors of a protocol's own in the answer */
#define SH_LINK_FDS 4 /* the answer's own: rings, two doorbells, the connector's doorbell */

typedef struct sh_link {
	/* efd, efd_down: the acceptor's doorbells (-1: none yet), one per
	 * ring, so that one fiber may wait for the up ring's data while
	 * another waits for room in the down ring. The acceptor holds their
	 * read ends here and their write ends in efd_w, efd_down_w (to wake
	 * its own fibers); the connector holds the write ends here. */
	int sock, efd, efd_down, efd_w, efd_down_w;
	/* efd_conn: the connector's fiber doorbell, a datagram socket pair the
	 * acceptor made, one end each: the acceptor rings it when the
	 * connector's wait flag says SH_RING_WAIT_BELL (ring.c). A
	 * connector whose requests may come from fibers sets its rings'
	 * fiber_efd to it; one fiber at a time may wait on it. -1: none. */
	int efd_conn;
	void *mem; /* the two rings */
	size_t bytes;
	sh_ring up, down; /* connector -> acceptor, acceptor -> connector */
} sh_link;

/* The directory of this user's default sockets, into out:
 * $XDG_RUNTIME_DIR/shoal, else /run/shoal for root, else /tmp/shoal-UID.
 * Made (0700) if missing; refused (SHOAL_EACCES, why says what is wrong)
 * unless it is a directory, not a symlink, owned by this user and closed
 * to everyone else: another user who made it first must not be able to
 * serve, or squat, our sockets. */
int sh_link_private_dir(char *out, size_t outlen, char *why, size_t whylen);
/* The check of sh_link_private_dir on st, the lstat (or O_PATH|O_NOFOLLOW
 * fstat) of the directory dir, which why calls what: 0, or SHOAL_EACCES. */
struct stat;
int sh_link_dir_check(const struct stat *st, const char *dir, const char *what, char *why,
		      size_t whylen);

/* The server's listening socket at path (NULL: a fresh one in
 * sh_link_private_dir, named after what), written to out: mode 0600,
 * or 0660 and that group when group is not (gid_t)-1. A socket file left
 * by a dead server is replaced; a live server's is not (SHOAL_EADDRINUSE). */
int sh_link_listen(const char *path, const char *what, gid_t group, char *out, size_t outlen,
		   int *lsock);
/* The descriptors a server of this process may hold for its peers:
 * RLIMIT_NOFILE less a reserve for the rest of the process (an embedding
 * host's own, the listener, the log). */
uint64_t sh_link_fd_budget(void);

/* Bounds a blocking socket's sends and receives (and a connect) to the
 * time left until deadline (SHOAL_FOREVER: unbounded); SHOAL_ETIMEDOUT if
 * it has passed. A wait past it fails with EAGAIN. */
int sh_link_sock_timeouts(int sock, int64_t deadline);

/* Whether the peer on sock may talk to us: our uid, root, or a member of
 * the group (when not (gid_t)-1), as its primary group or one of its
 * supplementary groups. A refusal is logged under what. */
bool sh_link_peer_allowed(int sock, gid_t group, const char *what, pid_t *pid);

/* A link with nothing open yet (sock and efd -1). */
void sh_link_init(sh_link *l, int sock);

/* Acceptor, in a fiber, on a non-blocking socket: reads the hello within
 * 5 s into proto and version (SHOAL_ECLOSED: the peer left without a
 * word, e.g. a probe for a live server). The caller checks them. */
int sh_link_hello(sh_link *l, uint32_t *proto, uint32_t *version);
/* Acceptor: makes rings of cap data bytes each way and the eventfd, and
 * answers with info and the extra descriptors. */
int sh_link_accept(sh_link *l, size_t cap, const uint64_t *info, size_t ninfo, const int *extra,
		   int nextra);

/* Connector: connects to the socket at path, checks who serves it (before
 * it sends a byte: our uid, root, or server_uid when that is not
 * (uid_t)-1; else SHOAL_EACCES), says hello and maps the rings; info and
 * extra receive the acceptor's words and descriptors (exactly as many as
 * asked for, or SHOAL_EPROTO). Blocks until deadline at most
 * (SHOAL_ETIMEDOUT: a listener that never answers). why says what failed. */
int sh_link_connect_to(sh_link *l, const char *path, uint32_t proto, uint32_t version, size_t cap,
		       uint64_t *info, size_t ninfo, int *extra, int nextra, uid_t server_uid,
		       int64_t deadline, char *why, size_t whylen);
/* The same for a server of our uid or root, within SH_LINK_CONNECT_NS. */
int sh_link_connect(sh_link *l, const char *path, uint32_t proto, uint32_t version, size_t cap,
		    uint64_t *info, size_t ninfo, int *extra, int nextra, char *why, size_t whylen);
#define SH_LINK_CONNECT_NS (10 * 1000000000LL)

/* Closes both rings (waking both sides); either side, any time. */
void sh_link_shut(sh_link *l);
/* Unmaps and closes everything of the link. */
void sh_link_fini(sh_link *l);

#endif
