/* shoal-engine: a task engine. It loads a library of functions and runs
 * the tasks a controller sends it; its command line is tools/lib/engine.c,
 * which the Python module's engine shares (src/tasks/engine.c does the
 * work). */
#include "lib/tools.h"

int main(int argc, char **argv)
{
	return sh_engine_cli(argc, argv, NULL);
}
