/* What the layers above may know of a task controller beyond the public
 * API (shoal/tasks.h): a descriptor that says when to look at its engines
 * again, for the supervisor, which waits for engines to register. */
#ifndef SHOAL_TASKS_CONTROLLER_H
#define SHOAL_TASKS_CONTROLLER_H

#include <shoal/tasks.h>

/* An eventfd, readable once an engine joined or left since it was last
 * read (read it to clear it, then look at shoal_controller_stat_get).
 * Valid until the controller is closed; one reader at a time. */
int sh_ctl_engines_fd(shoal_controller *ctl);

#endif
