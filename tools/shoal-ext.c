/* shoal-ext: runs one extension .so in its own process for a host (see
 * include/shoal/ext.h); the host starts it, nobody else. Its command line
 * is tools/lib/ext_runner.c, which Python extensions share (their runner
 * is this program's code in a python3 process). */
#include "lib/tools.h"

int main(int argc, char **argv)
{
	return sh_ext_runner_cli(argc, argv, NULL);
}
