/* The programs that serve until stopped: the store daemon's main, for
 * shoald and `shoal daemon` (options, the store itself: an embedded store
 * whose host does nothing else, and with --tasks a task controller beside
 * it), and that of `shoal controller`, a controller alone; both stop
 * cleanly on SIGTERM or SIGINT. Also small helpers of tools.h that the
 * programs share: the default socket path, sizes parsed and formatted. */
#include "tools.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <shoal/shoal.h>

const char *sh_tools_default_socket(void)
{
	static char path[108];
	const char *env = getenv("SHOAL_SOCKET");
	if (env && *env)
		return env;
	if (!path[0]) {
		char dir[80];
		/* The directory is checked (ours, 0700, not a symlink) on every
		 * start and every connect: a path someone else could create
		 * first would let them serve our clients or squat our socket. */
		if (shoal_socket_dir(dir, sizeof(dir)) != 0) {
			fprintf(stderr,
				"shoal: the default socket's directory is not safe to use (see "
				"above); set $SHOAL_SOCKET or pass --socket\n");
			exit(SH_EXIT_FAIL);
		}
		snprintf(path, sizeof(path), "%s/shoald.sock", dir);
	}
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

/* The task controller's options, shared by the daemon (which may serve
 * one beside the store) and `shoal controller`: true when o (from
 * sh_cli_next) was one of them. TASKS_OPTS is for their tables (kept one a
 * line: clang-format would brace them). */
// clang-format off
#define TASKS_OPTS \
	{"scheme", required_argument, NULL, 'C'}, \
	{"tcp", required_argument, NULL, 'T'}
// clang-format on

static bool tasks_opt(const sh_cli *cli, int o, shoal_controller_opts *co)
{
	static const char *const schemes[] = {"pure",	  "lru",    "leastload",
					      "weighted", "twobin", NULL};
	if (o == 'C')
		co->scheme = (shoal_scheme)shoal_scheme_parse(
			sh_cli_choice(cli, "--scheme", optarg, schemes));
	else if (o == 'T')
		co->tcp = optarg;
	else
		return false;
	return true;
}

static const char tasks_usage[] =
	"  --scheme S       how tasks are spread: pure, lru, leastload (default),\n"
	"                   weighted or twobin\n"
	"  --tcp H:P        also serve engines and clients of other hosts on TCP; they\n"
	"                   must know the secret in $SHOAL_SECRET_FILE or $SHOAL_SECRET\n";

static const char std_usage[] = "  -h, --help       show this help\n"
				"  -V, --version    print the version\n";

/* SIGTERM and SIGINT blocked in every thread (the servers' threads
 * inherit the mask), to be taken by wait_stop; SIGPIPE ignored. */
static void block_stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void wait_stop(const char *prog, const sigset_t *set)
{
	int sig = 0;
	sigwait(set, &sig);
	fprintf(stderr, "%s: %s, stopping\n", prog, sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void say_tasks(const char *prog, const shoal_controller *ctl, shoal_scheme scheme)
{
	const char *tcp = shoal_controller_tcp(ctl);
	fprintf(stderr, "%s: tasks on %s%s%s, scheme %s (pid %d)\n", prog,
		shoal_controller_socket(ctl), tcp ? " and tcp://" : "", tcp ? tcp : "",
		shoal_scheme_name(scheme), (int)getpid());
}

/* Shared memory in 4 KiB pages (the kernel's default for it) costs every
 * put a page allocation per 4 KiB and every reader a fault per 16 pages or
 * so: large puts copy at about a third of memcpy's speed and first reads
 * of a GiB take a second. In 2 MiB pages both are close to memcpy's. Only
 * the machine's owner can choose that for all its shared memory: say so. */
/* The name the daemon runs under ("shoald" or "shoal daemon"), for its
 * usage. */
static const char *daemon_prog;

static void daemon_usage(FILE *f)
{
	fprintf(f,
		"usage: %s [--socket PATH] [--size BYTES] [--reserve] [--spares BYTES]\n"
		"          [--huge-pages]\n"
		"          [--group GROUP] [--state-dir DIR]\n"
		"          [--spill-dir DIR [--spill-limit BYTES] [--spill-high F] [--spill-low "
		"F]]\n"
		"          [--peer HOST:PORT [--peer-no-encrypt] [--peer-min-rate R]\n"
		"           [--peer-room BYTES]\n"
		"           [--meta local|etcd://HOST:PORT[,...] [--cluster NAME] [--lease-ttl "
		"S]]\n"
		"           [--peers-file FILE]]\n"
		"          [--tasks PATH [--scheme S] [--tcp HOST:PORT]] [--ready-fd N]\n\n"
		"Serves a shared-memory object store on a unix socket until SIGTERM or SIGINT:\n"
		"clients on this host put named objects (tensor dicts, blobs) into it and map\n"
		"them read-only, without copies. With --tasks it also serves a task controller.\n\n"
		"options:\n"
		"  --socket PATH    where clients connect (default: $SHOAL_SOCKET, else\n"
		"                   shoald.sock in $XDG_RUNTIME_DIR/shoal, /run/shoal or\n"
		"                   /tmp/shoal-UID)\n"
		"  --size BYTES     hard limit on stored bytes, e.g. 512M, 16G (default 1G)\n"
		"  --reserve        at start, before serving: fault in the small-object arena\n"
		"                   and touch --size of the pages large objects take (huge\n"
		"                   ones with --huge-pages), so no put or copy meets memory\n"
		"                   never touched (on a VM: seconds a GiB, paid at start)\n"
		"  --spares BYTES   free capacity kept allocated ahead for puts and\n"
		"                   restores of 1 MiB and more, in segments the size of\n"
		"                   recent puts and spills, so they only copy (default: half\n"
		"                   of --size, at most 1G; 0: none)\n"
		"  --huge-pages     segments of 2 MiB and more on huge pages: the hugetlb pool\n"
		"                   (vm.nr_hugepages) while it has room, else shmem's\n"
		"                   transparent huge pages where shmem_enabled allows them;\n"
		"                   the log says which (default: 4 KiB pages)\n"
		"  --state-dir DIR  keep persistent objects in DIR (made 0700; on tmpfs,\n"
		"                   e.g. /dev/shm/NAME) and serve them again after a restart\n"
		"  --spill-dir DIR  when memory runs short, write cold objects (no client\n"
		"                   holds them; least recently got first) to files in DIR, on\n"
		"                   a disk (made 0700; tmpfs refused), and bring each back at\n"
		"                   its next get; emptied at start (persistent objects\n"
		"                   outlive a restart through --state-dir)\n"
		"  --spill-limit BYTES  the most bytes of spill files (default: the disk's)\n"
		"  --spill-high F   start spilling past this fraction of --size (default 0.8)\n"
		"  --spill-low F    and spill down to this one (default: high - 0.1)\n"
		"  --spill-any-fs   accept a --spill-dir on tmpfs or ramfs (tests)\n"
		"  --group GROUP    also admit processes of this group (name or gid); the\n"
		"                   socket is then 0660, else 0600\n"
		"  --peer H:P       also serve other hosts' stores on TCP (they copy objects\n"
		"                   from this one: shoal migrate); they must know the secret\n"
		"                   in $SHOAL_SECRET_FILE or $SHOAL_SECRET, as this one does\n"
		"                   to copy from them\n"
		"  --peer-no-encrypt  send objects to stores that also ask for it in clear\n"
		"                   (still authenticated): for a trusted network only\n"
		"  --peer-min-rate R  end a copy from another store that comes slower than R\n"
		"                   bytes a second over 5 s, e.g. 100K, 1M (default 1M)\n"
		"  --peer-room BYTES  the most room copies from other stores hold at once\n"
		"                   (default: all of --size); local puts come first anyway\n"
		"  --meta etcd://H:P[,H:P...]  the cluster's registry in etcd: this store\n"
		"                   registers itself under a lease, a persistent name is unique\n"
		"                   in the cluster, and a get of an object of another host\n"
		"                   migrates it here (default: local, this store's names only)\n"
		"  --cluster NAME   the cluster's name in etcd (default: default)\n"
		"  --lease-ttl S    seconds this store's entries outlive it (default 10)\n"
		"  --peers-file F   without etcd: stores (HOST:PORT a line) a get of an object\n"
		"                   not here asks in turn\n"
		"  --tasks PATH     also serve a task controller on this socket\n"
		"  --ready-fd N     once serving, write \"ready SOCKET\" and a newline to the\n"
		"                   open descriptor N and close it (for whoever started this\n"
		"                   daemon: a wait on an event, not on connects)\n"
		"%s%s"
		"\nExit codes: 0 stopped cleanly, 1 could not serve, 2 bad arguments.\n",
		daemon_prog, tasks_usage, std_usage);
}

/* A static peer list: HOST:PORT a line ('#' starts a comment), as
 * "HOST:PORT,HOST:PORT...". */
static const char *read_peers(const sh_cli *cli, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		sh_cli_fail(cli, "--peers-file %s: %s", path, strerror(errno));
	static char list[8192];
	size_t n = 0;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "#\r\n")] = 0;
		char *p = line + strspn(line, " \t");
		p[strcspn(p, " \t")] = 0;
		if (!*p)
			continue;
		if (!strchr(p, ':') || n + strlen(p) + 2 > sizeof(list))
			sh_cli_fail(cli, "--peers-file %s: '%s': expected HOST:PORT a line", path,
				    p);
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", n ? "," : "", p);
	}
	fclose(f);
	if (!n)
		sh_cli_fail(cli, "--peers-file %s: no HOST:PORT in it", path);
	return list;
}

int sh_daemon_main(const char *prog, int argc, char **argv)
{
	shoal_store_opts o;
	shoal_store_opts_init(&o);
	o.socket_path = NULL; /* the default only when none is named */
	shoal_controller_opts co;
	shoal_controller_opts_init(&co);
	uint64_t size = 1ull << 30;
	/* The daemon's options, all of them. */
	static const struct option opts[] = {SH_CLI_STD,
					     TASKS_OPTS,
					     {"socket", required_argument, NULL, 's'},
					     {"size", required_argument, NULL, 'z'},
					     {"reserve", no_argument, NULL, 'r'},
					     {"spares", required_argument, NULL, 'S'},
					     {"huge-pages", no_argument, NULL, 'H'},
					     {"group", required_argument, NULL, 'g'},
					     {"state-dir", required_argument, NULL, 'd'},
					     {"spill-dir", required_argument, NULL, 'D'},
					     {"spill-limit", required_argument, NULL, 'l'},
					     {"spill-high", required_argument, NULL, 'I'},
					     {"spill-low", required_argument, NULL, 'w'},
					     {"spill-any-fs", no_argument, NULL, 'A'},
					     {"tasks", required_argument, NULL, 't'},
					     {"peer", required_argument, NULL, 'p'},
					     {"peer-no-encrypt", no_argument, NULL, 'P'},
					     {"peer-min-rate", required_argument, NULL, 'R'},
					     {"peer-room", required_argument, NULL, 'O'},
					     {"meta", required_argument, NULL, 'm'},
					     {"cluster", required_argument, NULL, 'c'},
					     {"lease-ttl", required_argument, NULL, 'L'},
					     {"peers-file", required_argument, NULL, 'F'},
					     {"ready-fd", required_argument, NULL, 'y'},
					     {0}};
	daemon_prog = prog;
	const sh_cli cli = {.prog = prog, .usage = daemon_usage, .opts = opts};
	int opt, ready_fd = -1;
	while ((opt = sh_cli_next(&cli, argc, argv)) != -1) {
		const char *v = optarg;
		if (tasks_opt(&cli, opt, &co))
			continue;
		switch (opt) {
		case 's':
			o.socket_path = v;
			break;
		case 'z':
			if (sh_tools_parse_size(v, &size) != 0 || size < 4096)
				sh_cli_fail(&cli,
					    "--size '%s': expected a byte count of at least 4096, "
					    "like 4096, 512M or 16G",
					    v);
			break;
		case 'r':
			o.reserve = true;
			break;
		case 'H':
			o.huge_pages = true;
			break;
		case 'S': {
			uint64_t n;
			if (sh_tools_parse_size(v, &n) != 0)
				sh_cli_fail(&cli,
					    "--spares '%s': expected a byte count, like 0, 256M or "
					    "1G",
					    v);
			o.spares = (size_t)n;
			break;
		}
		case 'd':
			o.state_dir = v;
			break;
		case 'D':
			o.spill_dir = v;
			break;
		case 'l':
			if (sh_tools_parse_size(v, &o.spill_limit) != 0 || o.spill_limit < 4096)
				sh_cli_fail(&cli,
					    "--spill-limit '%s': expected a byte count of at least "
					    "4096, like 64G",
					    v);
			break;
		case 'I':
		case 'w': {
			char *end;
			double f = strtod(v, &end);
			if (*end || end == v || !(f > 0 && f <= 1))
				sh_cli_fail(
					&cli,
					"--spill-%s '%s': expected a fraction of --size, above 0 "
					"and at most 1, like 0.8",
					opt == 'I' ? "high" : "low", v);
			*(opt == 'I' ? &o.spill_high : &o.spill_low) = f;
			break;
		}
		case 'A':
			o.spill_any_fs = true;
			break;
		case 'g': {
			char *end;
			errno = 0;
			unsigned long g = strtoul(v, &end, 10);
			if (*v >= '0' && *v <= '9' && !*end && !errno && g < (gid_t)-1) {
				o.group = (gid_t)g;
			} else {
				struct group *gr = getgrnam(v);
				if (!gr)
					sh_cli_fail(&cli,
						    "--group '%s': no such group (expected a group "
						    "name or a numeric gid)",
						    v);
				o.group = gr->gr_gid;
			}
			break;
		}
		case 't':
			co.socket = v;
			break;
		case 'p':
			o.peer = v;
			break;
		case 'P':
			o.peer_no_encrypt = true;
			break;
		case 'R':
			if (sh_tools_parse_size(v, &o.peer_min_rate) != 0 || o.peer_min_rate == 0)
				sh_cli_fail(
					&cli,
					"--peer-min-rate '%s': expected bytes a second, at least "
					"1, like 100K or 1M",
					v);
			break;
		case 'O':
			if (sh_tools_parse_size(v, &o.peer_room) != 0 || o.peer_room < 4096)
				sh_cli_fail(&cli,
					    "--peer-room '%s': expected a byte count of at least "
					    "4096, like 256M or 8G",
					    v);
			break;
		case 'm':
			o.meta = v;
			break;
		case 'c':
			o.cluster = v;
			break;
		case 'L': {
			char *end;
			unsigned long t = strtoul(v, &end, 10);
			if (*end || end == v || t < 2 || t > 3600)
				sh_cli_fail(&cli, "--lease-ttl '%s': expected seconds, 2 to 3600",
					    v);
			o.lease_ttl_s = (uint32_t)t;
			break;
		}
		case 'F':
			o.peers = read_peers(&cli, v);
			break;
		case 'y': {
			char *end;
			errno = 0;
			long fd = strtol(v, &end, 10);
			if (*end || end == v || errno || fd < 3 || fd > INT_MAX ||
			    fcntl((int)fd, F_GETFD) < 0)
				sh_cli_fail(
					&cli,
					"--ready-fd '%s': expected an open descriptor's number, "
					"3 or more",
					v);
			ready_fd = (int)fd;
			fcntl(ready_fd, F_SETFD, FD_CLOEXEC); /* not the engines' */
			break;
		}
		}
	}
	sh_cli_operands(&cli, argc, argv, 0, 0);
	if (co.socket)
		sh_tools_log_info(); /* engines coming and going are news */
	o.size = (size_t)size;
	/* Not dumpable: then other processes of our user cannot open our
	 * descriptors through /proc/PID/fd, so the arena, writable only here,
	 * stays writable only here. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	sigset_t set;
	block_stop_signals(&set);
	shoal_store *s;
	/* Every connection and every segment is a descriptor: a daemon takes
	 * all its hard limit allows (the store bounds its use by that). */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	if (!o.socket_path)
		o.socket_path = sh_tools_default_socket();
	int rc = shoal_store_open_embedded(&s, &o);
	if (rc) {
		fprintf(stderr, "%s: cannot serve on %s: %s\n", prog, o.socket_path,
			shoal_strerror(rc));
		return SH_EXIT_FAIL;
	}
	shoal_controller *ctl = NULL;
	if (co.socket && (rc = shoal_controller_open(&ctl, &co)) != 0) {
		fprintf(stderr, "%s: cannot serve tasks on %s: %s\n", prog, co.socket,
			shoal_strerror(rc));
		shoal_store_close(s);
		return SH_EXIT_FAIL;
	}
	char b[32];
	fprintf(stderr, "%s: serving %s, size %s%s%s%s%s (pid %d)\n", prog, shoal_store_socket(s),
		sh_tools_fmt_bytes(size, b, sizeof(b)), o.state_dir ? ", state in " : "",
		o.state_dir ? o.state_dir : "", shoal_store_peer(s) ? ", peers on " : "",
		shoal_store_peer(s) ? shoal_store_peer(s) : "", (int)getpid());
	if (ctl)
		say_tasks(prog, ctl, co.scheme);
	const char *why;
	shoal_store_pages(s, &why);
	fprintf(stderr, "%s: segments of 2 MiB and more: %s\n", prog, why);
	if (ready_fd >= 0) {
		/* whoever started us waits on this line, not on connects */
		dprintf(ready_fd, "ready %s\n", shoal_store_socket(s));
		close(ready_fd);
	}
	wait_stop(prog, &set);
	shoal_controller_close(ctl);
	shoal_store_close(s);
	return SH_EXIT_OK;
}

static void controller_usage(FILE *f)
{
	fprintf(f,
		"usage: %s [--socket PATH] [--scheme S] [--tcp HOST:PORT]\n\n"
		"Serves a task controller until SIGTERM or SIGINT: clients submit tasks to it,\n"
		"and it hands them to engines (shoal-engine processes, which connect to it)\n"
		"and sends the results back. It logs engines as they come and go; `shoal stat\n"
		"--socket PATH` shows its engines and tasks.\n\n"
		"options:\n"
		"  --socket PATH    where they connect on this host (default: a fresh path,\n"
		"                   printed)\n"
		"%s%s"
		"\nExit codes: 0 stopped cleanly, 1 could not serve, 2 bad arguments.\n",
		daemon_prog, tasks_usage, std_usage);
}

int sh_controller_main(const char *prog, int argc, char **argv)
{
	shoal_controller_opts co;
	shoal_controller_opts_init(&co);
	static const struct option opts[] = {
		SH_CLI_STD, TASKS_OPTS, {"socket", required_argument, NULL, 's'}, {0}};
	daemon_prog = prog;
	const sh_cli cli = {.prog = prog, .usage = controller_usage, .opts = opts};
	int opt;
	while ((opt = sh_cli_next(&cli, argc, argv)) != -1)
		if (!tasks_opt(&cli, opt, &co))
			co.socket = optarg; /* 's', the only other */
	sh_cli_operands(&cli, argc, argv, 0, 0);
	sh_tools_log_info();
	sigset_t set;
	block_stop_signals(&set);
	shoal_controller *ctl;
	int rc = shoal_controller_open(&ctl, &co);
	if (rc) {
		fprintf(stderr, "%s: cannot serve: %s\n", prog, shoal_strerror(rc));
		return SH_EXIT_FAIL;
	}
	say_tasks(prog, ctl, co.scheme);
	wait_stop(prog, &set);
	shoal_controller_close(ctl);
	return SH_EXIT_OK;
}
