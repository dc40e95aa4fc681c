/* One manner for every program (issue 17): shoal and each of its
 * commands, shoald, shoal-ext and shoal-engine, run as real processes,
 * answer --help (a usage and a description on stdout, exit 0), --version
 * ("NAME VERSION") and a bad option (exit 2, one line on stderr naming it
 * and pointing to --help); security options refuse values they do not
 * know; shoal get's exit codes and --force; messages without protocol
 * words; a task controller from the shell: its log of engines, shoal stat
 * on its socket and over TCP, and an engine's default name. */
#include "test.h"

#include "rpc/ext_proto.h"

#include <shoal/tasks.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16], err[1 << 16];

/* Runs argv with env added, descriptors 3 and up closed, stdin
 * /dev/null; stdout into out and stderr into err; its exit status. */
static int run3(char *const argv[], char *const env[])
{
	int po[2], pe[2];
	CHECK(pipe(po) == 0 && pipe(pe) == 0);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		close_range(3, ~0u, 0);
		for (size_t i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	size_t no = 0, ne = 0;
	struct pollfd p[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
	while (p[0].fd >= 0 || p[1].fd >= 0) {
		CHECK(poll(p, 2, 60000) > 0);
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char *b = i ? err : out;
			size_t *n = i ? &ne : &no;
			ssize_t r = read(p[i].fd, b + *n, sizeof(out) - 1 - *n);
			if (r <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
			} else {
				*n += (size_t)r;
			}
		}
	}
	out[no] = 0;
	err[ne] = 0;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		CHECK(errno == EINTR);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int lines(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* A protocol word in a message: "SEAL:", "GET reply:" and the like. */
static bool has_op_name(const char *s)
{
	for (const char *p = s; *p; p++) {
		if (p > s && isalnum((unsigned char)p[-1]))
			continue;
		size_t n = 0;
		while (isupper((unsigned char)p[n]))
			n++;
		if (n >= 3 && (p[n] == ':' || !strncmp(p + n, " reply:", 7)))
			return true;
	}
	return false;
}

#define CHECK_ERR_HAS(needle)                                                                  \
	do {                                                                                   \
		if (!strstr(err, (needle)))                                                    \
			sh_test_fail(__FILE__, __LINE__, "stderr lacks \"%s\":\n%s", (needle), \
				     err);                                                     \
	} while (0)

static int run_with(const char *bin, const char *cmd, const char *arg)
{
	char exe[4096];
	sh_test_bin(exe, sizeof(exe), bin);
	char *argv[4] = {exe};
	int n = 1;
	if (cmd)
		argv[n++] = (char *)cmd;
	argv[n++] = (char *)arg;
	argv[n] = NULL;
	return run3(argv, NULL);
}

/* bin (and its command cmd, or NULL) answers --help, --version and an
 * unknown option in the one manner. */
static void one_manner(const char *bin, const char *cmd)
{
	const char *name = strrchr(bin, '/') + 1;
	char who[64];
	snprintf(who, sizeof(who), "%s%s%s", name, cmd ? " " : "", cmd ? cmd : "");
	/* --help: a usage and a paragraph on what it does, on stdout */
	int rc = run_with(bin, cmd, "--help");
	if (rc != 0 || strncmp(out, "usage: ", 7) != 0 || err[0] || lines(out) < 4)
		sh_test_fail(__FILE__, __LINE__, "%s --help: status %d\nstdout:\n%s\nstderr:\n%s",
			     who, rc, out, err);
	/* a description: a paragraph of words after the usage's lines */
	const char *para = strstr(out, "\n\n");
	if (!para || !isalpha((unsigned char)para[2]) || strlen(para) < 60)
		sh_test_fail(__FILE__, __LINE__, "%s --help: no description:\n%s", who, out);
	/* --version: "NAME VERSION", shoal's for its commands */
	rc = run_with(bin, cmd, "--version");
	char want[64];
	snprintf(want, sizeof(want), "%s %s\n", name, SHOAL_VERSION_STRING);
	if (rc != 0 || strcmp(out, want) != 0 || err[0])
		sh_test_fail(__FILE__, __LINE__,
			     "%s --version: status %d, stdout '%s', stderr '%s'", who, rc, out,
			     err);
	/* an unknown option: 2, one line naming it, a pointer to --help */
	rc = run_with(bin, cmd, "--no-such-option");
	if (rc != 2 || out[0] || lines(err) != 1 || !strstr(err, "--no-such-option") ||
	    !strstr(err, "--help"))
		sh_test_fail(__FILE__, __LINE__,
			     "%s --no-such-option: status %d\nstdout:\n%s\nstderr:\n%s", who, rc,
			     out, err);
}

SH_TEST(shoal_has_the_manner)
{
	one_manner("tools/shoal", NULL);
}

SH_TEST(every_shoal_command_has_the_manner)
{
	static const char *const cmds[] = {"bench", "daemon", "controller", "put",  "get",    "ls",
					   "info",  "rm",     "stat",	    "help", "version"};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		one_manner("tools/shoal", cmds[i]);
	/* shoal help COMMAND is COMMAND --help */
	CHECK_EQ(run_with("tools/shoal", "help", "get"), 0);
	CHECK_HAS(out, "usage: shoal get NAME --out FILE");
	CHECK_HAS(out, "--force");
}

SH_TEST(shoald_has_the_manner)
{
	one_manner("tools/shoald", NULL);
}

SH_TEST(shoal_ext_has_the_manner)
{
	one_manner("tools/shoal-ext", NULL);
}

SH_TEST(shoal_engine_has_the_manner)
{
	one_manner("tools/shoal-engine", NULL);
}

SH_TEST(missing_values_and_operands)
{
	char shoal[4096], shoald[4096], engine[4096];
	sh_test_bin(shoal, sizeof(shoal), "tools/shoal");
	sh_test_bin(shoald, sizeof(shoald), "tools/shoald");
	sh_test_bin(engine, sizeof(engine), "tools/shoal-engine");
	char *a1[] = {shoald, "--socket", NULL};
	CHECK_EQ(run3(a1, NULL), 2);
	CHECK_ERR_HAS("shoald: --socket needs a value (see shoald --help)");
	char *a2[] = {shoal, "get", "x", "--out", NULL};
	CHECK_EQ(run3(a2, NULL), 2);
	CHECK_ERR_HAS("shoal get: --out needs a value (see shoal get --help)");
	char *a3[] = {engine, "--socket", "/x.sock", NULL};
	CHECK_EQ(run3(a3, NULL), 2);
	CHECK_ERR_HAS("--so LIBRARY.so is required");
	char *a4[] = {shoal, "put", NULL};
	CHECK_EQ(run3(a4, NULL), 2);
	CHECK_ERR_HAS("expected 1 argument, got 0");
	char *a5[] = {shoal, "rm", NULL};
	CHECK_EQ(run3(a5, NULL), 2);
	CHECK_ERR_HAS("expected at least 1 argument");
	char *a6[] = {shoal, "put", "--replace=yes", "f", NULL};
	CHECK_EQ(run3(a6, NULL), 2);
	CHECK_ERR_HAS("--replace takes no value");
	char *a7[] = {shoald, "stray", NULL};
	CHECK_EQ(run3(a7, NULL), 2);
	CHECK_ERR_HAS("takes no arguments, got 'stray'");
	/* --ready-fd: an open descriptor past the standard ones, or refused */
	char *a7b[] = {shoald, "--ready-fd", "2", NULL};
	CHECK_EQ(run3(a7b, NULL), 2);
	CHECK_ERR_HAS("--ready-fd '2': expected an open descriptor's number, 3 or more");
	char *a7c[] = {shoald, "--ready-fd", "977", NULL};
	CHECK_EQ(run3(a7c, NULL), 2);
	CHECK_ERR_HAS("--ready-fd '977': expected an open descriptor's number");
	char *a9[] = {engine, "--s", "x", NULL};
	CHECK_EQ(run3(a9, NULL), 2);
	CHECK_ERR_HAS("ambiguous option '--s' (--socket, --so, --store)");
	char *a8[] = {shoal, NULL};
	CHECK_EQ(run3(a8, NULL), 2);
	CHECK_ERR_HAS("usage: shoal");
}

/* A value a security option does not know is refused with the values it
 * takes: never read as the weakest. */
SH_TEST(security_options_fail_closed)
{
	char shoal[4096], shoald[4096], ext[4096], engine[4096], sample[4096];
	sh_test_bin(shoal, sizeof(shoal), "tools/shoal");
	sh_test_bin(shoald, sizeof(shoald), "tools/shoald");
	sh_test_bin(ext, sizeof(ext), "tools/shoal-ext");
	sh_test_bin(engine, sizeof(engine), "tools/shoal-engine");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	static const char *const sandboxes[] = {"weak", "", "None", "strict2"};
	for (size_t i = 0; i < 4; i++) {
		char *a[] = {ext, "--so", sample, "--sandbox", (char *)sandboxes[i], NULL};
		CHECK_EQ(run3(a, NULL), 2);
		CHECK_ERR_HAS("expected none, basic or strict");
	}
	char *a1[] = {ext, "--network", "yes", NULL};
	CHECK_EQ(run3(a1, NULL), 2);
	CHECK_ERR_HAS("--network 'yes': expected 0 or 1");
	char *a2[] = {ext, "--mem", "lots", NULL};
	CHECK_EQ(run3(a2, NULL), 2);
	CHECK_ERR_HAS("--mem 'lots'");
	char *a3[] = {shoald, "--group", "no-such-group-here", NULL};
	CHECK_EQ(run3(a3, NULL), 2);
	CHECK_ERR_HAS("no such group");
	char *a4[] = {shoal, "ls", "--server-uid", "root", NULL};
	CHECK_EQ(run3(a4, NULL), 2);
	CHECK_ERR_HAS("--server-uid expects a numeric uid");
	char *a5[] = {shoal, "ls", "--server-uid", "-1", NULL};
	CHECK_EQ(run3(a5, NULL), 2);
	char *a6[] = {shoal, "controller", "--scheme", "none", NULL};
	CHECK_EQ(run3(a6, NULL), 2);
	CHECK_ERR_HAS("expected pure, lru, leastload, weighted or twobin");
	char secret[] = "SHOAL_SECRET=a secret of more than sixteen bytes";
	char *env[] = {secret, NULL};
	char *a7[] = {engine, "--socket", "tcp://127.0.0.1:1?encrypt=maybe", "--so", sample, NULL};
	CHECK_EQ(run3(a7, env), 1);
	CHECK_ERR_HAS("encrypt=true|false");
}

/* shoal-ext run by hand: no host's descriptors, so it says who starts it
 * (2), not an error of mapping rings it was never given. */
SH_TEST(shoal_ext_by_hand_says_a_host_starts_it)
{
	char ext[4096], sample[4096];
	sh_test_bin(ext, sizeof(ext), "tools/shoal-ext");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	char *a1[] = {ext, "--so", sample, NULL};
	CHECK_EQ(run3(a1, NULL), 2);
	CHECK_ERR_HAS("not run by hand");
	CHECK(!strstr(err, "mmap") && !strstr(err, "rings"));
	char *a2[] = {ext, NULL};
	CHECK_EQ(run3(a2, NULL), 2);
	CHECK_ERR_HAS("shoal_ext_start");
}

/* Started by a host with a value it does not know (a host of another
 * version, say), shoal-ext refuses it and tells the host why in its ready
 * message, so that the host's start fails with that message. */
SH_TEST(shoal_ext_tells_its_host_a_bad_value)
{
	char ext[4096], sample[4096];
	sh_test_bin(ext, sizeof(ext), "tools/shoal-ext");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	int sv[2], bell[2];
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
	CHECK(pipe(bell) == 0);
	int rings = memfd_create("rings", 0);
	CHECK(rings >= 0 && ftruncate(rings, 1 << 20) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int a = dup(sv[1]), b = dup(rings), c = dup(bell[1]);
		dup2(a, SH_EXT_FD_SOCK);
		dup2(b, SH_EXT_FD_RINGS);
		dup2(c, SH_EXT_FD_EFD);
		close_range(SH_EXT_FD_EFD + 1, ~0u, 0);
		execl(ext, ext, "--so", sample, "--sandbox", "weak", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	sh_ext_ready m;
	memset(&m, 0, sizeof(m));
	CHECK_EQ(recv(sv[0], &m, sizeof(m), 0), (long long)sizeof(m));
	CHECK_EQ(m.magic, SH_EXT_READY_MAGIC);
	CHECK_EQ(m.status, SHOAL_EINVAL);
	m.msg[sizeof(m.msg) - 1] = 0;
	CHECK_HAS(m.msg, "--sandbox 'weak': expected none, basic or strict");
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 2);
	close(sv[0]);
	close(rings);
	close(bell[0]);
	close(bell[1]);
}

/* ---- the store: exit codes and words ---- */

static char dir[64], sock[128], shoal_bin[4096];

static pid_t start_shoald(void)
{
	snprintf(dir, sizeof(dir), "/tmp/shoal-manner-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	sh_test_bin(shoal_bin, sizeof(shoal_bin), "tools/shoal");
	const char *args[] = {"--socket", sock, "--size", "16M", NULL};
	pid_t pid;
	CHECK_OK(sh_test_shoald(args, NULL, NULL, 0, &pid));
	return pid;
}

/* shoal ARGS... --socket SOCK, up to the first NULL */
static int shoal(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5)
{
	char *argv[10] = {shoal_bin};
	const char *a[] = {a1, a2, a3, a4, a5};
	int n = 1;
	for (int i = 0; i < 5 && a[i]; i++)
		argv[n++] = (char *)a[i];
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n] = NULL;
	return run3(argv, NULL);
}

/* A safetensors file of one U8 tensor [3] = "abc". */
static void small_file(const char *path)
{
	static const char h[] = "{\"t\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
	uint64_t len = sizeof(h) - 1, pad = (8 - len % 8) % 8, total = len + pad;
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	CHECK(fwrite(&total, 8, 1, f) == 1 && fwrite(h, len, 1, f) == 1);
	CHECK(fwrite("        ", pad, 1, f) == (pad ? 1u : 0u) && fwrite("abc", 3, 1, f) == 1);
	CHECK(fclose(f) == 0);
}

static off_t size_of(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : -1;
}

SH_TEST_T(get_exit_codes_force_and_words, 120)
{
	pid_t d = start_shoald();
	char f[256], o[256], kept[256];
	snprintf(f, sizeof(f), "%s/a.safetensors", dir);
	snprintf(o, sizeof(o), "%s/out.safetensors", dir);
	snprintf(kept, sizeof(kept), "%s/kept", dir);
	small_file(f);
	CHECK_EQ(shoal("put", f, "--name", "sd15", NULL), 0);
	/* a taken name: how to replace it, in the user's words */
	CHECK_EQ(shoal("put", f, "--name", "sd15", NULL), 1);
	CHECK_ERR_HAS("--replace");
	CHECK_ERR_HAS("sd15 is taken");
	CHECK(!has_op_name(err));
	CHECK_EQ(shoal("put", f, "--name", "sd15", "--replace"), 0);
	/* a file that cannot be written is the file's error (7), not "no
	 * such name" (3) */
	CHECK_EQ(shoal("get", "sd15", "--out", "/no/such/dir/x", NULL), 7);
	CHECK_ERR_HAS("/no/such/dir/x");
	CHECK(!has_op_name(err));
	CHECK_EQ(shoal("put", "/no/such/file.safetensors", "--name", "x", NULL), 7);
	/* a name that is not there: 3, and no file is left behind */
	CHECK_EQ(shoal("get", "nothing", "--out", o, NULL), 3);
	CHECK(!has_op_name(err));
	CHECK(access(o, F_OK) != 0);
	CHECK_EQ(shoal("info", "nothing", NULL, NULL, NULL), 3);
	CHECK(!has_op_name(err));
	/* an existing file is kept unless --force */
	FILE *k = fopen(kept, "w");
	CHECK(k && fputs("mine", k) >= 0 && fclose(k) == 0);
	CHECK_EQ(shoal("get", "sd15", "--out", kept, NULL), 7);
	CHECK_ERR_HAS("--force");
	CHECK_EQ(size_of(kept), 4);
	CHECK_EQ(shoal("get", "sd15", "--out", kept, "--force"), 0);
	CHECK_EQ(size_of(kept), size_of(f));
	CHECK_EQ(shoal("get", "sd15", "--out", o, NULL), 0);
	CHECK_EQ(size_of(o), size_of(f));
	/* what is not a regular file is written as it is (a pipeline's) */
	CHECK_EQ(shoal("get", "sd15", "--out", "/dev/null", NULL), 0);
	CHECK_EQ(shoal("rm", "sd15", NULL, NULL, NULL), 0);
	CHECK_EQ(shoal("rm", "sd15", NULL, NULL, NULL), 3);
	CHECK(!has_op_name(err));
	CHECK_EQ(kill(d, SIGTERM), 0);
	int st;
	CHECK(waitpid(d, &st, 0) == d && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

/* ---- a task controller from the shell ---- */

static const char secret_env[] = "SHOAL_SECRET=a secret of more than sixteen bytes";

/* The controller's stderr so far. */
static void read_log(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	buf[0] = 0;
	if (!f)
		return; /* not made yet */
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = 0;
	fclose(f);
}

static pid_t spawn_logged(char *const argv[], const char *log)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
		dup2(fd, 2);
		unsetenv("SHOAL_LOG"); /* the program's own level: info */
		putenv((char *)secret_env);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* shoal controller (a process, its log in a file), an engine (a process),
 * shoal stat on the unix socket and over TCP; a task for a function the
 * engine lacks names the engine by its default name. */
SH_TEST_T(a_controller_from_the_shell, 120)
{
	char d[64], ctl_sock[128], ctl_log[160], eng_log[160], exe[4096], engine[4096],
		sample[4096], shoal_exe[4096];
	snprintf(d, sizeof(d), "/tmp/shoal-manner-XXXXXX");
	CHECK(mkdtemp(d) != NULL);
	snprintf(ctl_sock, sizeof(ctl_sock), "%s/ctl.sock", d);
	snprintf(ctl_log, sizeof(ctl_log), "%s/ctl.log", d);
	snprintf(eng_log, sizeof(eng_log), "%s/eng.log", d);
	sh_test_bin(exe, sizeof(exe), "tools/shoal");
	sh_test_bin(shoal_exe, sizeof(shoal_exe), "tools/shoal");
	sh_test_bin(engine, sizeof(engine), "tools/shoal-engine");
	sh_test_bin(sample, sizeof(sample), "tests/ext_sample.so");
	char *ca[] = {exe, "controller", "--socket", ctl_sock, "--tcp", "127.0.0.1:0", NULL};
	pid_t ctl = spawn_logged(ca, ctl_log);
	/* it says where it serves, TCP included */
	static char log[1 << 15];
	sh_test_wait_text(ctl_log, "tcp://", log, sizeof(log), 10000);
	char *tcp = strstr(log, "tcp://");
	char tcp_addr[128];
	CHECK(sscanf(tcp, "%127[^,\n ]", tcp_addr) == 1);
	char *env[] = {(char *)secret_env, NULL};
	/* no engine yet: shoal stat says so, and not "no store" */
	char *sa[] = {shoal_exe, "stat", "--socket", ctl_sock, NULL};
	CHECK_EQ(run3(sa, env), 0);
	CHECK_HAS(out, "task controller at");
	CHECK_HAS(out, "engines:   0");
	CHECK_HAS(out, "no engine is connected");
	CHECK(!strstr(out, "no store") && !strstr(err, "no store"));
	char *ea[] = {engine, "--socket", ctl_sock, "--so", sample, NULL};
	pid_t eng = spawn_logged(ea, eng_log);
	char joined[64];
	snprintf(joined, sizeof(joined), "engine 0 (pid %d) joined", (int)eng);
	sh_test_wait_text(ctl_log, joined, log, sizeof(log), 20000);
	char row[64];
	snprintf(row, sizeof(row), "pid %d", (int)eng);
	CHECK_EQ(run3(sa, env), 0);
	CHECK_HAS(out, "engines:   1");
	CHECK_HAS(out, row);
	CHECK(!strstr(out, "no engine"));
	char *ta[] = {shoal_exe, "stat", "--socket", tcp_addr, NULL};
	CHECK_EQ(run3(ta, env), 0);
	CHECK_HAS(out, "engines:   1");
	CHECK_HAS(out, row);
	/* asking a store's question of a controller left no warning */
	read_log(ctl_log, log, sizeof(log));
	CHECK(!strstr(log, "warn"));
	/* the engine's default name reads as one */
	shoal_farm *f;
	CHECK_OK(shoal_farm_connect(&f, ctl_sock));
	shoal_task t;
	CHECK_OK(shoal_farm_submit(f, "no_such_fn", NULL, NULL, &t));
	shoal_vbuf *vb;
	CHECK_OK(shoal_vbuf_create(&vb));
	const shoal_value *r;
	CHECK_RC(shoal_farm_wait(f, t, vb, &r, shoal_deadline_in(10000 * 1000000LL)), SHOAL_ENOENT);
	char named[96];
	snprintf(named, sizeof(named), "engine pid %d has no function no_such_fn", (int)eng);
	CHECK_HAS(shoal_farm_error(f), named);
	shoal_vbuf_free(vb);
	shoal_farm_close(f);
	/* its departure, logged */
	CHECK_EQ(kill(eng, SIGKILL), 0);
	CHECK(waitpid(eng, NULL, 0) == eng);
	char left[96];
	snprintf(left, sizeof(left), "engine 0 (pid %d) went away", (int)eng);
	sh_test_wait_text(ctl_log, "0 engines left", log, sizeof(log), 20000);
	CHECK_HAS(log, left);
	CHECK_HAS(log, "0 engines left");
	CHECK_EQ(kill(ctl, SIGTERM), 0);
	int st;
	CHECK(waitpid(ctl, &st, 0) == ctl && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", d);
	CHECK(system(cmd) == 0);
}
