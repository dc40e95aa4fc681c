/* memfd regions, seals, the kernel's copies and descriptor passing (see
 * shm.h). Errors carry the errno of the call that failed, as a SHOAL_E
 * code; a region that cannot be made, mapped or sealed is logged with
 * what was asked. */
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#define SEALS (F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)

int sh_memfd_create(const char *name, size_t size, bool sealable, int *fd_out)
{
	if (size > (size_t)INT64_MAX)
		return SHOAL_EOVERFLOW;
	int fd = memfd_create(name, MFD_CLOEXEC | (sealable ? MFD_ALLOW_SEALING : 0));
	if (fd < 0) {
		int e = -errno;
		sh_error("shm", "memfd_create(%s): %s", name, strerror(errno));
		return e;
	}
	if (ftruncate(fd, (off_t)size) != 0) {
		int e = -errno;
		sh_error("shm", "ftruncate(%s, %zu bytes): %s", name, size, strerror(errno));
		close(fd);
		return e;
	}
	*fd_out = fd;
	return 0;
}

static bool pages_exist(const struct stat *st)
{
	return st->st_size > 0 && (uint64_t)st->st_blocks * 512 >= (uint64_t)st->st_size;
}

bool sh_fd_pages_exist(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && pages_exist(&st);
}

int sh_shm_map_len(int fd, size_t *size, bool writable, void **out)
{
	if (*size == 0)
		return SHOAL_EINVAL;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return shoal_errno();
	/* a file of huge pages (hugetlbfs) is mapped in whole pages of its
	 * own: another length would not unmap */
	size_t len = *size;
	if (st.st_blksize > 4096 && (st.st_blksize & (st.st_blksize - 1)) == 0)
		len = (len + (size_t)st.st_blksize - 1) & ~((size_t)st.st_blksize - 1);
	/* a writer of pages that exist takes them all in one call rather
	 * than a fault a page (on a VM, 0.07 s a GiB against 0.25 s) */
	int pop = writable && pages_exist(&st) ? MAP_POPULATE : 0;
	void *p = mmap(NULL, len, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED | pop, fd, 0);
	if (p == MAP_FAILED) {
		int e = -errno;
		sh_error("shm", "mmap(%zu bytes, %s): %s", len, writable ? "rw" : "ro",
			 strerror(errno));
		return e;
	}
	*size = len;
	*out = p;
	return 0;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

void sh_shm_populate_read(void *map, size_t maplen, uint64_t off, uint64_t len)
{
	/* whole huge pages, which a mapping of hugetlbfs needs and the
	 * length of one always is */
	const uint64_t huge = 2u << 20;
	uint64_t a = off & ~(huge - 1), b = (off + len + huge - 1) & ~(huge - 1);
	if (b > maplen)
		b = maplen;
	if (a < b)
		(void)madvise((unsigned char *)map + a, b - a, MADV_POPULATE_READ);
}

int sh_shm_map(int fd, size_t size, bool writable, void **out)
{
	return sh_shm_map_len(fd, &size, writable, out);
}

void sh_shm_unmap(void *p, size_t size)
{
	if (p)
		munmap(p, size);
}

int sh_memfd_seal(int fd)
{
	if (fcntl(fd, F_ADD_SEALS, SEALS) != 0)
		return -errno;
	return 0;
}

#define SIZE_SEALS (F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)

/* Seals that a failure of means memory a peer could resize: logged. */
static int add_seals(int fd, int seals, const char *what)
{
	if (fcntl(fd, F_ADD_SEALS, seals) == 0)
		return 0;
	int e = -errno;
	sh_error("shm", "sealing %s: %s", what, strerror(errno));
	return e;
}

int sh_memfd_fix_size(int fd)
{
	return add_seals(fd, SIZE_SEALS, "a shared region's size");
}

int sh_memfd_fix_size_open(int fd)
{
	return add_seals(fd, F_SEAL_GROW | F_SEAL_SHRINK, "a region's size");
}

int sh_memfd_freeze_others(int fd)
{
	return add_seals(fd, F_SEAL_FUTURE_WRITE | SIZE_SEALS, "a region against writes by others");
}

bool sh_memfd_size_fixed(int fd)
{
	int s = fcntl(fd, F_GET_SEALS);
	return s >= 0 && (s & SIZE_SEALS) == SIZE_SEALS;
}

bool sh_memfd_is_sealed(int fd)
{
	int s = fcntl(fd, F_GET_SEALS);
	return s >= 0 && (s & SEALS) == SEALS;
}

/* pread or pwrite until all n bytes are done (EINTR retried; an early end
 * of the file is SHOAL_EIO). */
static int pio_all(int fd, unsigned char *b, size_t n, uint64_t off, bool writing)
{
	while (n) {
		ssize_t k = writing ? pwrite(fd, b, n, (off_t)off) : pread(fd, b, n, (off_t)off);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return shoal_errno();
		}
		if (k == 0)
			return SHOAL_EIO;
		b += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

int sh_fd_pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
	return pio_all(fd, (unsigned char *)p, n, off, true);
}

int sh_fd_pread_all(int fd, void *p, size_t n, uint64_t off)
{
	return pio_all(fd, p, n, off, false);
}

int sh_fd_copy(int out, uint64_t out_off, int in, uint64_t in_off, uint64_t len)
{
	enum { BUF = 1u << 20 };
	loff_t ioff = (loff_t)in_off, ooff = (loff_t)out_off;
	bool cfr = true, sf = true;
	unsigned char *buf = NULL;
	int rc = 0;
	while (len > 0 && rc == 0) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t n = -1;
		if (cfr) {
			n = copy_file_range(in, &ioff, out, &ooff, chunk, 0);
			if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
				      errno == EOPNOTSUPP)) {
				cfr = false; /* across file systems: try sendfile */
				continue;
			}
		} else if (sf) {
			if (lseek(out, ooff, SEEK_SET) < 0)
				return shoal_errno();
			off_t o = (off_t)ioff;
			n = sendfile(out, in, &o, chunk);
			if (n < 0 && errno == EINVAL) {
				sf = false; /* hugetlbfs splices nothing: through a buffer */
				continue;
			}
			if (n > 0) {
				ioff = o;
				ooff += n;
			}
		} else {
			if (!buf && !(buf = shoal_alloc(BUF)))
				return SHOAL_ENOMEM;
			n = pread(in, buf, chunk < BUF ? chunk : BUF, ioff);
			if (n > 0 &&
			    (rc = sh_fd_pwrite_all(out, buf, (size_t)n, (uint64_t)ooff)) != 0)
				break;
			if (n > 0) {
				ioff += n;
				ooff += n;
			}
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = shoal_errno();
		} else if (n == 0) {
			rc = SHOAL_EIO; /* the file shrank under us */
		} else {
			len -= (uint64_t)n;
		}
	}
	if (buf)
		shoal_free(buf, BUF);
	return rc;
}

int sh_fd_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	if (len == 0 || nfds < 0 || nfds > SH_FD_MAX)
		return SHOAL_EINVAL;
	struct iovec iov = {.iov_base = (void *)(uintptr_t)buf, .iov_len = len};
	union {
		char b[CMSG_SPACE(sizeof(int) * SH_FD_MAX)];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.b;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
		if (n == (ssize_t)len)
			return 0;
		if (n >= 0)
			return SHOAL_EMSGSIZE; /* a seqpacket/dgram socket truncated it */
		if (errno != EINTR)
			return -errno;
	}
}

int sh_fd_recv(int sock, void *buf, size_t len, size_t *got, int *fds, int maxfds, int *nfds)
{
	if (len == 0 || maxfds < 0)
		return SHOAL_EINVAL;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	union {
		char b[CMSG_SPACE(sizeof(int) * SH_FD_MAX)];
		struct cmsghdr align;
	} ctl;
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = ctl.b,
			   .msg_controllen = sizeof(ctl.b)};
	ssize_t n;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	int have = 0, rc = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (have < maxfds)
				fds[have++] = fd;
			else {
				close(fd);
				rc = SHOAL_EBADMSG;
			}
		}
	}
	if (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
		rc = SHOAL_EBADMSG;
	if (rc) {
		for (int i = 0; i < have; i++)
			close(fds[i]);
		sh_warn("shm",
			"dropped a message: expected at most %zu bytes and %d descriptors, "
			"got %zd bytes%s",
			len, maxfds, n,
			(m.msg_flags & MSG_CTRUNC) ? " and truncated control data" : "");
		return rc;
	}
	*got = (size_t)n;
	if (nfds)
		*nfds = have;
	else
		for (int i = 0; i < have; i++)
			close(fds[i]);
	return 0;
}

int sh_peer_cred(int sock, pid_t *pid, uid_t *uid, gid_t *gid)
{
	struct ucred uc;
	socklen_t l = sizeof(uc);
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &uc, &l) != 0)
		return -errno;
	if (pid)
		*pid = uc.pid;
	if (uid)
		*uid = uc.uid;
	if (gid)
		*gid = uc.gid;
	return 0;
}
