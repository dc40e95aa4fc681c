/* End-to-end tests of shoald and the store commands of `shoal`, as real
 * processes on a real socket: put, get, ls, info, rm and stat with the exit
 * codes of tools/lib/tools.h (7 for a file of the user's: get --out
 * refuses an existing file without --force); a byte-identical round trip of safetensors
 * files laid out as the reference writer does (tests/st_write.py); hostile
 * and truncated files rejected with a clear message while the daemon
 * serves on; capacity errors with the sizes; SIGTERM stops it cleanly. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];
static char dir[64], sock[128], shoal[4096];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/shoal-cli-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	sh_test_bin(shoal, sizeof(shoal), "tools/shoal");
}

/* shoald --socket SOCK --size SIZE [extra options] */
static pid_t start_daemon_with(const char *size, const char *x1, const char *x2)
{
	const char *args[] = {"--socket", sock, "--size", size, x1, x2, NULL};
	pid_t pid;
	CHECK_OK(sh_test_shoald(args, NULL, NULL, 0, &pid));
	return pid;
}

static pid_t start_daemon(const char *size)
{
	return start_daemon_with(size, NULL, NULL);
}

static int stop_daemon(pid_t pid)
{
	CHECK_EQ(kill(pid, SIGTERM), 0);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* shoal ARGS... --socket SOCK: the arguments up to the first NULL. */
static int shoal_cmdv(const char *a1, ...)
{
	char *argv[16] = {shoal};
	int n = 1;
	va_list ap;
	va_start(ap, a1);
	for (const char *x = a1; x && n < 13; x = va_arg(ap, const char *))
		argv[n++] = (char *)x;
	va_end(ap);
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n] = NULL;
	return sh_test_run(argv, NULL, out, sizeof(out));
}
#define shoal_cmd(...) shoal_cmdv(__VA_ARGS__, (const char *)NULL)

static void st_write(const char *path, const char *tensors, const char *bytes, const char *extra,
		     const char *extra2)
{
	char script[4096];
	sh_test_src(script, sizeof(script), "tests/st_write.py");
	char *argv[] = {"/usr/bin/python3", script,    (char *)path,  "--tensors",
			(char *)tensors,    "--bytes", (char *)bytes, (char *)extra,
			(char *)extra2,	    NULL};
	int rc = sh_test_run(argv, NULL, out, sizeof(out));
	if (rc != 0)
		sh_test_fail(__FILE__, __LINE__, "st_write.py: status %d:\n%s", rc, out);
}

static bool same_file(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	CHECK(fa && fb);
	bool same = true;
	for (;;) {
		int x = fgetc(fa), y = fgetc(fb);
		if (x != y) {
			same = false;
			break;
		}
		if (x == EOF)
			break;
	}
	fclose(fa);
	fclose(fb);
	return same;
}

static void cleanup(void)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

SH_TEST_T(put_get_round_trip, 120)
{
	setup();
	pid_t d = start_daemon("256M");
	char a[256], b[256], c[256];
	snprintf(a, sizeof(a), "%s/a.safetensors", dir);
	snprintf(b, sizeof(b), "%s/b.safetensors", dir);
	snprintf(c, sizeof(c), "%s/c.safetensors", dir);
	st_write(a, "300", "4000000", "--metadata", "format=pt");
	CHECK_EQ(shoal_cmd("put", a, "--name", "model"), 0);
	CHECK_HAS(out, "model ");
	CHECK_EQ(shoal_cmd("get", "model", "--out", b), 0);
	CHECK(same_file(a, b));
	/* a name is taken until rm, or --replace */
	CHECK_EQ(shoal_cmd("put", a, "--name", "model"), 1);
	CHECK_HAS(out, "taken");
	st_write(c, "3", "1000", NULL, NULL);
	char *argv[] = {shoal, "put", c, "--name", "model", "--replace", "--socket", sock, NULL};
	CHECK_EQ(sh_test_run(argv, NULL, out, sizeof(out)), 0);
	/* b exists: kept without --force (7, a file's), replaced with it */
	CHECK_EQ(shoal_cmd("get", "model", "--out", b), 7);
	CHECK_HAS(out, "--force");
	CHECK(same_file(a, b));
	CHECK_EQ(shoal_cmd("get", "model", "--out", b, "--force"), 0);
	CHECK(same_file(c, b));
	/* zero tensors; odd names */
	st_write(c, "0", "0", NULL, NULL);
	CHECK_EQ(shoal_cmd("put", c, "--name", "empty/one"), 0);
	CHECK_EQ(shoal_cmd("get", "empty/one", "--out", b, "--force"), 0);
	CHECK(same_file(c, b));
	CHECK_EQ(shoal_cmd("ls", NULL, NULL, NULL), 0);
	CHECK_HAS(out, "model");
	CHECK_HAS(out, "empty/one");
	CHECK_EQ(shoal_cmd("ls", "emp", NULL, NULL), 0);
	CHECK(strstr(out, "model") == NULL);
	CHECK_EQ(shoal_cmd("info", "model", NULL, NULL), 0);
	CHECK_HAS(out, "tensor_dict");
	CHECK_HAS(out, "members:   3");
	CHECK_EQ(shoal_cmd("stat", NULL, NULL, NULL), 0);
	CHECK_HAS(out, "objects:   2");
	CHECK_EQ(shoal_cmd("rm", "model", NULL, NULL), 0);
	CHECK_EQ(shoal_cmd("rm", "model", NULL, NULL), 3);
	CHECK_HAS(out, "no object named \"model\"");
	CHECK_EQ(shoal_cmd("get", "model", "--out", b), 3);
	CHECK_EQ(shoal_cmd("info", "nothing", NULL, NULL), 3);
	CHECK_EQ(stop_daemon(d), 0);
	CHECK(access(sock, F_OK) != 0); /* the socket is gone */
	CHECK_EQ(shoal_cmd("stat", NULL, NULL, NULL), 4);
	CHECK_HAS(out, "no store at");
	cleanup();
}

SH_TEST_T(hostile_files_rejected, 120)
{
	setup();
	pid_t d = start_daemon("64M");
	/* The overflows and the padding are issue 16's: an overflowing shape
	 * exited 1, not 6; 50 MiB of spaces around the object were taken. */
	static const char *kinds[] = {"truncated-data", "overlap",	   "gap",
				      "bad-dtype",	"huge-header-len", "not-json",
				      "count-overflow", "bytes-overflow",  "space-padded",
				      "space-led"};
	static const char *says[] = {
		"past the end",
		"overlap",
		"gap of 8 bytes",
		"unknown dtype",
		"beyond the limit",
		"not a JSON object",
		"[4294967296, 4294967296, 4294967296] has more than 2^64 elements",
		"F32 [4294967296, 1073741824] has more than 2^64 bytes",
		"52428800 bytes of padding after the JSON object",
		"header starts with 52428800 bytes of whitespace"};
	char f[256];
	snprintf(f, sizeof(f), "%s/h.safetensors", dir);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		st_write(f, "20", "100000", "--hostile", kinds[i]);
		int rc = shoal_cmd("put", f, "--name", "h");
		if (rc != 6 || !strstr(out, says[i]))
			sh_test_fail(__FILE__, __LINE__, "%s: status %d, output:\n%s", kinds[i], rc,
				     out);
	}
	CHECK_EQ(shoal_cmd("stat", NULL, NULL, NULL), 0);
	CHECK_HAS(out, "objects:   0");
	/* truncated anywhere: a prefix of a valid file */
	st_write(f, "20", "100000", NULL, NULL);
	struct stat st;
	CHECK(stat(f, &st) == 0);
	off_t cuts[] = {0, 4, 8, 100, st.st_size - 1};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		CHECK(truncate(f, cuts[i]) == 0);
		int rc = shoal_cmd("put", f, "--name", "h");
		if (rc != 6)
			sh_test_fail(__FILE__, __LINE__, "cut at %lld: status %d:\n%s",
				     (long long)cuts[i], rc, out);
	}
	CHECK_EQ(shoal_cmd("put", "/nonexistent.safetensors", "--name", "h"), 7);
	CHECK_HAS(out, "No such file");
	/* too big for the store: the sizes are in the message; it serves on */
	st_write(f, "4", "100000000", NULL, NULL);
	CHECK_EQ(shoal_cmd("put", f, "--name", "big"), 5);
	CHECK_HAS(out, "asked 100000000 bytes");
	CHECK_HAS(out, "of 67108864 free");
	CHECK_EQ(shoal_cmd("stat", NULL, NULL, NULL), 0);
	CHECK_HAS(out, "objects:   0");
	CHECK_HAS(out, "used:      0 ");
	/* usage errors */
	CHECK_EQ(shoal_cmd("put", f, NULL, NULL), 2);
	CHECK_HAS(out, "--name NAME is required");
	CHECK_EQ(shoal_cmd("get", "x", "--frob", NULL), 2);
	CHECK_EQ(shoal_cmd("stat", "extra", NULL, NULL), 2);
	char *help[] = {shoal, "put", "--help", NULL};
	CHECK_EQ(sh_test_run(help, NULL, out, sizeof(out)), 0);
	CHECK_HAS(out, "usage: shoal put");
	CHECK_EQ(stop_daemon(d), 0);
	cleanup();
}

SH_TEST(daemon_arguments)
{
	setup();
	char exe[4096];
	sh_test_bin(exe, sizeof(exe), "tools/shoald");
	char *a1[] = {exe, "--size", "lots", NULL};
	CHECK_EQ(sh_test_run(a1, NULL, out, sizeof(out)), 2);
	CHECK_HAS(out, "--size 'lots'");
	char *a2[] = {exe, "--help", NULL};
	CHECK_EQ(sh_test_run(a2, NULL, out, sizeof(out)), 0);
	CHECK_HAS(out, "--reserve");
	char *a3[] = {exe, "--socket", "/nonexistent/dir/s.sock", NULL};
	CHECK_EQ(sh_test_run(a3, NULL, out, sizeof(out)), 1);
	CHECK_HAS(out, "cannot serve");
	/* --reserve faults the arena in at start and serves as usual; --group
	 * opens the socket to the group (mode 0660, owned by it) */
	pid_t r = start_daemon_with("16M", "--reserve", NULL);
	CHECK_EQ(shoal_cmd("stat", NULL, NULL, NULL), 0);
	CHECK_EQ(stop_daemon(r), 0);
	r = start_daemon_with("16M", "--group", "0");
	struct stat st;
	CHECK(stat(sock, &st) == 0);
	CHECK_EQ(st.st_mode & 0777, 0660);
	CHECK_EQ(st.st_gid, 0);
	CHECK_EQ(stop_daemon(r), 0);
	char *a5[] = {exe, "--group", "no-such-group-here", NULL};
	CHECK_EQ(sh_test_run(a5, NULL, out, sizeof(out)), 2);
	CHECK_HAS(out, "no such group");
	/* a second daemon on a live socket refuses */
	pid_t d = start_daemon("16M");
	char *a4[] = {exe, "--socket", sock, NULL};
	CHECK_EQ(sh_test_run(a4, NULL, out, sizeof(out)), 1);
	CHECK_EQ(stop_daemon(d), 0);
	cleanup();
}

/* What this user can hand shoal: files with an overflowing shape or 50 MiB
 * of padding (6, invalid input), then what is not a regular file, bounded
 * by timeout(1) (status 124 past it): a FIFO with no writer hung the old
 * open(); a directory, /dev/zero and a symlink to the FIFO are refused the
 * same way, 6, and nothing reaches the store. Last, get --out a FIFO. */
static void refuse_non_files(void)
{
	/* first, as this user too: an overflowing shape and a padded header */
	static const char *bad[] = {"count-overflow", "bytes-overflow", "space-padded"};
	char h[256];
	snprintf(h, sizeof(h), "%s/h.safetensors", dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		st_write(h, "3", "1000", "--hostile", bad[i]);
		int rc = shoal_cmd("put", h, "--name", "h");
		if (rc != 6)
			sh_test_fail(__FILE__, __LINE__, "%s: status %d:\n%s", bad[i], rc, out);
	}
	CHECK_EQ(unlink(h), 0);
	char fifo[256], link[256];
	snprintf(fifo, sizeof(fifo), "%s/fifo.safetensors", dir);
	snprintf(link, sizeof(link), "%s/link.safetensors", dir);
	CHECK_EQ(mkfifo(fifo, 0600), 0);
	CHECK_EQ(symlink(fifo, link), 0);
	const char *paths[] = {fifo, link, dir, "/dev/zero"};
	const char *says[] = {"is a FIFO", "is a FIFO", "is a directory", "is a character device"};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		char *argv[] = {"/usr/bin/timeout", "30", shoal,      "put", (char *)paths[i],
				"--name",	    "x",  "--socket", sock,  NULL};
		int rc = sh_test_run(argv, NULL, out, sizeof(out));
		if (rc != 6 || !strstr(out, says[i]) || !strstr(out, "expected a regular"))
			sh_test_fail(__FILE__, __LINE__,
				     "put %s: status %d (124: hung), output:\n%s", paths[i], rc,
				     out);
	}
	CHECK_EQ(shoal_cmd("stat", NULL, NULL, NULL), 0);
	CHECK_HAS(out, "objects:   0");

	/* get --out a FIFO: no reader fails at once; with one, it streams */
	char a[256], b[256];
	snprintf(a, sizeof(a), "%s/a.safetensors", dir);
	snprintf(b, sizeof(b), "%s/b.safetensors", dir);
	st_write(a, "5", "100000", NULL, NULL);
	CHECK_EQ(shoal_cmd("put", a, "--name", "a"), 0);
	char *get[] = {"/usr/bin/timeout", "30", shoal, "get", "a", "--out", fifo,
		       "--socket",	   sock, NULL};
	int rc = sh_test_run(get, NULL, out, sizeof(out));
	if (rc != 7 || !strstr(out, "is a FIFO that no one reads"))
		sh_test_fail(__FILE__, __LINE__, "get --out FIFO: status %d (124: hung):\n%s", rc,
			     out);
	pid_t reader = fork();
	CHECK(reader >= 0);
	if (reader == 0) {
		/* reads the FIFO into b, as a pipeline would (open waits for
		 * the writer, and counts as a reader meanwhile) */
		int in = open(fifo, O_RDONLY), o = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (in < 0 || o < 0)
			_exit(2);
		char buf[65536];
		ssize_t n;
		while ((n = read(in, buf, sizeof(buf))) != 0)
			if (n < 0 || write(o, buf, (size_t)n) != n)
				_exit(3);
		_exit(close(o) == 0 ? 0 : 4);
	}
	/* the reader may not have opened yet: the writer retries as a user would */
	for (int i = 0; i < 300; i++) {
		rc = sh_test_run(get, NULL, out, sizeof(out));
		if (rc != 7 || !strstr(out, "no one reads"))
			break;
		usleep(10000);
	}
	CHECK_EQ(rc, 0);
	int st;
	CHECK(waitpid(reader, &st, 0) == reader);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(same_file(a, b));
}

SH_TEST_T(put_refuses_what_is_not_a_file, 120)
{
	setup();
	pid_t d = start_daemon("16M");
	refuse_non_files();
	CHECK_EQ(stop_daemon(d), 0);
	cleanup();
	/* The same as nobody (65534), with a daemon of its own. */
	setup();
	CHECK_EQ(chown(dir, 65534, 65534), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
			_exit(3);
		CHECK(getuid() == 65534 && geteuid() == 65534);
		sh_test_bin(shoal, sizeof(shoal), "tools/shoal"); /* as this uid reaches it */
		d = start_daemon("16M");
		refuse_non_files();
		CHECK_EQ(stop_daemon(d), 0);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	cleanup();
}

/* Whether s holds a byte a terminal acts on: C0 but '\n', DEL, C1 (as
 * UTF-8, \xc2\x80 .. \xc2\x9f). */
static bool has_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p == 0x7f ||
		    (p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0))
			return true;
	return false;
}

/* Names from a file and from whoever named an object reach the terminal:
 * a tensor named "\u001b]2;pwned\u0007..." in a hostile file, an object
 * named with ESC [2J. shoal put, ls and info show them escaped. */
static void text_is_escaped(void)
{
	char f[256];
	snprintf(f, sizeof(f), "%s/esc.safetensors", dir);
	static const char h[] = "{\"evil\\u001b]2;pwned\\u0007\\u001b[2J\\u009b31m\":{\"dtype\":"
				"\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},\"caf\xc3\xa9\":{"
				"\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}";
	uint64_t len = sizeof(h) - 1, pad = (8 - len % 8) % 8, total = len + pad;
	FILE *fp = fopen(f, "wb");
	CHECK(fp != NULL);
	CHECK(fwrite(&total, 8, 1, fp) == 1 && fwrite(h, len, 1, fp) == 1 &&
	      fwrite("        ", pad, 1, fp) == (pad ? 1u : 0u) && fwrite("abc", 3, 1, fp) == 1);
	CHECK(fclose(fp) == 0);
	const char *name = "m\x1b[2Jx\x7f\xc2\x9b";
	CHECK_EQ(shoal_cmd("put", f, "--name", name), 0);
	CHECK(!has_control(out));
	CHECK_HAS(out, "m\\x1b[2Jx\\x7f\\xc2\\x9b ");
	CHECK_EQ(shoal_cmd("ls", NULL, NULL, NULL), 0);
	CHECK(!has_control(out));
	CHECK_HAS(out, "m\\x1b[2Jx");
	CHECK_EQ(shoal_cmd("info", name, NULL, NULL), 0);
	CHECK(!has_control(out));
	CHECK_HAS(out, "evil\\x1b]2;pwned\\x07\\x1b[2J\\xc2\\x9b31m");
	CHECK_HAS(out, "caf\xc3\xa9 "); /* UTF-8 stays as it is */
	CHECK_EQ(shoal_cmd("rm", name, NULL, NULL), 0);
	/* a store's error message too: it quotes the name */
	CHECK_EQ(shoal_cmd("info", name, NULL, NULL), 3);
	CHECK(!has_control(out));
}

SH_TEST_T(store_text_cannot_drive_the_terminal, 120)
{
	setup();
	pid_t d = start_daemon("16M");
	text_is_escaped();
	CHECK_EQ(stop_daemon(d), 0);
	cleanup();
	setup();
	CHECK_EQ(chown(dir, 65534, 65534), 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
			_exit(3);
		sh_test_bin(shoal, sizeof(shoal), "tools/shoal"); /* as this uid reaches it */
		d = start_daemon("16M");
		text_is_escaped();
		CHECK_EQ(stop_daemon(d), 0);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	cleanup();
}
