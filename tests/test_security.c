/* Attacks on the on-host promises, performed for real, as root and as an
 * unprivileged user (a child that drops to uid/gid 65534): another user
 * squatting the default socket directory or a socket path, a listener that
 * never answers, a client that reopens the store's read-only arena
 * writable, a client that truncates its rings under a daemon, and members
 * of the store's group through supplementary groups. Each check looks at
 * the effect (the bytes still there, the daemon still serving), not only
 * at a return code. Servers run in their own processes, forked before any
 * thread starts, so that a SIGBUS kills them, not the test. */
#include "test.h"

#include "ring/link.h"
#include "ring/msg.h"
#include "shm/shm.h"
#include "store/proto.h"
#include "tasks/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534
#define OTHER_GID 65533 /* a group nobody is in: the store's group */

/* A directory every test user can reach: sticky and world-writable like
 * /tmp when open, else only enterable by others. */
static void make_dir(char *dir, size_t len, const char *what, mode_t mode)
{
	snprintf(dir, len, "/tmp/shoal-sec-%s-XXXXXX", what);
	CHECK(mkdtemp(dir) != NULL);
	CHECK_EQ(chmod(dir, mode), 0);
}

static void rm_rf(const char *dir)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
}

/* ---- servers in processes of their own ---- */

typedef struct server {
	pid_t pid;
	char path[160];
} server;

typedef struct server_cfg {
	const char *path;
	rlim_t nofile; /* 0: as inherited */
	gid_t group;
	bool controller;
	int ready; /* pipe: the child says it serves */
} server_cfg;

static void server_main(void *arg)
{
	server_cfg *cfg = arg;
	int rc;
	if (cfg->nofile) {
		struct rlimit l = {cfg->nofile, cfg->nofile};
		CHECK_EQ(setrlimit(RLIMIT_NOFILE, &l), 0);
	}
	if (cfg->controller) {
		shoal_controller_opts o;
		shoal_controller_opts_init(&o);
		o.socket = cfg->path;
		shoal_controller *ctl;
		rc = shoal_controller_open(&ctl, &o);
	} else {
		shoal_store_opts o;
		shoal_store_opts_init(&o);
		o.socket_path = cfg->path;
		o.size = 64 << 20;
		o.group = cfg->group;
		shoal_store *s;
		rc = shoal_store_open_embedded(&s, &o);
	}
	char c = rc == 0 ? 'y' : 'n';
	if (write(cfg->ready, &c, 1) != 1 || rc != 0)
		_exit(3);
	for (;;)
		pause();
}

/* Starts a store (or a controller) at path, served by uid, with at most
 * nofile descriptors (0: as inherited). */
static void server_start_n(server *sv, const char *path, uid_t uid, gid_t group, bool controller,
			   rlim_t nofile)
{
	int p[2];
	CHECK_EQ(pipe(p), 0);
	snprintf(sv->path, sizeof(sv->path), "%s", path);
	server_cfg cfg = {.path = sv->path,
			  .nofile = nofile,
			  .group = group,
			  .controller = controller,
			  .ready = p[1]};
	fflush(NULL);
	sv->pid = fork();
	CHECK(sv->pid >= 0);
	if (sv->pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (uid != 0)
			sh_test_drop_to(uid, uid, NULL, 0);
		server_main(&cfg);
	}
	close(p[1]);
	char c = 0;
	CHECK_EQ(read(p[0], &c, 1), 1);
	CHECK_EQ(c, 'y');
	close(p[0]);
}

static void server_start(server *sv, const char *path, uid_t uid, gid_t group, bool controller)
{
	server_start_n(sv, path, uid, group, controller, 0);
}

/* The server must still be running (no SIGBUS, no SIGSEGV). */
static void server_alive(const server *sv)
{
	int st;
	pid_t r = waitpid(sv->pid, &st, WNOHANG);
	if (r == sv->pid)
		sh_test_fail(__FILE__, __LINE__, "the server died: %s %d",
			     WIFSIGNALED(st) ? "signal" : "exit",
			     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	CHECK_EQ(r, 0);
}

static void server_stop(server *sv)
{
	server_alive(sv);
	kill(sv->pid, SIGKILL);
	waitpid(sv->pid, NULL, 0);
}

/* ---- a hostile client's own set-up: it keeps every descriptor ---- */

typedef struct raw_link {
	int sock, rings, efd[2], bell, extra;
	size_t one; /* bytes of one ring */
} raw_link;

static int raw_connect(raw_link *r, const char *path, uint32_t proto, uint32_t version,
		       size_t ninfo, int nextra)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	r->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (r->sock < 0 || connect(r->sock, (struct sockaddr *)&a, sizeof(a)) != 0)
		return -errno;
	uint32_t hello[3] = {SH_LINK_MAGIC, proto, version};
	uint64_t words[1 + SH_LINK_INFO_MAX];
	int fds[SH_LINK_FDS + SH_LINK_FDS_MAX], nfds = 0;
	size_t got = 0;
	int rc = sh_fd_send(r->sock, hello, sizeof(hello), NULL, 0);
	if (rc == 0)
		rc = sh_fd_recv(r->sock, words, (1 + ninfo) * 8, &got, fds, SH_LINK_FDS + nextra,
				&nfds);
	if (rc)
		return rc;
	if (got != (1 + ninfo) * 8 || nfds != SH_LINK_FDS + nextra)
		return SHOAL_EPROTO;
	r->one = words[0];
	r->rings = fds[0];
	r->efd[0] = fds[1];
	r->efd[1] = fds[2];
	r->bell = fds[3];
	r->extra = nextra ? fds[SH_LINK_FDS] : -1;
	return 0;
}

static void raw_close(raw_link *r)
{
	int fds[] = {r->sock, r->rings, r->efd[0], r->efd[1], r->bell, r->extra};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* ---- 1. the default socket directory ---- */

static char xdg[128];

static void squat_dir(void *arg)
{
	(void)arg;
	char d[200];
	snprintf(d, sizeof(d), "%s/shoal", xdg);
	CHECK_EQ(mkdir(d, 0777), 0);
	CHECK_EQ(chmod(d, 0777), 0);
}

static void dir_refused(void *arg)
{
	(void)arg;
	char d[200];
	CHECK_RC(shoal_socket_dir(d, sizeof(d)), SHOAL_EACCES);
	/* and nothing is served from it: a store with a default path fails */
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	shoal_store *s;
	CHECK_RC(shoal_store_open_embedded(&s, &o), SHOAL_EACCES);
}

SH_TEST(default_socket_dir_is_private)
{
	make_dir(xdg, sizeof(xdg), "xdg", 01777);
	CHECK_EQ(setenv("XDG_RUNTIME_DIR", xdg, 1), 0);
	char d[200], want[200];
	snprintf(want, sizeof(want), "%s/shoal", xdg);
	CHECK_OK(shoal_socket_dir(d, sizeof(d)));
	CHECK_STR(d, want);
	struct stat st;
	CHECK_EQ(lstat(d, &st), 0);
	CHECK(S_ISDIR(st.st_mode));
	CHECK_EQ(st.st_mode & 0777, 0700);
	CHECK_EQ(st.st_uid, geteuid());
	/* made again and checked again: still fine */
	CHECK_OK(shoal_socket_dir(d, sizeof(d)));

	/* Opened to others (by mistake or by a shared umask): refused. */
	CHECK_EQ(chmod(d, 0755), 0);
	CHECK_RC(shoal_socket_dir(d, sizeof(d)), SHOAL_EACCES);
	CHECK_EQ(rmdir(d), 0);

	/* A symlink to a directory of ours: refused (it could point anywhere). */
	char real[200];
	snprintf(real, sizeof(real), "%s/real", xdg);
	CHECK_EQ(mkdir(real, 0700), 0);
	CHECK_EQ(symlink(real, want), 0);
	CHECK_RC(shoal_socket_dir(d, sizeof(d)), SHOAL_EACCES);
	CHECK_EQ(unlink(want), 0);

	/* Another user made it first: root refuses it, and serves nothing. */
	CHECK_EQ(sh_test_run_as(NOBODY, NULL, 0, squat_dir, NULL), 0);
	CHECK_EQ(sh_test_run_as(0, NULL, 0, dir_refused, NULL), 0);
	CHECK_EQ(rmdir(want), 0);

	/* The other way round: root's directory, an unprivileged user. */
	CHECK_OK(shoal_socket_dir(d, sizeof(d)));
	CHECK_EQ(sh_test_run_as(NOBODY, NULL, 0, dir_refused, NULL), 0);
	rm_rf(xdg);
}

/* ---- 1. a client checks who serves the socket ---- */

typedef struct squatter {
	const char *path;
	int report; /* pipe: how many bytes the squatter received */
	int ready;
} squatter;

/* A listener at path that records every byte a client sends it. */
static void squatter_main(void *arg)
{
	squatter *q = arg;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", q->path);
	int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	CHECK(l >= 0);
	CHECK_EQ(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(chmod(q->path, 0666), 0);
	CHECK_EQ(listen(l, 4), 0);
	CHECK_EQ(write(q->ready, "y", 1), 1);
	long total = 0;
	/* the store's client, then the task farm's */
	for (int i = 0; i < 2; i++) {
		int c = accept(l, NULL, NULL);
		CHECK(c >= 0);
		struct timeval tv = {.tv_sec = 5};
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		char buf[4096];
		ssize_t n;
		while ((n = recv(c, buf, sizeof(buf), 0)) > 0)
			total += n;
		close(c);
	}
	CHECK_EQ(write(q->report, &total, sizeof(total)), (ssize_t)sizeof(total));
}

typedef struct connect_case {
	const char *path;
	uid_t server_uid;
	int want;
} connect_case;

static void connect_as(void *arg)
{
	connect_case *k = arg;
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	o.server_uid = k->server_uid;
	shoal_client *c = NULL;
	CHECK_RC(shoal_connect_with(&c, k->path, &o), k->want);
	if (c) {
		shoal_store_stat st;
		CHECK_OK(shoal_store_stat_get(c, &st));
		shoal_disconnect(c);
	}
	/* the task farm's clients check the same way */
	if (k->want == SHOAL_EACCES) {
		shoal_farm *f = NULL;
		CHECK(shoal_farm_connect(&f, k->path) != 0);
	}
}

/* A squatter of uid squat_uid at a path a client of uid client_uid uses:
 * the client must refuse before it sends a byte. */
static void squat_socket(uid_t squat_uid, uid_t client_uid)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "squat", 01777);
	snprintf(path, sizeof(path), "%s/shoald.sock", dir);
	int rep[2], rdy[2];
	CHECK_EQ(pipe(rep), 0);
	CHECK_EQ(pipe(rdy), 0);
	squatter q = {.path = path, .report = rep[1], .ready = rdy[1]};
	fflush(NULL);
	pid_t p = fork();
	CHECK(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		sh_test_drop_to(squat_uid, squat_uid, NULL, 0);
		squatter_main(&q);
		_exit(0);
	}
	close(rep[1]);
	close(rdy[1]);
	char c;
	CHECK_EQ(read(rdy[0], &c, 1), 1);
	connect_case k = {.path = path, .server_uid = (uid_t)-1, .want = SHOAL_EACCES};
	CHECK_EQ(sh_test_run_as(client_uid, NULL, 0, connect_as, &k), 0);
	long total = -1;
	CHECK_EQ(read(rep[0], &total, sizeof(total)), (ssize_t)sizeof(total));
	CHECK_EQ(total, 0); /* not one byte reached the squatter */
	int st;
	CHECK(waitpid(p, &st, 0) == p);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(rep[0]);
	close(rdy[0]);
	rm_rf(dir);
}

SH_TEST(client_refuses_a_squatter)
{
	squat_socket(NOBODY, 0);	  /* another user squats root's path */
	squat_socket(NOBODY - 1, NOBODY); /* and an unprivileged user's */
}

SH_TEST(client_accepts_root_its_own_uid_and_the_uid_named)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "named", 01777);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	/* a store of nobody's: refused unless named */
	server sv;
	server_start(&sv, path, NOBODY, (gid_t)-1, false);
	connect_case k = {.path = path, .server_uid = (uid_t)-1, .want = SHOAL_EACCES};
	CHECK_EQ(sh_test_run_as(0, NULL, 0, connect_as, &k), 0);
	k.server_uid = NOBODY;
	k.want = 0;
	/* root may connect to it (the store admits root), when it names it */
	CHECK_EQ(sh_test_run_as(0, NULL, 0, connect_as, &k), 0);
	/* its own uid, unnamed */
	k.server_uid = (uid_t)-1;
	CHECK_EQ(sh_test_run_as(NOBODY, NULL, 0, connect_as, &k), 0);
	server_stop(&sv);
	unlink(path);
	/* a root store that admits nobody's group: nobody connects to root */
	server_start(&sv, path, 0, NOBODY, false);
	CHECK_EQ(sh_test_run_as(NOBODY, NULL, 0, connect_as, &k), 0);
	server_stop(&sv);
	rm_rf(dir);
}

/* The command line: a squatter's store is refused, unless its uid is named. */
static int run_cli(const char *cmd, const char *path, const char *uid, char *out, size_t len)
{
	char exe[4096];
	sh_test_bin(exe, sizeof(exe), "tools/shoal");
	char *argv[] = {
		exe,	     (char *)cmd, "--socket", (char *)path, uid ? "--server-uid" : NULL,
		(char *)uid, NULL};
	return sh_test_run(argv, NULL, out, len);
}

SH_TEST(cli_refuses_a_squatters_store_unless_named)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "cli", 01777);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, NOBODY, (gid_t)-1, false);
	char out[4096];
	CHECK_EQ(run_cli("stat", path, NULL, out, sizeof(out)), 4); /* no store of ours there */
	CHECK(strstr(out, "served by uid 65534") != NULL);
	CHECK(strstr(out, "--server-uid") != NULL);
	CHECK_EQ(run_cli("stat", path, "65534", out, sizeof(out)), 0);
	CHECK(strstr(out, "capacity") != NULL);
	CHECK_EQ(run_cli("stat", path, "x", out, sizeof(out)), 2);
	server_stop(&sv);
	rm_rf(dir);
}

/* ---- 7. waits with a deadline ---- */

SH_TEST(connect_to_a_silent_listener_times_out)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "silent", 0700);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	CHECK(l >= 0);
	CHECK_EQ(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(listen(l, 4), 0); /* never accepts, never answers */
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	o.timeout_ns = 300 * 1000000LL;
	shoal_client *c;
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_connect_with(&c, path, &o), SHOAL_ETIMEDOUT);
	int64_t took = shoal_now_ns() - t0;
	CHECK(took >= 250 * 1000000LL && took < 5000 * 1000000LL);
	close(l);
	rm_rf(dir);
}

SH_TEST(a_stopped_store_times_requests_out)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "stopped", 0700);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, 0, (gid_t)-1, false);
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	o.timeout_ns = 300 * 1000000LL;
	shoal_client *c;
	CHECK_OK(shoal_connect_with(&c, path, &o));
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	CHECK_EQ(kill(sv.pid, SIGSTOP), 0);
	int ws;
	CHECK(waitpid(sv.pid, &ws, WUNTRACED) == sv.pid && WIFSTOPPED(ws)); /* all of it */
	int64_t t0 = shoal_now_ns();
	CHECK_RC(shoal_store_stat_get(c, &st), SHOAL_ETIMEDOUT);
	CHECK(shoal_now_ns() - t0 < 5000 * 1000000LL);
	CHECK(strstr(shoal_client_error(c), "did not answer") != NULL);
	CHECK_EQ(kill(sv.pid, SIGCONT), 0);
	/* the reply that comes late must not be taken for the next one's */
	CHECK(shoal_store_stat_get(c, &st) != 0);
	shoal_disconnect(c);
	CHECK_OK(shoal_connect_with(&c, path, &o));
	CHECK_OK(shoal_store_stat_get(c, &st));
	shoal_disconnect(c);
	server_stop(&sv);
	rm_rf(dir);
}

/* ---- 2. the arena cannot be written by a client ---- */

static const char original[] = "sealed small object: must never change";

typedef struct arena_case {
	const char *path;
} arena_case;

/* Tries every way to write the arena; the victim's bytes are checked by
 * the caller afterwards, so a way that works shows as a changed object. */
static void attack_arena(void *arg)
{
	arena_case *k = arg;
	raw_link r;
	CHECK_OK(raw_connect(&r, k->path, SH_STORE_PROTO, SH_STORE_VERSION, 4, 1));
	int arena = r.extra;
	struct stat st;
	CHECK_EQ(fstat(arena, &st), 0);
	size_t size = (size_t)st.st_size;
	CHECK(size > 0);
	int wrote = 0;
	/* The descriptor we were given is read-only. */
	void *w = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, arena, 0);
	if (w != MAP_FAILED)
		memset(w, 'X', size), wrote++;
	void *ro = mmap(NULL, size, PROT_READ, MAP_SHARED, arena, 0);
	CHECK(ro != MAP_FAILED);
	if (mprotect(ro, size, PROT_READ | PROT_WRITE) == 0)
		memset(ro, 'X', size), wrote++;
	/* The reopen trick: read-write through /proc, and through the mapping
	 * (map_files: root only). */
	char p[64], mf[128];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", arena);
	snprintf(mf, sizeof(mf), "/proc/self/map_files/%lx-%lx", (unsigned long)ro,
		 (unsigned long)ro + size);
	int fds[2] = {open(p, O_RDWR), -1};
	if (geteuid() != 0)
		CHECK(fds[0] < 0 && errno == EACCES); /* the file's mode refuses it */
	fds[1] = open(mf, O_RDWR);
	for (int i = 0; i < 2; i++) {
		if (fds[i] < 0)
			continue;
		void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
		if (m != MAP_FAILED)
			memset(m, 'X', size), wrote++;
		for (off_t off = 0; off < (off_t)size; off += 4096)
			if (pwrite(fds[i], "X", 1, off) == 1)
				wrote++;
		if (fallocate(fds[i], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)size) ==
		    0)
			wrote++;
		if (ftruncate(fds[i], 0) == 0)
			wrote++;
		close(fds[i]);
	}
	if (madvise(ro, size, MADV_REMOVE) == 0)
		wrote++;
	/* The kernel's side of the defence is in force. */
	int seals = fcntl(arena, F_GET_SEALS);
	CHECK(seals >= 0 && (seals & F_SEAL_FUTURE_WRITE) && (seals & F_SEAL_SHRINK) &&
	      (seals & F_SEAL_GROW) && (seals & F_SEAL_SEAL));
	munmap(ro, size);
	raw_close(&r);
	CHECK_EQ(wrote, 0);
}

static void check_victim(const char *path, shoal_id id)
{
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, path));
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	const void *data;
	size_t size;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &data, &size));
	CHECK_EQ(size, sizeof(original));
	CHECK(memcmp(data, original, sizeof(original)) == 0);
	shoal_object_release(o);
	shoal_disconnect(c);
}

SH_TEST(arena_cannot_be_rewritten_by_a_client)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "arena", 0711);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, 0, NOBODY, false); /* nobody's group is admitted */
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, path));
	shoal_id id;
	CHECK_OK(shoal_put_bytes(c, "victim", original, sizeof(original), SHOAL_PERSIST, &id));
	shoal_disconnect(c);
	arena_case k = {.path = path};
	int root = sh_test_run_as(0, NULL, 0, attack_arena, &k);
	check_victim(path, id);
	CHECK_EQ(root, 0);
	int nobody = sh_test_run_as(NOBODY, NULL, 0, attack_arena, &k);
	check_victim(path, id);
	CHECK_EQ(nobody, 0);
	server_stop(&sv);
	rm_rf(dir);
}

/* ---- 3. rings a client shares cannot be resized under the daemon ---- */

typedef struct rings_case {
	const char *path;
	uint32_t proto, version;
	size_t ninfo;
	int nextra;
} rings_case;

/* Truncates (or grows) the rings every way it can, then rings both
 * doorbells: on rings that shrank, the daemon's next touch is a SIGBUS. */
static void attack_rings(void *arg)
{
	rings_case *k = arg;
	raw_link r;
	CHECK_OK(raw_connect(&r, k->path, k->proto, k->version, k->ninfo, k->nextra));
	int resized = 0;
	void *mem = mmap(NULL, 2 * r.one, PROT_READ | PROT_WRITE, MAP_SHARED, r.rings, 0);
	CHECK(mem != MAP_FAILED);
	memset((char *)mem + 512, 0xff, 64); /* garbage where the data goes */
	/* Through the descriptor, and reopened through /proc. */
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", r.rings);
	int again = open(p, O_RDWR);
	if (again >= 0 && ftruncate(again, 0) == 0)
		resized++;
	if (ftruncate(r.rings, (off_t)(4 * r.one)) == 0)
		resized++;
	if (ftruncate(r.rings, 0) == 0)
		resized++;
	if (again >= 0)
		close(again);
	uint64_t one = 1;
	CHECK_EQ(write(r.efd[0], &one, 8), 8);
	CHECK_EQ(write(r.efd[1], &one, 8), 8);
	usleep(50000);
	munmap(mem, 2 * r.one);
	struct stat st;
	CHECK_EQ(fstat(r.rings, &st), 0);
	int seals = fcntl(r.rings, F_GET_SEALS);
	raw_close(&r);
	CHECK_EQ(resized, 0);
	CHECK_EQ((size_t)st.st_size, 2 * r.one);
	CHECK(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) &&
	      (seals & F_SEAL_SEAL));
}

/* Starts a store (or a controller), lets attack run as a client of root
 * and, on the store (the controller admits its own uid and root only), of
 * nobody; after each the daemon must be alive and serve the next client at
 * once. */
static void client_attack_on(bool controller, void (*attack)(void *))
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "client", 0711);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, 0, NOBODY, controller);
	rings_case k = {.path = path,
			.proto = controller ? SH_TASKS_CLIENT : SH_STORE_PROTO,
			.version = controller ? SH_TASKS_VERSION : SH_STORE_VERSION,
			.ninfo = controller ? 1 : 4,
			.nextra = controller ? 0 : 1};
	for (int who = 0; who < (controller ? 1 : 2); who++) {
		int rc = sh_test_run_as(who ? NOBODY : 0, NULL, 0, attack, &k);
		usleep(200000); /* the daemon has seen the client go */
		server_alive(&sv);
		CHECK_EQ(rc, 0);
		if (controller) {
			shoal_farm *f;
			CHECK_OK(shoal_farm_connect_until(&f, path,
							  shoal_deadline_in(2000000000LL)));
			shoal_farm_close(f);
		} else {
			shoal_connect_opts o;
			shoal_connect_opts_init(&o);
			o.timeout_ns = 2000000000LL;
			shoal_client *c;
			CHECK_OK(shoal_connect_with(&c, path, &o));
			shoal_id id;
			CHECK_OK(shoal_put_bytes(c, NULL, "x", 1, 0, &id));
			shoal_disconnect(c);
		}
	}
	server_stop(&sv);
	rm_rf(dir);
}

SH_TEST(a_client_cannot_resize_the_stores_rings)
{
	client_attack_on(false, attack_rings);
}

SH_TEST(a_client_cannot_resize_the_controllers_rings)
{
	client_attack_on(true, attack_rings);
}

/* The doorbells a client rings: it clears O_NONBLOCK on them, fills (or, on
 * an eventfd, saturates) them, raises every wait flag of its rings so the
 * daemon rings back, and leaves. A daemon that wrote to or read from a
 * descriptor the client shares would block its whole thread there. */
static void attack_doorbells(void *arg)
{
	rings_case *k = arg;
	raw_link r;
	CHECK_OK(raw_connect(&r, k->path, k->proto, k->version, k->ninfo, k->nextra));
	unsigned char *mem = mmap(NULL, 2 * r.one, PROT_READ | PROT_WRITE, MAP_SHARED, r.rings, 0);
	CHECK(mem != MAP_FAILED);
	for (int i = 0; i < 2; i++) {
		int fd = r.efd[i];
		CHECK_EQ(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
		uint64_t most = 0xfffffffffffffffeull, one = 1;
		/* bounded: the daemon drains a pipe while we fill it */
		if (write(fd, &most, 8) == 8)
			for (int n = 0; n < 20000 && write(fd, &one, 8) == 8; n++)
				;
		CHECK_EQ(fcntl(fd, F_SETFL, 0), 0); /* the daemon's writes would block */
		/* data_wait and space_wait of both rings (lines 2 and 3): a
		 * thread's futex first, then a fiber's doorbell (the one the
		 * daemon made for us: it rings its own end of it) */
		for (size_t ring = 0; ring < 2; ring++)
			for (size_t line = 2; line < 4; line++)
				mem[ring * r.one + line * 64] =
					i ? (unsigned char)SH_RING_WAIT_BELL : 1;
	}
	/* made blocking (the socket's flag is the daemon's too) and filled */
	CHECK_EQ(fcntl(r.bell, F_SETFL, 0), 0);
	static const char one = 1;
	for (int n = 0; n < 100000 && send(r.bell, &one, 1, MSG_DONTWAIT) == 1; n++)
		;
	munmap(mem, 2 * r.one);
	raw_close(&r);
}

SH_TEST(a_client_cannot_block_the_store_through_its_doorbells)
{
	client_attack_on(false, attack_doorbells);
}

SH_TEST(a_client_cannot_block_the_controller_through_its_doorbells)
{
	client_attack_on(true, attack_doorbells);
}

/* A store segment's creator cannot shrink it before the seal, which
 * would leave readers mapping pages past its end. */
SH_TEST(a_segment_cannot_be_shrunk_by_its_creator)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "seg", 0700);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, 0, (gid_t)-1, false);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, path));
	shoal_builder *b;
	CHECK_OK(shoal_builder_create(c, "bytes", &b));
	void *data;
	CHECK_OK(shoal_node_add_blob(shoal_builder_root(b), 1 << 20, &data));
	memset(data, 7, 1 << 20);
	/* find the segment's descriptor the way an attacker would */
	int seg = -1;
	for (int fd = 3; fd < 1024 && seg < 0; fd++) {
		char p[64], l[128];
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(p, l, sizeof(l) - 1);
		if (n > 0 && (l[n] = 0, strstr(l, "memfd:shoal-segment")))
			seg = fd;
	}
	if (seg >= 0) {
		CHECK_EQ(ftruncate(seg, 0), -1);
	} else {
		/* the library closed it: through the mapping, as root may */
		char mf[128];
		snprintf(mf, sizeof(mf), "/proc/self/map_files/%lx-%lx", (unsigned long)data,
			 (unsigned long)data + (1 << 20));
		int fd = open(mf, O_RDWR);
		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, 0), -1);
		close(fd);
	}
	shoal_id id;
	CHECK_OK(shoal_builder_seal(b, "seg", 0, &id));
	shoal_object *o;
	CHECK_OK(shoal_get(c, id, &o));
	const void *p;
	size_t size;
	CHECK_OK(shoal_node_blob(shoal_object_root(o), 0, &p, &size));
	CHECK_EQ(((const unsigned char *)p)[size - 1], 7); /* no SIGBUS */
	shoal_object_release(o);
	shoal_disconnect(c);
	server_stop(&sv);
	rm_rf(dir);
}

/* ---- 12. the store's group, through supplementary groups ---- */

typedef struct group_case {
	const char *path;
	int want_ok;
} group_case;

static void connect_group(void *arg)
{
	group_case *k = arg;
	shoal_client *c = NULL;
	int rc = shoal_connect(&c, k->path);
	if (k->want_ok) {
		CHECK_OK(rc);
		shoal_store_stat st;
		CHECK_OK(shoal_store_stat_get(c, &st));
		shoal_disconnect(c);
	} else {
		CHECK(rc != 0);
	}
}

SH_TEST(group_admits_supplementary_members)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "group", 0711);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, 0, OTHER_GID, false);
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_gid, OTHER_GID);
	CHECK_EQ(st.st_mode & 0777, 0660);
	/* nobody, primary group nobody, a member of OTHER_GID besides */
	gid_t member[] = {NOBODY, OTHER_GID};
	group_case k = {.path = path, .want_ok = 1};
	CHECK_EQ(sh_test_run_as(NOBODY, member, 2, connect_group, &k), 0);
	/* without it: the socket's mode stops it, and so would the store */
	k.want_ok = 0;
	CHECK_EQ(sh_test_run_as(NOBODY, NULL, 0, connect_group, &k), 0);
	/* past the socket's mode (a copy of the socket's inode with the group
	 * open): the store itself refuses a non-member */
	CHECK_EQ(chmod(path, 0666), 0);
	CHECK_EQ(sh_test_run_as(NOBODY, NULL, 0, connect_group, &k), 0);
	server_stop(&sv);
	rm_rf(dir);
}

/* ---- 10. request buffers are bounded across connections ---- */

/* A client that sends all but the last 4 KiB of a 64 MiB request, then
 * stalls with its connection open. */
static void stall_mid_request(void *arg)
{
	const char *path = arg;
	sh_link l;
	uint64_t info[4];
	int arena;
	char why[256];
	CHECK_OK(sh_link_connect(&l, path, SH_STORE_PROTO, SH_STORE_VERSION, SH_STORE_RING_CAP,
				 info, 4, &arena, 1, why, sizeof(why)));
	size_t total = SH_STORE_REPLY_MAX;
	unsigned char *buf = calloc(total, 1);
	CHECK(buf != NULL);
	uint32_t body = (uint32_t)(total - SH_MSG_HDR);
	memcpy(buf + SH_MSG_LEN_AT, &body, 4);
	size_t done = 0;
	sh_msg_write_part(&l.up, buf, total - 4096, &done, shoal_deadline_in(3000000000LL));
	for (;;)
		pause();
}

static long vm_kib(pid_t pid, const char *key)
{
	char p[64], line[256];
	snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "r");
	CHECK(f != NULL);
	long v = -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = atol(line + strlen(key) + 1);
	fclose(f);
	return v;
}

SH_TEST_T(stalled_requests_stay_within_a_global_bound, 120)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "reqs", 0711);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start(&sv, path, 0, NOBODY, false); /* a 64 MiB store */
	long base = vm_kib(sv.pid, "VmRSS:");
	enum { N = 10 };
	pid_t kids[N];
	for (int i = 0; i < N; i++) {
		fflush(NULL);
		kids[i] = fork();
		CHECK(kids[i] >= 0);
		if (kids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (i % 2)
				sh_test_drop_to(NOBODY, NOBODY, NULL, 0);
			stall_mid_request(path);
		}
	}
	/* While they stall, others are served at once. */
	usleep(500000);
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, path));
	int64_t t0 = shoal_now_ns();
	shoal_store_stat st;
	CHECK_OK(shoal_store_stat_get(c, &st));
	CHECK(shoal_now_ns() - t0 < 2000000000LL);
	CHECK_EQ(st.clients, N + 1);
	sleep(3); /* every writer has written what it could */
	long peak = vm_kib(sv.pid, "VmHWM:");
	fprintf(stderr, "store grew by %ld MiB with %d requests stalled\n", (peak - base) / 1024,
		N);
	/* 10 x 64 MiB before the bound; now 2 x 64 MiB and rings at most */
	if (peak - base > 200 * 1024)
		sh_test_fail(__FILE__, __LINE__, "the store grew by %ld MiB for stalled requests",
			     (peak - base) / 1024);
	/* and the stalled ones are closed in the end */
	int64_t end = shoal_deadline_in(60000000000LL);
	do {
		usleep(200000);
		CHECK_OK(shoal_store_stat_get(c, &st));
	} while (st.clients > 1 && shoal_now_ns() < end);
	CHECK_EQ(st.clients, 1);
	shoal_disconnect(c);
	for (int i = 0; i < N; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
	server_stop(&sv);
	rm_rf(dir);
}

/* ---- descriptors: segments and connections cannot exhaust them ---- */

static void hog_descriptors(void *arg)
{
	const char *path = arg;
	shoal_client *c;
	CHECK_OK(shoal_connect(&c, path));
	/* segments, each a descriptor of the store's, until it says no */
	int made = 0, rc = 0;
	for (; made < 10000; made++) {
		shoal_builder *b;
		CHECK_OK(shoal_builder_create(c, "bytes", &b));
		if ((rc = shoal_builder_reserve(b, 4096)) != 0)
			break; /* the builder stays: its region is held */
	}
	CHECK_RC(rc, SHOAL_ENOSPC);
	CHECK(made > 10);
	/* connections kept open, until it says no */
	shoal_connect_opts o;
	shoal_connect_opts_init(&o);
	o.timeout_ns = 2000000000LL;
	shoal_client *more[400];
	int n = 0;
	while (n < 400 && shoal_connect_with(&more[n], path, &o) == 0)
		n++;
	CHECK(n < 400);
	/* tell the test, then hold everything until killed */
	CHECK_EQ(write(3, "y", 1), 1);
	for (;;)
		pause();
}

SH_TEST(descriptors_cannot_be_exhausted)
{
	char dir[64], path[96];
	make_dir(dir, sizeof(dir), "fds", 0711);
	snprintf(path, sizeof(path), "%s/s.sock", dir);
	server sv;
	server_start_n(&sv, path, 0, NOBODY, false, 512);
	int p[2];
	CHECK_EQ(pipe(p), 0);
	fflush(NULL);
	pid_t k = fork();
	CHECK(k >= 0);
	if (k == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 3);
		sh_test_drop_to(NOBODY, NOBODY, NULL, 0);
		hog_descriptors(path);
	}
	close(p[1]);
	char y;
	CHECK_EQ(read(p[0], &y, 1), 1);
	server_alive(&sv);
	/* it holds all the store will give; when it goes, all of it comes back */
	kill(k, SIGKILL);
	waitpid(k, NULL, 0);
	close(p[0]);
	shoal_client *c = NULL;
	int64_t end = shoal_deadline_in(20000000000LL);
	while (shoal_connect(&c, path) != 0 && shoal_now_ns() < end)
		usleep(100000);
	CHECK(c != NULL);
	shoal_id id;
	CHECK_OK(shoal_put_bytes(c, NULL, original, sizeof(original), 0, &id));
	shoal_disconnect(c);
	server_stop(&sv);
	rm_rf(dir);
}
