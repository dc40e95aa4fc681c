"""Functions of tests/python/test_tasks.py that engines import by reference (the test puts
this directory on their PYTHONPATH)."""
import os
import signal
import time


class Custom(Exception):
    pass


class Box:
    """Not a registered type: crosses by pickle."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Box) and other.v == self.v


def add(a, b=0):
    return a + b


def scale(x, k):
    return x * k


def pid():
    return os.getpid()


def nap(seconds):
    time.sleep(seconds)
    return seconds


def custom():
    raise Custom("made on the engine")


def stamp(tag):
    return (tag, time.monotonic(), os.getpid())


def die_once(marker):
    """Kills its engine the first time (marker absent), returns the second."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


def unbox(b):
    return Box(b.v + 1)


def view_info(x):
    """Whether x arrived as a read-only view (from the store) or a copy, and its sum."""
    import numpy as np
    a = np.asarray(x)
    return (bool(a.flags.writeable), float(a.sum()))


class Trap:
    """A value whose unpickling opens (creates) the file it names: what a rogue engine with
    the cluster's secret could send a client in a result."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def trap(path):
    return Trap(path)


def tagged(x):
    """x with the pid of the engine that saw it (which engine ran which part of a map)."""
    return (os.getpid(), x)


def read_global(name):
    """A module's function sees its module's globals, not an engine's namespace."""
    return globals().get(name, "not in task_app")


KEPT = []


def add_one_in_place(t):
    """Writes into a torch tensor argument (copy-on-write when it maps the store) and
    keeps it alive, so that a later call of the same object could meet the write."""
    t.add_(1)
    KEPT.append(t)
    return float(t.sum())


def total(t):
    return float(t.sum())
