/* A hostile test extension: each function performs one attack on its host
 * (issue 16) and reports what the kernel let it do, so that the test can
 * check the defence is really in force, not that a call returned. */
#include <shoal/ext.h>
#include <shoal/store.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* echo_tensor(x): x back (a tensor the host shared: read through the
 * store by reference, and returned so). */
static int echo_tensor(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx;
	*out = (shoal_value *)a;
	return 0;
}

/* store_try([op, key]): what a hostile strict extension would do with
 * its runner's store connection; key is a name (a string) or an id (an
 * int). op: "get", "delete", "list", "persist" (key's id), "unname"
 * (key's name), "rename" (binds a name to key's id), "replace"
 * (seals an object of its own over key's name), "own" (puts an object of
 * its own named key, gets and deletes it again). Returns the code it got
 * (0 when the store let it). */
static int list_one(const shoal_entry *e, void *ctx)
{
	(void)e;
	(void)ctx;
	return 0;
}

static int store_try(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	shoal_client *c = shoal_ext_store(ctx);
	if (!c)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "no store connection");
	if (!a || a->type != SHOAL_V_ARRAY || a->n != 2 || a->v.items[0].type != SHOAL_V_STR)
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "expected [op, name or id]");
	const char *op = a->v.items[0].v.s;
	const shoal_value *k = &a->v.items[1];
	char name[256] = "";
	shoal_id id = 0;
	if (k->type == SHOAL_V_STR)
		snprintf(name, sizeof(name), "%.*s", (int)k->n, k->v.s);
	else if (k->type == SHOAL_V_INT)
		id = (shoal_id)k->v.i;
	int rc;
	shoal_object *o = NULL;
	if (!strcmp(op, "get")) {
		rc = name[0] ? shoal_get_by_name(c, name, &o) : shoal_get(c, id, &o);
		if (o)
			shoal_object_release(o);
	} else if (!strcmp(op, "delete")) {
		rc = name[0] ? shoal_delete(c, name) : shoal_delete_id(c, id);
	} else if (!strcmp(op, "list")) {
		rc = shoal_list(c, "", list_one, NULL);
	} else if (!strcmp(op, "persist")) {
		rc = shoal_persist(c, id);
	} else if (!strcmp(op, "unname")) {
		rc = shoal_unname(c, name);
	} else if (!strcmp(op, "rename")) {
		rc = shoal_name(c, id, "taken-by-the-extension", true);
	} else if (!strcmp(op, "replace")) {
		rc = shoal_put_bytes(c, name, "forged", 6, SHOAL_REPLACE, &id);
	} else if (!strcmp(op, "own")) {
		if ((rc = shoal_put_bytes(c, name, "mine", 4, 0, &id)) == 0 &&
		    (rc = shoal_get(c, id, &o)) == 0) {
			shoal_object_release(o);
			rc = shoal_delete_id(c, id);
		}
	} else {
		return shoal_ext_fail(ctx, SHOAL_EINVAL, "no op %s", op);
	}
	*out = shoal_v_int(shoal_ext_vbuf(ctx), rc);
	return 0;
}

int shoal_ext_init(shoal_ext_registry *r);

static int64_t err_of(int rc)
{
	return rc == 0 ? 0 : errno ? errno : -1;
}

/* The rings' mapping in /proc/self/maps: its range and its size. */
static int rings_range(unsigned long *lo, unsigned long *hi)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int found = -1;
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "shoal-ext-rings") && sscanf(line, "%lx-%lx", lo, hi) == 2) {
			found = 0;
			break;
		}
	if (f)
		fclose(f);
	return found;
}

/* Whether fd is the rings' memfd (the runner closes it once mapped; the
 * number may have been reused since). */
static bool is_rings(int fd)
{
	char path[64], to[256];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, to, sizeof(to) - 1);
	if (n < 0)
		return false;
	to[n] = 0;
	return strstr(to, "shoal-ext-rings") != NULL;
}

/* truncate_rings(): truncates its rings to 0 (and grows them) through
 * every path it has: fd 4, /proc/self/fd/4, /proc/self/map_files/<range>.
 * Returns [errno of each path (0: it worked), the size seen after (-1:
 * not visible), the mapping's size]; then touches every page of the
 * mapping, so a truncation that worked kills the extension here too. */
static int truncate_rings(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	unsigned long lo, hi;
	if (rings_range(&lo, &hi) != 0)
		return shoal_ext_fail(ctx, SHOAL_ENOENT, "no rings mapping in /proc/self/maps");
	int64_t e_fd = EBADF, e_procfd = ENOENT, e_map = ENOENT, size = -1;
	errno = 0;
	if (is_rings(4)) {
		e_fd = err_of(ftruncate(4, 0));
		if (e_fd)
			e_fd = err_of(ftruncate(4, (off_t)(hi - lo) * 2));
		int fd = open("/proc/self/fd/4", O_RDWR | O_CLOEXEC);
		e_procfd = fd < 0 ? errno : err_of(ftruncate(fd, 0));
		if (fd >= 0)
			close(fd);
	}
	char path[128];
	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", lo, hi);
	errno = 0;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC), e_map = errno;
	if (fd >= 0) {
		e_map = err_of(ftruncate(fd, 0));
		struct stat st;
		if (fstat(fd, &st) == 0)
			size = st.st_size;
		close(fd);
	}
	volatile unsigned char sum = 0;
	for (unsigned long p = lo; p < hi; p += 4096)
		sum ^= *(volatile unsigned char *)p;
	(void)sum;
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 5);
	shoal_v_set(*out, 0, shoal_v_int(vb, e_fd));
	shoal_v_set(*out, 1, shoal_v_int(vb, e_procfd));
	shoal_v_set(*out, 2, shoal_v_int(vb, e_map));
	shoal_v_set(*out, 3, shoal_v_int(vb, size));
	shoal_v_set(*out, 4, shoal_v_int(vb, (int64_t)(hi - lo)));
	return 0;
}

/* io_uring(): [errno of io_uring_setup, of io_uring_enter, of
 * io_uring_register] (0: allowed). A ring it gets could make sockets
 * with IORING_OP_SOCKET, which no socket() rule sees. */
static int uring(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	errno = 0;
	long fd = syscall(__NR_io_uring_setup, 8, &p);
	int64_t e_setup = fd >= 0 ? 0 : errno;
	if (fd >= 0)
		close((int)fd);
	errno = 0;
	int64_t e_enter = syscall(__NR_io_uring_enter, -1, 0, 0, 0, NULL, 0) == 0 ? 0 : errno;
	errno = 0;
	int64_t e_reg = syscall(__NR_io_uring_register, -1, 0, NULL, 0) == 0 ? 0 : errno;
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 3);
	shoal_v_set(*out, 0, shoal_v_int(vb, e_setup));
	shoal_v_set(*out, 1, shoal_v_int(vb, e_enter));
	shoal_v_set(*out, 2, shoal_v_int(vb, e_reg));
	return 0;
}

static int64_t sock_err(int family, int type)
{
	errno = 0;
	int fd = socket(family, type, 0);
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

/* net(port): [socket(AF_INET) errno, connect to 127.0.0.1:port errno,
 * AF_INET6, AF_PACKET, AF_NETLINK, AF_UNIX] (0: allowed). */
static int net(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int port = a && a->type == SHOAL_V_INT ? (int)a->v.i : 0;
	int64_t e[6];
	errno = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	e[0] = fd >= 0 ? 0 : errno;
	e[1] = e[0];
	if (fd >= 0) {
		struct sockaddr_in sa = {.sin_family = AF_INET,
					 .sin_port = htons((uint16_t)port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		errno = 0;
		e[1] = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : errno;
		close(fd);
	}
	e[2] = sock_err(AF_INET6, SOCK_STREAM);
	e[3] = sock_err(AF_PACKET, SOCK_RAW);
	e[4] = sock_err(AF_NETLINK, SOCK_RAW);
	e[5] = sock_err(AF_UNIX, SOCK_STREAM);
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 6);
	for (int i = 0; i < 6; i++)
		shoal_v_set(*out, (uint32_t)i, shoal_v_int(vb, e[i]));
	return 0;
}

static int64_t int_at(const shoal_value *a, uint32_t i)
{
	return a && a->type == SHOAL_V_ARRAY && i < a->n && a->v.items[i].type == SHOAL_V_INT
		       ? a->v.items[i].v.i
		       : 0;
}

/* poke_mem([pid, address, value]): writes value (8 bytes) at address in
 * process pid through /proc/pid/mem. [errno of the open, of the write]. */
static int poke_mem(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%lld/mem", (long long)int_at(a, 0));
	int64_t v = int_at(a, 2), e_open, e_write = -1;
	errno = 0;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	e_open = fd >= 0 ? 0 : errno;
	if (fd >= 0) {
		errno = 0;
		e_write = pwrite(fd, &v, sizeof(v), (off_t)int_at(a, 1)) == (ssize_t)sizeof(v)
				  ? 0
				  : errno;
		close(fd);
	}
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 2);
	shoal_v_set(*out, 0, shoal_v_int(vb, e_open));
	shoal_v_set(*out, 1, shoal_v_int(vb, e_write));
	return 0;
}

/* host_fds(pid): [errno of listing /proc/pid/fd, of reopening its fd 0
 * and fd 1, of opening /proc/pid/root/etc/hostname] (0: it could). */
static int host_fds(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	long long pid = a && a->type == SHOAL_V_INT ? (long long)a->v.i : 0;
	char path[96];
	int64_t e[4];
	snprintf(path, sizeof(path), "/proc/%lld/fd", pid);
	errno = 0;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	e[0] = fd >= 0 ? 0 : errno;
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "/proc/%lld/fd/%d", pid, i);
		errno = 0;
		fd = open(path, O_RDWR | O_CLOEXEC);
		e[1 + i] = fd >= 0 ? 0 : errno;
		if (fd >= 0)
			close(fd);
	}
	snprintf(path, sizeof(path), "/proc/%lld/root/etc/hostname", pid);
	errno = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	e[3] = fd >= 0 ? 0 : errno;
	if (fd >= 0)
		close(fd);
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 4);
	for (int i = 0; i < 4; i++)
		shoal_v_set(*out, (uint32_t)i, shoal_v_int(vb, e[i]));
	return 0;
}

/* caps(): [CapInh, CapPrm, CapEff, CapBnd, CapAmb, real uid, effective
 * uid] from its /proc/self/status. */
static int caps(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	static const char *const keys[] = {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"};
	int64_t v[7] = {-1, -1, -1, -1, -1, -1, -1};
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	while (f && fgets(line, sizeof(line), f)) {
		for (int i = 0; i < 5; i++)
			if (!strncmp(line, keys[i], strlen(keys[i])))
				v[i] = (int64_t)strtoull(line + strlen(keys[i]), NULL, 16);
		long long r, e2;
		if (sscanf(line, "Uid: %lld %lld", &r, &e2) == 2)
			v[5] = r, v[6] = e2;
	}
	if (f)
		fclose(f);
	else
		return shoal_ext_fail(ctx, SHOAL_EIO, "no /proc/self/status: %s", strerror(errno));
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 7);
	for (int i = 0; i < 7; i++)
		shoal_v_set(*out, (uint32_t)i, shoal_v_int(vb, v[i]));
	return 0;
}

/* escape_cgroup(): writes itself ("0": the writer) into the root cgroup
 * of each hierarchy; [errno of each] (0: it moved). */
static int escape_cgroup(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	static const char *const roots[] = {
		"/sys/fs/cgroup/memory/cgroup.procs", "/sys/fs/cgroup/unified/cgroup.procs",
		"/sys/fs/cgroup/pids/cgroup.procs", "/sys/fs/cgroup/cgroup.procs"};
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 4);
	for (int i = 0; i < 4; i++) {
		errno = 0;
		int fd = open(roots[i], O_WRONLY | O_CLOEXEC);
		int64_t e = fd >= 0 ? 0 : errno;
		if (fd >= 0) {
			errno = 0;
			e = write(fd, "0\n", 2) == 2 ? 0 : errno;
			close(fd);
		}
		shoal_v_set(*out, (uint32_t)i, shoal_v_int(vb, e));
	}
	return 0;
}

static _Noreturn void sleep_forever(void)
{
	for (;;)
		pause();
}

/* break_doorbell(ms): puts another eventfd over its doorbell (fd 5), so
 * its rings of the host go nowhere, sleeps ms (the host falls asleep on
 * the doorbell meanwhile), then returns 1 normally. */
static int break_doorbell(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int fd = eventfd(0, EFD_CLOEXEC);
	if (fd < 0 || dup2(fd, 5) != 5)
		return shoal_ext_fail(ctx, SHOAL_EIO, "dup2 over the doorbell: %s",
				      strerror(errno));
	close(fd);
	int64_t ms = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	usleep((useconds_t)(ms * 1000));
	*out = shoal_v_int(shoal_ext_vbuf(ctx), 1);
	return 0;
}

/* close_replies(): marks its reply ring closed, as if it had gone, and
 * lives on without a word: a host that took that for a death and waited
 * for the process would wait forever. */
static int close_replies(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	(void)out;
	unsigned long lo, hi;
	if (rings_range(&lo, &hi) != 0)
		return shoal_ext_fail(ctx, SHOAL_ENOENT, "no rings in /proc/self/maps");
	/* a ring is its 512-byte header and its data (cap at byte 264); the
	 * reply ring is the second; closed is at byte 272 of a header */
	uint64_t cap;
	memcpy(&cap, (const void *)(lo + 264), 8);
	volatile uint32_t *closed = (volatile uint32_t *)(lo + 512 + cap + 272);
	*closed = 1;
	sleep_forever();
}

/* stdio(): what its descriptors 0 and 1 are: [bytes read from stdin (0:
 * end of file), device and inode of stdout]. */
static int stdio(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	char c;
	ssize_t n = read(0, &c, 1);
	struct stat st = {0};
	fstat(1, &st);
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 3);
	shoal_v_set(*out, 0, shoal_v_int(vb, n < 0 ? -errno : n));
	shoal_v_set(*out, 1, shoal_v_int(vb, (int64_t)st.st_dev));
	shoal_v_set(*out, 2, shoal_v_int(vb, (int64_t)st.st_ino));
	return 0;
}

/* say(text): text on stdout, then on stderr with an escape sequence and
 * no newline at the end; returns nil. */
static int say(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx, (void)out;
	const char *t = a && a->type == SHOAL_V_STR ? a->v.s : "";
	printf("%s out\n", t);
	fflush(stdout);
	fprintf(stderr, "%s err\n\x1b[31mred\x1b[0m tail", t);
	fflush(stderr);
	return 0;
}

static void *thread_main(void *arg)
{
	return arg;
}

/* usable(): what an ordinary extension does must still work under the
 * allow-list: [a thread (clone3 says ENOSYS, glibc falls back to clone),
 * fork and exec of /bin/true, 64 MiB of memory, a file, a socketpair,
 * getrandom] as 0 or the errno. */
static int usable(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)a;
	int64_t e[6];
	pthread_t t;
	void *got = NULL;
	int rc = pthread_create(&t, NULL, thread_main, &e);
	e[0] = rc ? rc : pthread_join(t, &got) ? -1 : got == &e ? 0 : -2;
	pid_t pid = fork();
	if (pid == 0) {
		char *argv[] = {"true", NULL}, *envp[] = {NULL};
		execve("/bin/true", argv, envp);
		_exit(100 + errno);
	}
	int st = 0;
	e[1] = pid < 0			     ? errno
	       : waitpid(pid, &st, 0) != pid ? errno
	       : WIFEXITED(st)		     ? WEXITSTATUS(st)
					     : -3;
	char *m = malloc(64u << 20);
	if (m)
		memset(m, 1, 64u << 20);
	e[2] = m ? 0 : ENOMEM;
	free(m);
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	e[3] = fd >= 0 ? 0 : errno;
	if (fd >= 0)
		close(fd);
	int sv[2];
	e[4] = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 ? 0 : errno;
	if (e[4] == 0)
		close(sv[0]), close(sv[1]);
	char r[16];
	e[5] = syscall(SYS_getrandom, r, sizeof(r), 0) == (long)sizeof(r) ? 0 : errno;
	shoal_vbuf *vb = shoal_ext_vbuf(ctx);
	*out = shoal_v_array(vb, 6);
	for (int i = 0; i < 6; i++)
		shoal_v_set(*out, (uint32_t)i, shoal_v_int(vb, e[i]));
	return 0;
}

/* nap(ms): sleeps, deaf to the host's asking it to give up. */
static int nap(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	(void)ctx, (void)out;
	int64_t ms = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	usleep((useconds_t)(ms * 1000));
	return 0;
}

/* fork_tree(n): n processes that sleep forever, every other one a daemon
 * (setsid and a second fork, its parent gone): what an extension leaves
 * behind when it forgets, or wants, to outlive its host. Named (comm)
 * $SHOAL_ORPHAN_COMM, when set, so a test can count them. Returns n. */
static int fork_tree(shoal_ext_ctx *ctx, const shoal_value *a, shoal_value **out)
{
	int64_t n = a && a->type == SHOAL_V_INT ? a->v.i : 0;
	const char *name = getenv("SHOAL_ORPHAN_COMM");
	if (name)
		prctl(PR_SET_NAME, name); /* this process and, by inheritance, the tree */
	for (int64_t i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return shoal_ext_fail(ctx, SHOAL_EAGAIN, "fork %lld: %s", (long long)i,
					      strerror(errno));
		if (pid == 0) {
			if (i % 2 == 0)
				sleep_forever();
			setsid();
			if (fork() == 0)
				sleep_forever();
			_exit(0);
		}
		if (i % 2)
			waitpid(pid, NULL, 0);
	}
	*out = shoal_v_int(shoal_ext_vbuf(ctx), n);
	return 0;
}

int shoal_ext_init(shoal_ext_registry *r)
{
	int rc = 0;
	rc |= shoal_ext_register(r, "fork_tree", fork_tree);
	rc |= shoal_ext_register(r, "store_try", store_try);
	rc |= shoal_ext_register(r, "echo_tensor", echo_tensor);
	rc |= shoal_ext_register(r, "nap", nap);
	rc |= shoal_ext_register(r, "usable", usable);
	rc |= shoal_ext_register(r, "say", say);
	rc |= shoal_ext_register(r, "break_doorbell", break_doorbell);
	rc |= shoal_ext_register(r, "close_replies", close_replies);
	rc |= shoal_ext_register(r, "stdio", stdio);
	rc |= shoal_ext_register(r, "poke_mem", poke_mem);
	rc |= shoal_ext_register(r, "host_fds", host_fds);
	rc |= shoal_ext_register(r, "caps", caps);
	rc |= shoal_ext_register(r, "escape_cgroup", escape_cgroup);
	rc |= shoal_ext_register(r, "io_uring", uring);
	rc |= shoal_ext_register(r, "net", net);
	rc |= shoal_ext_register(r, "truncate_rings", truncate_rings);
	return rc;
}
