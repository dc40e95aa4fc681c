/* The store daemon's main, for shoald and `shoal daemon`: options, the
 * store itself (an embedded store whose host does nothing else), and a
 * clean stop on SIGTERM or SIGINT. */
#include "tools.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <shoal/shoal.h>

const char *sh_tools_default_socket(void)
{
	static char path[108];
	const char *env = getenv("SHOAL_SOCKET");
	if (env && *env)
		return env;
	const char *dir = getenv("XDG_RUNTIME_DIR");
	if (dir && *dir && strlen(dir) < 80)
		snprintf(path, sizeof(path), "%s/shoal.sock", dir);
	else
		snprintf(path, sizeof(path), "/tmp/shoal-%u.sock", (unsigned)getuid());
	return path;
}

int sh_tools_parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !*s || *s == '-')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	int shift = 0;
	switch (*end) {
	case 0:
		break;
	case 'k':
	case 'K':
		shift = 10;
		break;
	case 'm':
	case 'M':
		shift = 20;
		break;
	case 'g':
	case 'G':
		shift = 30;
		break;
	case 't':
	case 'T':
		shift = 40;
		break;
	default:
		return -1;
	}
	if (*end && end[1] && strcmp(end + 1, "iB") != 0 && strcmp(end + 1, "B") != 0)
		return -1;
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

const char *sh_tools_fmt_bytes(uint64_t v, char *buf, size_t len)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double d = (double)v;
	int u = 0;
	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", v);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
	return buf;
}

static void daemon_usage(const char *prog, FILE *f)
{
	fprintf(f,
		"usage: %s [--socket PATH] [--size BYTES] [--reserve] [--group GROUP]\n"
		"Serves a shared-memory object store on a unix socket until SIGTERM.\n"
		"  --socket PATH  where clients connect (default %s)\n"
		"  --size BYTES   hard limit on stored bytes, e.g. 512M, 16G (default 1G)\n"
		"  --reserve      fault in the small-object arena at start\n"
		"  --group GROUP  also admit processes of this group (name or gid); the\n"
		"                 socket is then 0660, else 0600\n"
		"Exit codes: 0 stopped cleanly, 1 could not serve, 2 bad arguments.\n",
		prog, sh_tools_default_socket());
}

int sh_daemon_main(const char *prog, int argc, char **argv)
{
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.socket_path = sh_tools_default_socket();
	uint64_t size = 1ull << 30;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			daemon_usage(prog, stdout);
			return SH_EXIT_OK;
		} else if (!strcmp(a, "--reserve")) {
			o.reserve = true;
		} else if (!strcmp(a, "--socket") && v) {
			o.socket_path = v;
			i++;
		} else if (!strcmp(a, "--size") && v) {
			if (sh_tools_parse_size(v, &size) != 0 || size < 4096) {
				fprintf(stderr,
					"%s: --size '%s': expected a byte count of at least 4096, "
					"like 4096, 512M or 16G\n",
					prog, v);
				return SH_EXIT_USAGE;
			}
			i++;
		} else if (!strcmp(a, "--group") && v) {
			char *end;
			unsigned long g = strtoul(v, &end, 10);
			if (*v && !*end) {
				o.group = (gid_t)g;
			} else {
				struct group *gr = getgrnam(v);
				if (!gr) {
					fprintf(stderr, "%s: --group '%s': no such group\n", prog,
						v);
					return SH_EXIT_USAGE;
				}
				o.group = gr->gr_gid;
			}
			i++;
		} else {
			fprintf(stderr, "%s: unexpected argument '%s'%s\n", prog, a,
				(!strcmp(a, "--socket") || !strcmp(a, "--size") ||
				 !strcmp(a, "--group"))
					? " (it needs a value)"
					: "");
			daemon_usage(prog, stderr);
			return SH_EXIT_USAGE;
		}
	}
	o.size = (size_t)size;
	/* Not dumpable: then other processes of our user cannot open our
	 * descriptors through /proc/PID/fd, so the arena, writable only here,
	 * stays writable only here. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* The store's thread inherits this mask: signals come to sigwait. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	shoal_store *s;
	int rc = shoal_store_open_embedded(&s, &o);
	if (rc) {
		fprintf(stderr, "%s: cannot serve on %s: %s\n", prog, o.socket_path,
			shoal_strerror(rc));
		return SH_EXIT_FAIL;
	}
	char b[32];
	fprintf(stderr, "%s: serving %s, size %s (pid %d)\n", prog, shoal_store_socket(s),
		sh_tools_fmt_bytes(size, b, sizeof(b)), (int)getpid());
	int sig = 0;
	sigwait(&set, &sig);
	fprintf(stderr, "%s: %s, stopping\n", prog, sig == SIGTERM ? "SIGTERM" : "SIGINT");
	shoal_store_close(s);
	return SH_EXIT_OK;
}
