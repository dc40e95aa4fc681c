/* shoal-ext: runs one extension .so in its own process for a host (see
 * include/shoal/ext.h); the host starts it, nobody else. */
#include "rpc/ext_proto.h"

int main(int argc, char **argv)
{
	return sh_ext_runner_main(argc, argv);
}
