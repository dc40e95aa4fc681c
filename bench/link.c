/* A link that is a network, for the cluster suite: two network namespaces
 * of this run's own (each held by a child that made it with
 * unshare(CLONE_NEWNET) and waits), joined by a veth pair, the sending
 * side shaped with tc's token bucket to a rate the link limits, not the
 * two cores. Nothing outside them changes and nothing in them routes out:
 * the namespaces have no other device than their loopback and their end
 * of the pair, and they go with their holders. Processes are put in one or
 * the other by starting them from a thread that entered it (setns). */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child in a fresh network namespace until its pipe closes. */
static pid_t holder(int *ns, int *wr)
{
	int p[2], q[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return -1;
	if (pipe2(q, O_CLOEXEC) != 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[1]);
		close(q[0]);
		char ok = unshare(CLONE_NEWNET) == 0 ? 'y' : 'n';
		if (write(q[1], &ok, 1) != 1)
			_exit(1);
		char x;
		while (read(p[0], &x, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[0]);
	close(q[1]);
	char ok = 0;
	if (pid < 0 || read(q[0], &ok, 1) != 1 || ok != 'y') {
		close(q[0]);
		close(p[1]);
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return -1;
	}
	close(q[0]);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	*ns = open(path, O_RDONLY | O_CLOEXEC);
	*wr = p[1];
	return pid;
}

/* Runs a command (ip, tc) in namespace ns: its output in why on failure. */
static int run_in(const sh_bench_link *l, int side, char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int run_in(const sh_bench_link *l, int side, char *why, size_t whylen, const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	char *argv[24];
	int n = 0;
	for (char *s = strtok(cmd, " "); s && n < 23; s = strtok(NULL, " "))
		argv[n++] = s;
	argv[n] = NULL;
	char out[1024] = "", err[256] = "";
	if (sh_bench_link_enter(l, side) != 0) {
		snprintf(why, whylen, "entering the link's namespace: %s", strerror(errno));
		return -1;
	}
	int rc = sh_bench_exec(argv, NULL, NULL, out, sizeof(out), 30, NULL, err, sizeof(err));
	sh_bench_link_enter(l, -1);
	if (rc != 0) {
		snprintf(why, whylen, "%s: %.400s", cmd, out[0] ? out : err);
		return -1;
	}
	return 0;
}

int sh_bench_link_enter(const sh_bench_link *l, int side)
{
	int fd = side < 0 ? l->home : l->ns[side];
	return setns(fd, CLONE_NEWNET);
}

int sh_bench_link_up(sh_bench_link *l, char *why, size_t whylen)
{
	memset(l, 0, sizeof(*l));
	l->home = l->ns[0] = l->ns[1] = l->hold[0] = l->hold[1] = -1;
	if (geteuid() != 0) {
		snprintf(why, whylen, "a veth link needs root (network namespaces, tc)");
		return -1;
	}
	const char *tc = access("/usr/sbin/tc", X_OK) == 0 ? "/usr/sbin/tc"
			 : access("/sbin/tc", X_OK) == 0   ? "/sbin/tc"
							   : NULL;
	if (!tc || access("/usr/sbin/ip", X_OK) != 0) {
		snprintf(why, whylen, "no ip or tc (Debian's iproute2) to build the link");
		return -1;
	}
	l->home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	for (int i = 0; i < 2; i++)
		if ((l->pid[i] = holder(&l->ns[i], &l->hold[i])) < 0 || l->ns[i] < 0) {
			snprintf(why, whylen, "unshare(CLONE_NEWNET): %s", strerror(errno));
			sh_bench_link_down(l);
			return -1;
		}
	snprintf(l->addr[0], sizeof(l->addr[0]), "10.77.0.1");
	snprintf(l->addr[1], sizeof(l->addr[1]), "10.77.0.2");
	if (run_in(l, 0, why, whylen, "/usr/sbin/ip link add sh0 type veth peer name sh1 netns %d",
		   (int)l->pid[1]) != 0) {
		sh_bench_link_down(l);
		return -1;
	}
	for (int i = 0; i < 2; i++)
		if (run_in(l, i, why, whylen, "/usr/sbin/ip link set lo up") != 0 ||
		    run_in(l, i, why, whylen, "/usr/sbin/ip addr add %s/24 dev sh%d", l->addr[i],
			   i) != 0 ||
		    run_in(l, i, why, whylen, "/usr/sbin/ip link set sh%d up", i) != 0) {
			sh_bench_link_down(l);
			return -1;
		}
	snprintf(l->tc, sizeof(l->tc), "%s", tc);
	snprintf(l->name, sizeof(l->name), "veth");
	return 0;
}

int sh_bench_link_shape(sh_bench_link *l, const char *rate, char *why, size_t whylen)
{
	/* both ends: the data one way, the acknowledgements the other. A
	 * burst of 4 MB covers a tick of the qdisc's timer at this rate. */
	for (int i = 0; i < 2; i++)
		if (run_in(l, i, why, whylen,
			   "%s qdisc replace dev sh%d root tbf rate %s burst 4mb "
			   "latency 20ms",
			   l->tc, i, rate) != 0)
			return -1;
	snprintf(l->name, sizeof(l->name), "veth-%s", rate);
	return 0;
}

void sh_bench_link_down(sh_bench_link *l)
{
	/* every pipe first: the second holder has the first one's too */
	for (int i = 0; i < 2; i++) {
		if (l->ns[i] >= 0)
			close(l->ns[i]);
		if (l->hold[i] >= 0)
			close(l->hold[i]); /* its holder ends, and the namespace with it */
		l->ns[i] = l->hold[i] = -1;
	}
	for (int i = 0; i < 2; i++) {
		if (l->pid[i] > 0)
			waitpid(l->pid[i], NULL, 0);
		l->pid[i] = 0;
	}
	if (l->home >= 0) {
		setns(l->home, CLONE_NEWNET);
		close(l->home);
	}
	l->home = -1;
}
