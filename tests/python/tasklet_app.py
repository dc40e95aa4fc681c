"""The application side of tests/python/test_tasklet_hosts.py: tasklet programs that run
inside an isolated Python extension (the Hosted class's methods) and inside a Python task
engine (the module's functions, by reference). The test copies this file to a directory
every uid reads (a strict extension runs as a uid of its own) and imports it from there,
so that the host, its extensions and its engines import the same file."""
import asyncio
import os

import shoal.isolate as si
from shoal import tasklets as T


def hackysack(n, turns):
    """Stackless's hackysack, without its randomness: n players in a ring of channels
    kick a counter along until `turns` kicks were made; (kicks, players that kicked)."""
    chans = [T.channel() for _ in range(n)]
    done = T.channel()
    kicked = set()

    def player(i):
        for left in chans[i]:  # until main closes the channel
            kicked.add(i)
            if left == 0:
                done.send(turns)
            else:
                chans[(i + 1) % n].send(left - 1)

    ts = [T.tasklet(player)(i) for i in range(n)]
    T.tasklet(chans[0].send)(turns)
    kicks = done.receive()
    for c in chans:
        c.close()
    for t in ts:
        t.join(timeout=10)
    return [kicks, len(kicked)]


def ping_pong(hops):
    """Two tasklets pass a counter back and forth over two channels; the hops made."""
    ping, pong = T.channel(), T.channel()

    def side(rx, tx):
        for v in rx:
            if v >= hops:
                rx.close()
                tx.close()
                return v
            tx.send(v + 1)
        return None

    a = T.tasklet(side)(ping, pong)
    b = T.tasklet(side)(pong, ping)
    ping.send(0)
    return max(x for x in (a.join(timeout=10), b.join(timeout=10)) if x is not None)


def sleepers(delays):
    """One tasklet a delay, each sleeping it and noting when it woke: the wake order
    (the shortest first: delays far enough apart that a loaded machine's late start of
    one tasklet does not reorder them), and the results joined in start order."""
    woke = []

    def nap(i, s):
        T.sleep(s)
        woke.append(i)
        return i * 10

    ts = [T.tasklet(nap)(i, s) for i, s in enumerate(delays)]
    results = [t.join(timeout=10) for t in ts]
    return [list(woke), results]


def raise_in_tasklet(msg):
    """A tasklet raises; joining it raises that exception here, which goes back to the
    caller as the call's (or the task's) error."""
    def bad():
        T.sleep(0.001)
        raise ValueError(msg)

    t = T.tasklet(bad)()
    return t.join(timeout=10)


def leave_blocked(seconds):
    """A tasklet that waits for ever on a channel nobody sends on: run(timeout=) raises
    TimeoutError, which this reports; the tasklet is then killed, so that the next call
    starts with none left (leave_blocked_kept leaves it)."""
    ch = T.channel()
    t = T.tasklet(ch.receive)()
    try:
        T.run(timeout=seconds)
    except TimeoutError as e:
        msg = str(e)
    else:
        msg = "run() returned"
    t.kill()
    T.run(timeout=10)
    return [msg, t.alive]


_KEPT = []


def leave_blocked_kept(seconds):
    """As leave_blocked, but the blocked tasklet stays blocked after the call returns."""
    ch = T.channel()
    _KEPT.append(ch)
    T.tasklet(ch.receive)()
    try:
        T.run(timeout=seconds)
    except TimeoutError as e:
        return str(e)
    return "run() returned"


_RAN = []


def leave_runnable(k):
    """Spawns k tasklets and returns without letting them run."""
    for i in range(k):
        T.tasklet(_RAN.append)(i)
    from shoal import _shoal
    return len(_shoal._tasklets_alive())


def what_ran_since():
    """What the tasklets of earlier tasks ran by now, once this task blocked a while."""
    T.sleep(0.01)
    T.run(timeout=10)
    return list(_RAN)


def leave_a_stubborn_tasklet():
    """A tasklet that catches TaskletExit and waits again, for ever: it never ends."""
    def stubborn():
        while True:
            try:
                T.channel().receive()
            except T.TaskletExit:
                pass

    T.tasklet(stubborn)()
    T.schedule()
    return "returned"


def store_gets(client, ids):
    """One tasklet a get of ids (hex: an id may not fit a signed 64-bit int, which a call
    value is) through client (a shoal store client): the bytes got, in order, and whether
    a ticking tasklet ran while they waited."""
    got = {}
    ticks = []
    stop = []

    def getter(i, oid):
        got[i] = bytes(client.get(int(oid, 16)))

    def ticker():
        while not stop:
            ticks.append(1)
            T.schedule()

    ts = [T.tasklet(getter)(i, oid) for i, oid in enumerate(ids)]
    T.tasklet(ticker)()
    for t in ts:
        t.join(timeout=30)
    stop.append(1)
    T.run(timeout=10)
    return [[got[i] for i in range(len(ids))], len(ticks) > 0]


def tasklets_in_a_task(n):
    """What a task runs: hackysack, a ping-pong and sleepers, their results together."""
    return [hackysack(n, 10 * n), ping_pong(1000), sleepers([0.1, 0.05, 0.0])]


def engine_store_gets(ids):
    """store_gets through the engine's own store client (its --store)."""
    from shoal import _values
    c = _values._CHILD_CLIENT
    if c is None:
        raise RuntimeError("this engine has no store client")
    return store_gets(c, ids)


def thread_state():
    """(pid, id of this thread's main tasklet): the same across calls when the state is
    reused."""
    return [os.getpid(), id(T.getcurrent())]


class Tally(si.ProxiedSingleton):
    """A host service the extension's tasklets call."""

    def __init__(self):
        self.n = 0

    def add(self, k):
        self.n += k
        return self.n

    def die_there(self):
        """Calls back into the extension, which exits in that nested call."""
        return self.ext.die()

    def nap_there(self, s):
        """Calls back into the extension (self.ext, set by the test): a nested call."""
        return self.ext.nap(s)


class Hosted(si.ExtensionBase):
    """An extension whose methods run tasklets inside its process."""

    def on_module_loaded(self, module):
        self.mod = module

    def hackysack(self, n, turns):
        return hackysack(n, turns)

    def ping_pong(self, hops):
        return ping_pong(hops)

    def sleepers(self, delays):
        return sleepers(delays)

    def raise_in_tasklet(self, msg):
        return raise_in_tasklet(msg)

    def leave_blocked(self, seconds):
        return leave_blocked(seconds)

    def exit_in_a_tasklet(self, code):
        return exit_in_a_tasklet(code)

    def thread_state(self):
        return thread_state()

    def nap(self, s):
        """A tasklet's sleep inside a call the host made while a tasklet of this process
        waited for a host service: the other tasklets may run meanwhile."""
        T.sleep(s)
        return s

    def die(self):
        os._exit(3)

    def die_in_a_nested_call(self):
        """Calls the host's Tally.die_there, which calls die here: the process exits in
        the nested call, while the host serves the service."""
        return Tally().die_there()

    def leave_a_host_caller(self, s):
        """Spawns a tasklet that will call the host's Tally.nap_there(s) (nested: the host
        calls nap here) and returns at once: it runs when a later call blocks."""
        self.left = T.tasklet(Tally().nap_there)(s)
        return "left"

    def block_then_return(self, s):
        """Sleeps s (the tasklet left by the last call runs, and parks inside its nested
        call), then returns, which waits for that tasklet's host call to end."""
        T.sleep(s)
        return [self.left.alive, "returned"]

    def joined_left(self):
        return self.left.join(timeout=30)

    def nested_from_tasklets(self, n):
        """n tasklets each call the host's Tally.nap_there, which calls nap here (a call
        nested in theirs): what they got back."""
        ts = [T.tasklet(Tally().nap_there)(0.01 * (i + 1)) for i in range(n)]
        return [t.join(timeout=30) for t in ts]

    def host_service_from_tasklets(self, n):
        """n tasklets each call the host's Tally.add between sleeps: what they got back."""
        def one(i):
            T.sleep(0.001 * (i % 3))
            return Tally().add(1)

        ts = [T.tasklet(one)(i) for i in range(n)]
        return sorted(t.join(timeout=30) for t in ts)

    def store_gets(self, ids):
        """Through the extension's store client (share_torch gives it one)."""
        from shoal import _values
        c = _values._CHILD_CLIENT
        if c is None:
            raise RuntimeError("this extension has no store client")
        return store_gets(c, ids)

    def store_gets_at(self, sock, ids):
        """Through a connection of its own to the store at sock."""
        import shoal
        return store_gets(shoal.connect(sock), ids)

    async def async_with_tasklets(self, n):
        """An async method (pyisolate's shape: on the extension's loop) that runs tasklets
        between its awaits: (hackysack, the loop is the one of the last call)."""
        await asyncio.sleep(0.001)
        r = hackysack(n, 5 * n)
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        same = getattr(self, "loop", None) in (None, loop)
        self.loop = loop
        return [r, same]

    async def async_host_service_from_tasklets(self, n):
        """As host_service_from_tasklets, from an async method: the tasklets' plain calls
        of the host service return its value (not an awaitable: they are not coroutines
        of the loop), and the coroutine's own call is awaitable as ever."""
        await asyncio.sleep(0)
        got = self.host_service_from_tasklets(n)
        mine = await Tally().add(0)
        return [got, mine]

    def tasklets_around_the_loop(self, n):
        """A plain method whose tasklets run asyncio programs of their own
        (asyncio.run in each), one after another."""
        async def work(i):
            await asyncio.sleep(0.001)
            return i * i

        out = []
        ts = [T.tasklet(lambda i=i: out.append(asyncio.run(work(i))))() for i in range(n)]
        for t in ts:
            t.join(timeout=10)
        return sorted(out)


class AsyncHooked(Hosted):
    """pyisolate's hooks are coroutines, run on the extension's loop: these run tasklets
    too, before and after the module's import."""

    async def before_module_loaded(self):
        await asyncio.sleep(0)
        self.at_start = [ping_pong(100)]

    async def on_module_loaded(self, module):
        await asyncio.sleep(0.001)
        self.mod = module
        self.at_start.append(hackysack(50, 500))
        self.loop = asyncio.get_running_loop()

    def what_the_hooks_got(self):
        return self.at_start


def exit_in_a_tasklet(code):
    """A tasklet calls sys.exit(code) and nobody joins it: the SystemExit is raised in the
    main tasklet at its next switch point (never swallowed), which fails the task."""
    import sys
    T.tasklet(sys.exit)(code)
    T.sleep(0.01)
    return "not reached"
