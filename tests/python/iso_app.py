"""The application side of tests/python/test_isolate.py, imported by the host (the
test) and by every extension it starts: the extension class whose methods the host
calls, a host service, and a registered type."""
import os

import shoal.isolate as si


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


si.register_type(Point, lambda p: [p.x, p.y], lambda v: Point(*v))


class Counter(si.ProxiedSingleton):
    """A host service: it counts, and calls back into the extension it was given."""

    def __init__(self):
        self.n = 0
        self.ext = None

    def bump(self, by=1):
        self.n += by
        return self.n

    def down(self, depth):
        """host -> ext.down -> host.down -> ... until depth is 0"""
        return self.ext.down(depth - 1) + ["host%d" % depth] if depth else ["host0"]

    def boom(self):
        raise KeyError("no such key on the host")


class Node(si.ExtensionBase):
    def before_module_loaded(self):
        self.order = ["before"]

    def on_module_loaded(self, module):
        self.order.append("loaded:" + module.__name__.rsplit("_", 1)[-1])
        self.mod = module

    def echo(self, x):
        return x

    def add(self, a, b=0):
        return a + b

    def order_of_hooks(self):
        return self.order

    def pid(self):
        return os.getpid()

    def run(self, name, *args):
        """Calls the extension module's function name."""
        return getattr(self.mod, name)(*args)

    def bump_host(self, by):
        return Counter().bump(by)

    def down(self, depth):
        return Counter().down(depth - 1) + ["ext%d" % depth] if depth else ["ext0"]

    async def slow_echo(self, x):
        import asyncio
        await asyncio.sleep(0.001)
        return x

    async def await_host(self, by):
        return await Counter().bump(by)

    def host_error(self):
        return Counter().boom()


class Registry(si.ProxiedSingleton):
    """A host service an extension is granted by its config's apis (or not)."""

    def __init__(self):
        self.where = os.getpid()

    def pid(self):
        return self.where


class AsyncNode(Node):
    """pyisolate's hooks are coroutines: awaited in the extension, in order, on the loop
    its async methods run on after."""

    async def before_module_loaded(self):
        import asyncio
        await asyncio.sleep(0)
        self.order = ["before-async"]
        self.loop = asyncio.get_running_loop()

    async def on_module_loaded(self, module):
        import asyncio
        await asyncio.sleep(0)
        self.order.append("loaded-async:" + module.__name__.rsplit("_", 1)[-1])
        self.mod = module

    async def same_loop(self):
        import asyncio
        return asyncio.get_running_loop() is self.loop

    def registry_pid(self):
        return Registry().pid()
