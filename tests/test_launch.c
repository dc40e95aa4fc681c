/* Clusters through the C calls of shoal/cluster.h, as a program that
 * embeds them would make them: a local cluster of C engines started (its
 * supervisor this build's `shoal cluster serve`), its status, engines
 * added, tasks run through its controller, a second start of the same
 * name refused, a stop that ends every process and the directory, what a
 * dead supervisor left cleaned up; and the options refused, each saying
 * why. The launchers themselves (mpi, ssh, slurm) are tested through the
 * command line, which makes the same calls (tests/python/test_launchers.py). */
#include "test.h"

#include <shoal/cluster.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

static char shoal_exe[PATH_MAX], funcs[PATH_MAX];
static const char *sup[4];

static void opts_for(shoal_cluster_opts *o, const char *name, uint32_t n)
{
	sh_test_bin(shoal_exe, sizeof(shoal_exe), "tools/shoal");
	sh_test_bin(funcs, sizeof(funcs), "examples/farm_funcs.so");
	sup[0] = shoal_exe, sup[1] = "cluster", sup[2] = "serve", sup[3] = NULL;
	shoal_cluster_opts_init(o);
	o->name = name;
	o->engines = n;
	o->so = funcs;
	o->supervisor = sup;
	o->timeout_s = 60;
}

/* A name of this run's own: tests of several clones do not meet. */
static const char *own_name(char *buf, size_t len, const char *what)
{
	snprintf(buf, len, "t%d-%s", (int)getpid(), what);
	return buf;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

SH_TEST_T(a_cluster_starts_serves_grows_and_stops, 180)
{
	char name[64], why[4096];
	own_name(name, sizeof(name), "api");
	shoal_cluster_opts o;
	opts_for(&o, name, 2);
	static shoal_cluster_info info;
	CHECK_OK(shoal_cluster_start(&o, &info, why, sizeof(why)));
	CHECK(exists(info.controller));
	CHECK_EQ(info.engines, 2);
	CHECK(info.supervisor_pid > 0 && kill(info.supervisor_pid, 0) == 0);
	CHECK_STR(info.tcp, "");
	/* what status says, from the supervisor */
	CHECK_OK(shoal_cluster_status(name, &info, why, sizeof(why)));
	CHECK_EQ(info.engines, 2);
	CHECK_EQ(info.asked, 2);
	CHECK_HAS(info.text, "tasks: ");
	/* a second cluster of the same name: refused, the first untouched */
	static shoal_cluster_info other;
	CHECK_RC(shoal_cluster_start(&o, &other, why, sizeof(why)), SHOAL_EEXIST);
	CHECK_HAS(why, "is running");
	/* a task through its controller reaches an engine */
	shoal_farm *f;
	CHECK_OK(shoal_farm_connect(&f, info.controller));
	shoal_vbuf *b;
	CHECK_OK(shoal_vbuf_create(&b));
	shoal_task t;
	CHECK_OK(shoal_farm_submit(f, "square", shoal_v_int(b, 12), NULL, &t));
	const shoal_value *res = NULL;
	CHECK_OK(shoal_farm_wait(f, t, b, &res, shoal_deadline_in(20000000000LL)));
	CHECK(res && res->type == SHOAL_V_INT);
	CHECK_EQ(res->v.i, 144);
	shoal_vbuf_free(b);
	shoal_farm_close(f);
	/* more engines, all registered when it returns */
	CHECK_OK(shoal_cluster_add(name, 1, SHOAL_LAUNCH_LOCAL, NULL, 60, &info, why, sizeof(why)));
	CHECK_EQ(info.engines, 3);
	CHECK_EQ(info.asked, 3);
	/* stop: every process and the directory go */
	int pid = info.supervisor_pid;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", info.controller);
	*strrchr(dir, '/') = 0;
	CHECK_OK(shoal_cluster_stop(name, 10, why, sizeof(why)));
	CHECK(!exists(dir));
	sh_test_wait_gone(pid, 5000);
	CHECK_RC(shoal_cluster_status(name, &info, why, sizeof(why)), SHOAL_ENOENT);
	CHECK_HAS(why, "no cluster named");
	CHECK_RC(shoal_cluster_stop(name, 10, why, sizeof(why)), SHOAL_ENOENT);
}

SH_TEST_T(a_dead_supervisors_cluster_is_gone_and_cleaned_up, 120)
{
	char name[64], why[4096];
	own_name(name, sizeof(name), "dead");
	shoal_cluster_opts o;
	opts_for(&o, name, 1);
	static shoal_cluster_info info;
	CHECK_OK(shoal_cluster_start(&o, &info, why, sizeof(why)));
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", info.controller);
	*strrchr(dir, '/') = 0;
	CHECK_OK(kill(info.supervisor_pid, SIGKILL));
	sh_test_wait_gone(info.supervisor_pid, 5000);
	/* its engine loses its controller and ends; its files stay until a
	 * stop (or a start of the same name) finds no one there */
	CHECK_RC(shoal_cluster_status(name, &info, why, sizeof(why)), SHOAL_ENOENT);
	CHECK_RC(shoal_cluster_stop(name, 10, why, sizeof(why)), SHOAL_ENOENT);
	CHECK(!exists(dir));
	/* and the name is free again */
	CHECK_OK(shoal_cluster_start(&o, &info, why, sizeof(why)));
	CHECK_OK(shoal_cluster_stop(name, 10, why, sizeof(why)));
}

SH_TEST(bad_options_are_refused_saying_why)
{
	char why[4096];
	shoal_cluster_opts o;
	opts_for(&o, "fine", 0);
	static shoal_cluster_info info;
	CHECK_RC(shoal_cluster_start(&o, &info, why, sizeof(why)), SHOAL_EINVAL);
	CHECK_HAS(why, "engines");
	o.engines = 1;
	o.name = "../etc";
	CHECK_RC(shoal_cluster_start(&o, &info, why, sizeof(why)), SHOAL_EINVAL);
	CHECK_HAS(why, "name");
	o.name = "fine";
	o.launcher = SHOAL_LAUNCH_SSH;
	CHECK_RC(shoal_cluster_start(&o, &info, why, sizeof(why)), SHOAL_EINVAL);
	CHECK_HAS(why, "hosts");
	o.launcher = SHOAL_LAUNCH_LOCAL;
	o.so = "/nonexistent/funcs.so";
	CHECK(shoal_cluster_start(&o, &info, why, sizeof(why)) < 0);
	CHECK_HAS(why, "/nonexistent/funcs.so");
	CHECK_RC(shoal_cluster_add("fine", 0, SHOAL_LAUNCH_LOCAL, NULL, 1, NULL, why, sizeof(why)),
		 SHOAL_EINVAL);
	CHECK_EQ(shoal_launcher_parse("slurm"), SHOAL_LAUNCH_SLURM);
	CHECK_EQ(shoal_launcher_parse("pbs"), -1);
	CHECK_STR(shoal_launcher_name(SHOAL_LAUNCH_MPI), "mpi");
}
