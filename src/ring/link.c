/* Links: the set-up of a ring connection between two processes, shared by
 * every on-host protocol (see link.h). */
#include "fiber/waitq.h"
#include "ring/link.h"
#include "shm/shm.h"

#include <shoal/fiber.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* The room a socket name leaves for the directory: "/" and a name of up
 * to 40 bytes must still fit sun_path. */
#define DIR_MAX 60

int sh_link_private_dir(char *out, size_t outlen, char *why, size_t whylen)
{
	uid_t me = geteuid();
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;
	if (xdg && xdg[0] == '/' && strlen(xdg) + 6 <= DIR_MAX)
		n = snprintf(out, outlen, "%s/shoal", xdg);
	else if (me == 0)
		n = snprintf(out, outlen, "/run/shoal");
	else
		n = snprintf(out, outlen, "/tmp/shoal-%u", (unsigned)me);
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(why, whylen, "socket directory name longer than %zu bytes", outlen - 1);
		return SHOAL_ENAMETOOLONG;
	}
	if (mkdir(out, 0700) != 0 && errno != EEXIST) {
		int rc = shoal_errno();
		snprintf(why, whylen, "making the socket directory %s: %s", out,
			 shoal_strerror(rc));
		return rc;
	}
	/* lstat, not stat: a symlink planted there by someone else would take
	 * our sockets wherever it points. */
	struct stat st;
	if (lstat(out, &st) != 0) {
		int rc = shoal_errno();
		snprintf(why, whylen, "socket directory %s: %s", out, shoal_strerror(rc));
		return rc;
	}
	return sh_link_dir_check(&st, out, "socket directory", why, whylen);
}

int sh_link_dir_check(const struct stat *st, const char *dir, const char *what, char *why,
		      size_t whylen)
{
	uid_t me = geteuid();
	if (!S_ISDIR(st->st_mode) || st->st_uid != me || (st->st_mode & 077) != 0) {
		snprintf(why, whylen,
			 "%s %s is %s owned by uid %u with mode %03o; expected a directory of "
			 "uid %u with mode 0700 (remove it, or name another)",
			 what, dir,
			 S_ISLNK(st->st_mode)	? "a symlink"
			 : S_ISDIR(st->st_mode) ? "a directory"
						: "not a directory",
			 (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777), (unsigned)me);
		return SHOAL_EACCES;
	}
	return 0;
}

int sh_link_listen(const char *path, const char *what, gid_t group, char *out, size_t outlen,
		   int *lsock)
{
	static _Atomic unsigned counter;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (path) {
		if (strlen(path) >= outlen || strlen(path) >= sizeof(a.sun_path)) {
			sh_error(what, "socket path of %zu bytes, expected under %zu", strlen(path),
				 sizeof(a.sun_path));
			return SHOAL_ENAMETOOLONG;
		}
		strcpy(out, path);
	} else {
		char dir[DIR_MAX + 8], why[256];
		int rc = sh_link_private_dir(dir, sizeof(dir), why, sizeof(why));
		if (rc) {
			sh_error(what, "%s", why);
			return rc;
		}
		snprintf(out, outlen, "%s/%s-%d-%u.sock", dir, what, (int)getpid(),
			 atomic_fetch_add(&counter, 1));
	}
	strcpy(a.sun_path, out);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return shoal_errno();
	int rc = 0;
	int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (probe >= 0) {
		bool live = connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0;
		close(probe);
		if (live) {
			sh_error(what, "%s: a server is already there", out);
			close(fd);
			return SHOAL_EADDRINUSE;
		}
	}
	unlink(out);
	/* The mode goes on the socket before bind makes the file (bind applies
	 * it, less the umask), and the exact mode and group after, on the path
	 * without following a symlink: in a directory others can write, the
	 * path may be swapped for a link to another file in between. */
	mode_t mode = group != (gid_t)-1 ? 0660 : 0600;
	if (fchmod(fd, mode) != 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		rc = shoal_errno();
		sh_error(what, "bind %s: %s", out, shoal_strerror(rc));
		close(fd);
		return rc;
	}
	if (fchmodat(AT_FDCWD, out, mode, AT_SYMLINK_NOFOLLOW) != 0 ||
	    (group != (gid_t)-1 &&
	     fchownat(AT_FDCWD, out, (uid_t)-1, group, AT_SYMLINK_NOFOLLOW) != 0) ||
	    listen(fd, 512) != 0) {
		rc = shoal_errno();
		sh_error(what, "chmod/chown/listen %s: %s", out, shoal_strerror(rc));
		unlink(out);
		close(fd);
		return rc;
	}
	*lsock = fd;
	return 0;
}

bool sh_link_peer_allowed(int sock, gid_t group, const char *what, pid_t *pid)
{
	uid_t uid;
	gid_t gid;
	if (sh_peer_cred(sock, pid, &uid, &gid) != 0)
		return false;
	if (uid == geteuid() || uid == 0 || (group != (gid_t)-1 && gid == group))
		return true;
	if (group != (gid_t)-1) {
		/* A member through a supplementary group is a member too. The
		 * list can be 65536 long: asked for its size first, and kept
		 * off a fiber's small stack. */
		socklen_t len = 0, cap = 0;
		gid_t *groups = NULL;
		bool member = false;
		if (getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, NULL, &len) != 0 &&
		    errno == ERANGE && len > 0 && (groups = shoal_alloc(cap = len)) != NULL &&
		    getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
			for (size_t i = 0; i < len / sizeof(gid_t) && !member; i++)
				member = groups[i] == group;
		if (groups)
			shoal_free(groups, cap);
		if (member)
			return true;
	}
	sh_warn(what, "refused pid %d: uid %u gid %u, expected uid %u%s", (int)*pid, uid, gid,
		geteuid(), group != (gid_t)-1 ? " or the server's group" : "");
	return false;
}

void sh_link_init(sh_link *l, int sock)
{
	memset(l, 0, sizeof(*l));
	l->sock = sock;
	l->efd = l->efd_down = l->efd_w = l->efd_down_w = l->efd_conn = -1;
}

int sh_link_hello(sh_link *l, uint32_t *proto, uint32_t *version)
{
	uint32_t hello[3];
	size_t got;
	int rc;
	for (;;) {
		rc = sh_fd_recv(l->sock, hello, sizeof(hello), &got, NULL, 0, NULL);
		if (rc != SHOAL_EAGAIN)
			break;
		if ((rc = shoal_fd_wait(l->sock, SHOAL_FD_IN, shoal_deadline_in(5000 * 1000000LL),
					NULL)) != 0)
			return rc;
	}
	if (rc)
		return rc;
	if (got == 0)
		return SHOAL_ECLOSED;
	if (got != sizeof(hello) || hello[0] != SH_LINK_MAGIC)
		return SHOAL_EPROTO;
	*proto = hello[1];
	*version = hello[2];
	return 0;
}

int sh_link_accept(sh_link *l, size_t cap, const uint64_t *info, size_t ninfo, const int *extra,
		   int nextra)
{
	if (ninfo > SH_LINK_INFO_MAX || nextra > SH_LINK_FDS_MAX)
		return SHOAL_EINVAL;
	size_t one;
	int rc, rfd;
	if ((rc = sh_ring_bytes(cap, &one)) != 0)
		return rc;
	l->bytes = 2 * one;
	if ((rc = sh_memfd_create("shoal-rings", l->bytes, true, &rfd)) != 0)
		return rc;
	/* The peer maps the rings read-write; a truncation would make our
	 * next touch of them SIGBUS and take every connection down. */
	if ((rc = sh_memfd_fix_size(rfd)) != 0) {
		close(rfd);
		return rc;
	}
	if ((rc = sh_shm_map(rfd, l->bytes, true, &l->mem)) != 0) {
		l->mem = NULL;
		close(rfd);
		return rc;
	}
	/* Doorbells the connector rings and only we read: on an eventfd, a
	 * descriptor both hold, the connector could clear O_NONBLOCK and
	 * empty or fill it so that our next read or write blocks this whole
	 * thread. */
	/* And the connector's fiber doorbell: a datagram socket pair, one end
	 * each, rung with send(MSG_DONTWAIT | MSG_NOSIGNAL) (ring.c), so that
	 * nothing the connector does to its end (fill it, make it blocking,
	 * close it) blocks or signals us. */
	int conn_r = -1, sv[2];
	if ((rc = sh_bell_pair(&l->efd, &l->efd_w)) != 0 ||
	    (rc = sh_bell_pair(&l->efd_down, &l->efd_down_w)) != 0 ||
	    (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0 &&
	     (rc = shoal_errno()) != 0)) {
		close(rfd);
		/* nothing is attached to the rings yet: a shut must not touch them */
		sh_shm_unmap(l->mem, l->bytes);
		l->mem = NULL;
		return rc;
	}
	unsigned char *base = l->mem;
	l->efd_conn = sv[0];
	conn_r = sv[1];
	sh_ring_format(base, one);
	sh_ring_format(base + one, one);
	sh_ring_attach(&l->up, base, one, false);
	sh_ring_attach(&l->down, base + one, one, true);
	/* We sleep on our doorbells (blocking only this fiber) and wake the
	 * connector, a thread, on the futex. */
	l->up.wait_efd = l->efd;
	l->down.wait_efd = l->efd_down;
	l->up.wait_wfd = l->efd_w;
	l->down.wait_wfd = l->efd_down_w;
	l->up.wake_fiber_efd = l->down.wake_fiber_efd = l->efd_conn;
	uint64_t words[1 + SH_LINK_INFO_MAX];
	words[0] = one;
	if (ninfo)
		memcpy(words + 1, info, ninfo * 8);
	int fds[SH_LINK_FDS + SH_LINK_FDS_MAX] = {rfd, l->efd_w, l->efd_down_w, conn_r};
	for (int i = 0; i < nextra; i++)
		fds[SH_LINK_FDS + i] = extra[i];
	while ((rc = sh_fd_send(l->sock, words, (1 + ninfo) * 8, fds, SH_LINK_FDS + nextra)) ==
	       SHOAL_EAGAIN)
		if ((rc = shoal_fd_wait(l->sock, SHOAL_FD_OUT, SHOAL_FOREVER, NULL)) != 0)
			break;
	close(rfd);
	close(conn_r);
	return rc;
}

uint64_t sh_link_fd_budget(void)
{
	struct rlimit nofile;
	uint64_t lim = getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY
			       ? nofile.rlim_cur
			       : 1u << 20;
	return lim > 256 ? lim - 128 : lim / 2;
}

int sh_link_sock_timeouts(int sock, int64_t deadline)
{
	struct timeval tv = {0, 0};
	if (deadline != SHOAL_FOREVER) {
		int64_t left = deadline - shoal_now_ns();
		if (left <= 0)
			return SHOAL_ETIMEDOUT;
		tv.tv_sec = left / 1000000000;
		tv.tv_usec = (left % 1000000000) / 1000;
		if (tv.tv_sec == 0 && tv.tv_usec == 0)
			tv.tv_usec = 1;
	}
	if (setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
		return shoal_errno();
	return 0;
}

int sh_link_connect(sh_link *l, const char *path, uint32_t proto, uint32_t version, size_t cap,
		    uint64_t *info, size_t ninfo, int *extra, int nextra, char *why, size_t whylen)
{
	return sh_link_connect_to(l, path, proto, version, cap, info, ninfo, extra, nextra,
				  (uid_t)-1, shoal_deadline_in(SH_LINK_CONNECT_NS), why, whylen);
}

int sh_link_connect_to(sh_link *l, const char *path, uint32_t proto, uint32_t version, size_t cap,
		       uint64_t *info, size_t ninfo, int *extra, int nextra, uid_t server_uid,
		       int64_t deadline, char *why, size_t whylen)
{
	sh_link_init(l, -1);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (!path || strlen(path) >= sizeof(a.sun_path) || ninfo > SH_LINK_INFO_MAX ||
	    nextra > SH_LINK_FDS_MAX) {
		snprintf(why, whylen, "socket path empty or longer than %zu bytes",
			 sizeof(a.sun_path) - 1);
		return SHOAL_EINVAL;
	}
	strcpy(a.sun_path, path);
	int rc = 0, fds[SH_LINK_FDS + SH_LINK_FDS_MAX], nfds = 0;
	for (int i = 0; i < SH_LINK_FDS + SH_LINK_FDS_MAX; i++)
		fds[i] = -1;
	l->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (l->sock < 0 || (rc = sh_link_sock_timeouts(l->sock, deadline)) != 0 ||
	    connect(l->sock, (struct sockaddr *)&a, sizeof(a)) != 0) {
		if (rc == 0)
			rc = errno == EAGAIN || errno == EINPROGRESS ? SHOAL_ETIMEDOUT
								     : shoal_errno();
		snprintf(why, whylen, "connecting to %s: %s", path, shoal_strerror(rc));
		return rc;
	}
	/* Who serves this socket, before a byte of ours goes to it: anyone
	 * who could bind the path first would otherwise get our data. */
	pid_t spid;
	uid_t suid;
	gid_t sgid;
	if ((rc = sh_peer_cred(l->sock, &spid, &suid, &sgid)) != 0) {
		snprintf(why, whylen, "who serves %s: %s", path, shoal_strerror(rc));
		goto fail;
	}
	if (suid != geteuid() && suid != 0 && suid != server_uid) {
		snprintf(why, whylen,
			 "%s is served by uid %u (pid %d), expected uid %u%s or root: not "
			 "connecting (name the server's uid explicitly if it is trusted)",
			 path, (unsigned)suid, (int)spid, (unsigned)geteuid(),
			 server_uid != (uid_t)-1 ? " or the uid named" : "");
		rc = SHOAL_EACCES;
		goto fail;
	}
	uint32_t hello[3] = {SH_LINK_MAGIC, proto, version};
	uint64_t words[1 + SH_LINK_INFO_MAX];
	size_t got = 0, one;
	if ((rc = sh_fd_send(l->sock, hello, sizeof(hello), NULL, 0)) != 0 ||
	    (rc = sh_fd_recv(l->sock, words, (1 + ninfo) * 8, &got, fds, SH_LINK_FDS + nextra,
			     &nfds)) != 0) {
		if (rc == SHOAL_EAGAIN)
			rc = SHOAL_ETIMEDOUT;
		snprintf(why, whylen, "set-up with %s: %s%s", path, shoal_strerror(rc),
			 rc == SHOAL_ETIMEDOUT ? " (the server did not answer in time)" : "");
		goto fail;
	}
	if (got != (1 + ninfo) * 8 || nfds != SH_LINK_FDS + nextra ||
	    sh_ring_bytes(cap, &one) != 0 || words[0] != one) {
		rc = SHOAL_EPROTO;
		snprintf(why, whylen,
			 "set-up with %s: %zu bytes and %d descriptors, rings of %llu bytes; "
			 "expected %zu bytes, %d descriptors, rings of %zu (a server of another "
			 "protocol or version?)",
			 path, got, nfds, got >= 8 ? (unsigned long long)words[0] : 0,
			 (1 + ninfo) * 8, SH_LINK_FDS + nextra, cap);
		goto fail;
	}
	l->bytes = 2 * one;
	struct stat st;
	if (fstat(fds[0], &st) != 0 || (uint64_t)st.st_size < l->bytes) {
		rc = SHOAL_EPROTO;
		snprintf(why, whylen, "set-up with %s: the rings' memory is too small", path);
		goto fail;
	}
	/* The fiber doorbell: a datagram socket, or nothing we would wait on
	 * (read with MSG_DONTWAIT: its blocking flag is the server's too). */
	int type = 0;
	socklen_t tl = sizeof(type);
	if (fstat(fds[3], &st) != 0 || !S_ISSOCK(st.st_mode) ||
	    getsockopt(fds[3], SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM) {
		rc = SHOAL_EPROTO;
		snprintf(why, whylen, "set-up with %s: the doorbell is not a datagram socket",
			 path);
		goto fail;
	}
	if (!sh_memfd_size_fixed(fds[0])) {
		rc = SHOAL_EPROTO;
		snprintf(why, whylen,
			 "set-up with %s: the rings' memory can be resized (expected it sealed "
			 "against shrinking and growing)",
			 path);
		goto fail;
	}
	if ((rc = sh_link_sock_timeouts(l->sock, SHOAL_FOREVER)) != 0) {
		snprintf(why, whylen, "set-up with %s: %s", path, shoal_strerror(rc));
		goto fail;
	}
	if ((rc = sh_shm_map(fds[0], l->bytes, true, &l->mem)) != 0) {
		l->mem = NULL;
		snprintf(why, whylen, "mapping the rings: %s", shoal_strerror(rc));
		goto fail;
	}
	unsigned char *base = l->mem;
	if ((rc = sh_ring_attach(&l->up, base, one, true)) != 0 ||
	    (rc = sh_ring_attach(&l->down, base + one, one, false)) != 0) {
		snprintf(why, whylen, "attaching the rings: %s", shoal_strerror(rc));
		goto fail;
	}
	l->efd = fds[1];
	l->efd_down = fds[2];
	l->efd_conn = fds[3];
	/* The acceptor sleeps on its doorbells; we sleep on the futexes. */
	l->up.wake_efd = l->efd;
	l->down.wake_efd = l->efd_down;
	close(fds[0]);
	if (ninfo)
		memcpy(info, words + 1, ninfo * 8);
	for (int i = 0; i < nextra; i++)
		extra[i] = fds[SH_LINK_FDS + i];
	return 0;
fail:
	for (int i = 0; i < SH_LINK_FDS + SH_LINK_FDS_MAX; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	l->efd = l->efd_down = l->efd_conn = -1;
	sh_link_fini(l);
	return rc;
}

void sh_link_shut(sh_link *l)
{
	if (l->mem) {
		sh_ring_close(&l->up);
		sh_ring_close(&l->down);
	} else if (l->sock >= 0) {
		shutdown(l->sock, SHUT_RDWR); /* still in set-up */
	}
	/* an acceptor's fibers asleep on the doorbells see the close (the
	 * connector holds write ends in efd, efd_down; the acceptor in the _w) */
	int up = l->efd_w >= 0 ? l->efd_w : l->efd;
	int down = l->efd_down_w >= 0 ? l->efd_down_w : l->efd_down;
	if (up >= 0)
		sh_bell_ring(up);
	if (down >= 0)
		sh_bell_ring(down);
}

void sh_link_fini(sh_link *l)
{
	if (l->mem)
		sh_shm_unmap(l->mem, l->bytes);
	int fds[6] = {l->efd, l->efd_down, l->efd_w, l->efd_down_w, l->efd_conn, l->sock};
	for (int i = 0; i < 6; i++)
		sh_fd_close(fds[i]); /* our poller may know them */
	sh_link_init(l, -1);
}
