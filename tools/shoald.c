/* shoald: the shared-memory object store daemon (the same program as
 * `shoal daemon`). */
#include "lib/tools.h"

int main(int argc, char **argv)
{
	return sh_daemon_main("shoald", argc, argv);
}
