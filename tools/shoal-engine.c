/* shoal-engine: a task engine. It loads a library of functions and runs
 * the tasks a controller sends it (src/tasks/engine.c does the work). */
#include "tasks/proto.h"

int main(int argc, char **argv)
{
	return sh_engine_main(argc, argv);
}
