"""Tasklets: Stackless Python's lightweight threads, on shoal's fibers.

Each tasklet runs on a C stack of its own (1 MiB reserved, pages committed as they are
touched, stacks pooled), so switching costs the same at any depth. Tasklets of a
thread run one at a time and switch only where they block: ``channel.send`` and
``receive``, ``schedule()``, ``sleep()``, ``tasklet.join()`` and ``run()``::

    from shoal import tasklets as t

    def worker(ch):
        for item in ch:                  # until the channel is closed
            print("got", item)

    ch = t.channel()
    w = t.tasklet(worker)(ch)            # scheduled; runs once main blocks
    for i in range(3):
        ch.send(i)                       # the receiver runs at once (preference -1)
    ch.close()
    t.run()                              # returns when every tasklet has ended

A tasklet starts with a copy of its spawner's ``contextvars`` context (as asyncio's
tasks do). ``join()`` returns what its function returned or raises what it raised; an
exception nobody retrieved is reported through ``sys.unraisablehook`` when the tasklet
goes, never lost. ``kill()`` raises ``TaskletExit`` in the tasklet at its next switch
point. ``run()`` raises ``RuntimeError`` naming the blocked tasklets when none can ever
run again. ``KeyboardInterrupt``, ``SystemExit`` and other ``BaseException``s that are not
``Exception``s (but ``TaskletExit``) ending a tasklet are raised again in the main tasklet
at its next switch point, as asyncio's loop does, so Ctrl-C is never swallowed; Ctrl-C
while ``run()`` waits on sleeping tasklets raises at once.

A plain blocking call (``time.sleep``, a socket read) blocks the whole thread, every
tasklet with it: use ``sleep()`` here. Shoal's own calls suspend only the tasklet that
makes them: a store ``Client``'s (``get``, ``put``, ``delete``...), ``Extension.call``
(``shoal.isolate``'s calls), the task farm's ``AsyncResult.get()``/``wait()``; the
tasklets of a thread take turns at one connection, and ``kill()`` interrupts a store get
or a result wait at once (an extension call at its end). Connecting still blocks the
thread. Tasklets never leave the thread that made them.

In an isolated extension (``shoal.isolate``) a method may run tasklets; those it leaves
stay, and run when a later call blocks. In a task engine (``shoal.tasks``) a task's
tasklets end with it: the engine kills those left when the task returns.
"""
from __future__ import annotations

from ._shoal import TaskletExit, channel, getcurrent, run, schedule, sleep, tasklet

__all__ = ["TaskletExit", "channel", "getcurrent", "run", "schedule", "sleep", "tasklet"]
