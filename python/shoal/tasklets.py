"""Tasklets: Stackless Python's lightweight threads, on shoal's fibers.

Each tasklet runs on a C stack of its own (1 MiB reserved, pages committed as they are
touched, stacks pooled), so switching costs the same at any depth. Tasklets of a
thread run one at a time and switch only where they block: ``channel.send`` and
``receive``, ``select()``, ``schedule()``, ``sleep()``, ``wait_readable()`` and
``wait_writable()``, ``to_thread()``, ``tasklet.join()`` and ``run()``::

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

``select(cases, timeout=None)`` is Go's select over channel sends and receives: cases
are ``ch.receive_case()`` and ``ch.send_case(value)`` (a bare channel receives); it runs
one ready case, chosen at random when several are (no case starves), else waits for the
first, and returns ``(index, value)``: what a receive got (``CLOSED`` when its channel is
closed and empty, Go's ``ok == false``), ``None`` for a send. A send chosen on a closed
channel raises ``ValueError``; ``TimeoutError`` when the timeout passes (``timeout=0``:
only what is ready now)::

    idx, v = t.select([jobs.receive_case(), quit.receive_case()], timeout=5)

Channels work between threads: a tasklet of one thread receives what a tasklet (or plain
code, which then blocks only its own thread, the GIL let go) of another sends, and the
others of its thread run meanwhile.

``wait_readable(fd, timeout=None)`` and ``wait_writable`` suspend the tasklet until a file
descriptor (or a socket) is ready. A plain blocking call (``time.sleep``, a socket read
without them, a C library's call) blocks the whole thread, every tasklet with it: use
``sleep()``, the fd waits, or ``to_thread(fn, *args)``, which runs fn on a worker thread
and suspends only the caller. Shoal's own calls suspend only the tasklet that makes
them: a store ``Client``'s (``get``, ``put``, ``delete``...), ``Extension.call``
(``shoal.isolate``'s calls), the task farm's ``AsyncResult.get()``/``wait()``; the
tasklets of a thread take turns at one connection, and ``kill()`` interrupts a store get
or a result wait at once (an extension call at its end). Connecting still blocks the
thread. Tasklets never leave the thread that made them.

asyncio: ``run_asyncio(coro)`` runs a coroutine in a tasklet, its loop waiting through
shoal so the other tasklets run; in it, ``await wrap(t)`` awaits a tasklet (or a
channel's receive)::

    async def main():
        worker = t.tasklet(crunch)(data)     # a tasklet for the part that wants one
        await asyncio.sleep(0.1)             # other coroutines and tasklets run
        return await t.wrap(worker)

    t.run_asyncio(main())

In an isolated extension (``shoal.isolate``) a method may run tasklets; those it leaves
stay, and run when a later call blocks. In a task engine (``shoal.tasks``) a task's
tasklets end with it: the engine kills those left when the task returns.
"""
from __future__ import annotations

import _queue
import _thread
import os

from . import _shoal
from ._shoal import (
    CLOSED,
    TaskletExit,
    channel,
    getcurrent,
    run,
    schedule,
    select,
    sleep,
    tasklet,
    wait_readable,
    wait_writable,
)

# typing and threading are imported when used: they take 15 and 12 ms, which
# `import shoal` (it re-exports these names) would pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    import queue
    import selectors
    import threading
    from typing import Any, Awaitable, Callable, Coroutine, List, Optional, Tuple, TypeVar

    T = TypeVar("T")

__all__ = [
    "CLOSED",
    "TaskletExit",
    "channel",
    "getcurrent",
    "run",
    "run_asyncio",
    "schedule",
    "select",
    "sleep",
    "tasklet",
    "to_thread",
    "wait_readable",
    "wait_writable",
    "wrap",
]

# ---- to_thread: a small pool of worker threads ----

# Enough for blocking calls that mostly wait (as asyncio's default executor).
_MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)
_pool_lock = _thread.allocate_lock()
_jobs: "queue.SimpleQueue[Optional[Tuple[Any, Callable[..., Any], Tuple[Any, ...], Any]]]" = (
    _queue.SimpleQueue()
)
_workers: "List[threading.Thread]" = []


def _worker() -> None:
    while True:
        # counted while it waits for a job: an idle worker cannot send on a
        # channel, so deadlock detection does not wait for it
        _shoal._worker_idle(1)
        try:
            job = _jobs.get()
        finally:
            _shoal._worker_idle(-1)
        if job is None:
            return
        done, fn, args, kwargs = job
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # the caller raises it, whatever it is
            done.set_exception(e)
        else:
            done.set_result(result)
        del job, done, fn, args, kwargs


def _submit(job: "Tuple[Any, Callable[..., Any], Tuple[Any, ...], Any]") -> None:
    with _pool_lock:
        # a worker of its own unless an idle one is left for it
        if _jobs.qsize() >= _shoal._worker_idle(0) and len(_workers) < _MAX_WORKERS:
            import threading

            th = threading.Thread(target=_worker, name="shoal-to_thread", daemon=True)
            th.start()
            _workers.append(th)
        _jobs.put(job)


def to_thread(fn: "Callable[..., T]", *args: "Any", **kwargs: "Any") -> "T":
    """Runs ``fn(*args, **kwargs)`` on a worker thread and returns its result (or raises
    its exception), suspending only the calling tasklet: the thread's other tasklets run
    meanwhile. For blocking calls shoal cannot suspend (``time.sleep``, a blocking socket,
    a C library's call): made by a tasklet directly, they block every tasklet of the
    thread. fn runs in a copy of the caller's ``contextvars`` context (as asyncio's
    ``to_thread``). A killed caller stops waiting at once; fn still runs to its end."""
    import contextvars

    done = _shoal._Completion()
    _submit((done, contextvars.copy_context().run, (fn, *args), kwargs))
    return done.wait("to_thread")


# ---- asyncio ----


def _tasklet_selector() -> "selectors.BaseSelector":
    import asyncio
    import selectors

    class TaskletSelector(selectors.EpollSelector):
        """An epoll selector whose waits suspend only the loop's tasklet: it waits until
        its epoll descriptor is readable through shoal's poller (wait_readable), then
        collects the events without blocking; a poll without waiting lets the other
        tasklets run once (schedule()). While it waits, the thread has no running
        asyncio loop, so another tasklet may run a loop of its own."""

        def select(self, timeout: "Optional[float]" = None) -> "List[Tuple[Any, int]]":
            running = asyncio.events._get_running_loop()
            asyncio.events._set_running_loop(None)
            try:
                if timeout is None or timeout > 0:
                    wait_readable(self.fileno(), timeout)
                else:
                    # a busy loop still lets the thread's tasklets have a turn
                    schedule()
            except TimeoutError:
                pass
            finally:
                asyncio.events._set_running_loop(running)
            return super().select(0)

    return TaskletSelector()


def run_asyncio(coro: "Coroutine[Any, Any, T]") -> "T":
    """Runs an asyncio coroutine to completion in the calling tasklet (the main one too)
    and returns its result, as ``asyncio.run`` does, suspending only this tasklet while
    the loop waits: the thread's other tasklets run meanwhile. The loop's selector waits
    through shoal's poller; running the loop in a worker thread instead (to_thread) would
    put its coroutines on another thread than the tasklets they ``await shoal.wrap(...)``.
    Inside, ``await wrap(t)`` waits for tasklets."""
    import asyncio

    loop = asyncio.SelectorEventLoop(_tasklet_selector())
    loop._shoal_tasklets = True  # type: ignore[attr-defined]
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def wrap(x: "Any") -> "Awaitable[Any]":
    """An awaitable for a coroutine of a loop run by ``run_asyncio``: of a tasklet, its
    ``join()`` (its result, or its exception raised); of a channel, one ``receive()``.
    A helper tasklet makes the call and hands the outcome to the loop; cancelling the
    awaiting coroutine kills it (a receive cancelled takes no value)."""
    if isinstance(x, tasklet):
        call: "Callable[[], Any]" = x.join
    elif isinstance(x, channel):
        call = x.receive
    else:
        raise TypeError(f"wrap() wants a tasklet or a channel, not {type(x).__name__}")
    return _await_tasklet_call(call)


async def _await_tasklet_call(call: "Callable[[], Any]") -> "Any":
    import asyncio

    loop = asyncio.get_running_loop()
    if not getattr(loop, "_shoal_tasklets", False):
        raise RuntimeError(
            "await shoal.wrap(...) needs a loop run by shoal.run_asyncio(): this loop's "
            "waits block the thread, so its tasklets could never run"
        )
    fut: "asyncio.Future[Any]" = loop.create_future()

    def settle(ok: bool, value: "Any") -> None:
        if not fut.done():  # the await may have been cancelled meanwhile
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

    def helper() -> None:
        try:
            result = call()
        except TaskletExit:
            return
        except BaseException as e:
            # threadsafe: it wakes the loop's selector, parked in wait_readable
            loop.call_soon_threadsafe(settle, False, e)
        else:
            loop.call_soon_threadsafe(settle, True, result)

    h = tasklet(helper)()
    try:
        return await fut
    except asyncio.CancelledError:
        h.kill()
        raise
