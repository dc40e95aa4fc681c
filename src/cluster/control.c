/* A cluster's directory and its control socket: where a cluster lives
 * (by its name, in shoal_socket_dir()), the requests the supervisor reads
 * there from whoever of its uid connects (checked as hostile, fuzzed by
 * fuzz/fuzz_cluster_req.c), asking them, and reading what a supervisor
 * says of its cluster. */
#include "cluster/launch.h"
#include "cluster/supervise.h"
#include "shoal_impl.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

const char *const sh_launcher_names[] = {"local", "mpi", "ssh", "slurm", NULL};

int shoal_launcher_parse(const char *name)
{
	for (int i = 0; name && sh_launcher_names[i]; i++)
		if (strcmp(name, sh_launcher_names[i]) == 0)
			return i;
	return -1;
}

const char *shoal_launcher_name(shoal_launcher l)
{
	return l >= SHOAL_LAUNCH_LOCAL && l <= SHOAL_LAUNCH_SLURM ? sh_launcher_names[l] : "?";
}

/* ---- where a cluster lives ---------------------------------------------- */

bool sh_cluster_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64 || s[0] == '.' || s[0] == '-')
		return false;
	for (; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
		    !(*s >= '0' && *s <= '9') && !strchr("._-", *s))
			return false;
	return true;
}

int sh_cluster_dir(const char *name, char *out, size_t len)
{
	char base[PATH_MAX];
	if (shoal_socket_dir(base, sizeof(base)) != 0)
		return -1;
	int k = snprintf(out, len, "%s/cluster-%s", base, name);
	/* its sockets' paths must fit in sun_path */
	return k > 0 && (size_t)k + sizeof("/controller.sock") <
				       sizeof(((struct sockaddr_un *)0)->sun_path)
		       ? 0
		       : -1;
}

int sh_cluster_unix_addr(const char *dir, const char *file, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int k = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s", dir, file);
	return k > 0 && (size_t)k < sizeof(a->sun_path) ? 0 : -1;
}

void sh_cluster_cleanup_dir(const char *dir)
{
	/* our own files only: the launchers' logs, sockets, the secret */
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(dir);
}

int sh_cluster_ask(const char *dir, const char *req, char *reply, size_t len, int64_t deadline)
{
	struct sockaddr_un a;
	if (sh_cluster_unix_addr(dir, "control.sock", &a))
		return SHOAL_EINVAL;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return shoal_errno();
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int e = errno;
		close(fd);
		return e == ENOENT || e == ECONNREFUSED ? SHOAL_ENOENT : -e;
	}
	/* the supervisor must be ours (or root's): never tell a squatter */
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 ||
	    (cr.uid != geteuid() && cr.uid != 0)) {
		close(fd);
		return SHOAL_EPERM;
	}
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
		int rc = shoal_errno();
		close(fd);
		return rc;
	}
	struct pollfd p = {fd, POLLIN, 0};
	int64_t left = (deadline - shoal_now_ns()) / 1000000;
	if (left <= 0 || poll(&p, 1, (int)(left > INT32_MAX ? INT32_MAX : left)) <= 0) {
		close(fd);
		return SHOAL_ETIMEDOUT;
	}
	ssize_t n = recv(fd, reply, len - 1, 0);
	close(fd);
	if (n <= 0)
		return n == 0 ? SHOAL_ENOENT : shoal_errno();
	reply[n] = 0;
	return 0;
}

/* Copies the rest of the line after prefix at p (up to stop, or the end
 * of the line) into out. */
static void field(const char *p, const char *stop, char *out, size_t len)
{
	const char *e = strchr(p, '\n');
	size_t n = e ? (size_t)(e - p) : strlen(p);
	const char *s = stop ? strstr(p, stop) : NULL;
	if (s && (size_t)(s - p) < n)
		n = (size_t)(s - p);
	snprintf(out, len, "%.*s", (int)n, p);
}

void sh_cluster_info_parse(const char *text, shoal_cluster_info *info)
{
	snprintf(info->text, sizeof(info->text), "%s", text);
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, "controller: ", 12)) {
			field(l + 12, " and tcp://", info->controller, sizeof(info->controller));
			const char *t = strstr(l, " and tcp://");
			const char *e = strchr(l, '\n');
			if (t && (!e || t < e))
				field(t + 5, NULL, info->tcp, sizeof(info->tcp));
		} else if (!strncmp(l, "secret: ", 8)) {
			field(l + 8, NULL, info->secret_file, sizeof(info->secret_file));
		} else if (!strncmp(l, "store: ", 7)) {
			field(l + 7, " (pid", info->store, sizeof(info->store));
		} else if (!strncmp(l, "engines: ", 9)) {
			unsigned e = 0, a = 0;
			if (sscanf(l + 9, "%u registered, %u asked for", &e, &a) == 2)
				info->engines = e, info->asked = a;
		} else if (!strncmp(l, "supervisor: pid ", 16)) {
			info->supervisor_pid = atoi(l + 16);
		} else if (!strncmp(l, "cluster ", 8)) {
			const char *p = strstr(l, "(supervisor pid ");
			const char *e = strchr(l, '\n');
			if (p && (!e || p < e))
				info->supervisor_pid = atoi(p + 16);
		}
	}
}

/* ---- the control socket's requests ------------------------------------- */

int sh_cluster_parse_request(const char *buf, size_t n, sh_cluster_req *r, char *why, size_t whylen)
{
	memset(r, 0, sizeof(*r));
	if (n == 0 || n > SH_CLUSTER_REQ_MAX)
		return snprintf(why, whylen, "a request of %zu bytes, expected 1 to %d", n,
				SH_CLUSTER_REQ_MAX),
		       -1;
	/* words separated by '\n': COMMAND [N LAUNCHER [HOSTS]] */
	char tmp[SH_CLUSTER_REQ_MAX + 1];
	memcpy(tmp, buf, n);
	tmp[n] = 0;
	if (memchr(buf, 0, n))
		return snprintf(why, whylen, "a request holding a NUL byte"), -1;
	char *save = NULL, *w[5];
	int k = 0;
	for (char *t = strtok_r(tmp, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
		if (k == 4)
			return snprintf(why, whylen, "a request of more than 4 lines"), -1;
		w[k++] = t;
	}
	if (k == 0)
		return snprintf(why, whylen, "an empty request"), -1;
	if (strcmp(w[0], "status") == 0 || strcmp(w[0], "stop") == 0) {
		if (k != 1)
			return snprintf(why, whylen, "%s takes nothing", w[0]), -1;
		r->op = strcmp(w[0], "status") == 0 ? SH_CLUSTER_STATUS : SH_CLUSTER_STOP;
		return 0;
	}
	if (strcmp(w[0], "add") != 0)
		return snprintf(why, whylen,
				"unknown request '%.32s' (expected status, add or stop)", w[0]),
		       -1;
	if (k < 3)
		return snprintf(why, whylen, "add: expected a count and a launcher"), -1;
	char *end;
	errno = 0;
	unsigned long c = strtoul(w[1], &end, 10);
	if (*end || end == w[1] || errno || c == 0 || c > SHOAL_CLUSTER_MAX_ENGINES)
		return snprintf(why, whylen, "add: %.32s engines, expected 1 to %d", w[1],
				SHOAL_CLUSTER_MAX_ENGINES),
		       -1;
	int l = shoal_launcher_parse(w[2]);
	if (l < 0)
		return snprintf(why, whylen,
				"add: launcher '%.32s', expected local, mpi, ssh or slurm", w[2]),
		       -1;
	r->op = SH_CLUSTER_ADD;
	r->n = (uint32_t)c;
	r->launcher = l;
	if (k == 4) {
		if (w[3][0] != '/' || strlen(w[3]) >= sizeof(r->hosts))
			return snprintf(why, whylen,
					"add: the hosts file must be an absolute path"),
			       -1;
		snprintf(r->hosts, sizeof(r->hosts), "%s", w[3]);
	}
	return 0;
}

int sh_cluster_format_request(const sh_cluster_req *r, char *buf, size_t len)
{
	int k;
	if (r->op == SH_CLUSTER_STATUS)
		k = snprintf(buf, len, "status");
	else if (r->op == SH_CLUSTER_STOP)
		k = snprintf(buf, len, "stop");
	else if (r->op == SH_CLUSTER_ADD && r->launcher >= 0 && r->launcher <= SHOAL_LAUNCH_SLURM)
		k = snprintf(buf, len, "add\n%u\n%s%s%s", r->n, sh_launcher_names[r->launcher],
			     r->hosts[0] ? "\n" : "", r->hosts);
	else
		return -1;
	return k > 0 && (size_t)k < len && k <= SH_CLUSTER_REQ_MAX ? k : -1;
}
