"""What crosses between processes when a call fails: an exception as an envelope
``[1, {type, message, traceback}]`` (a result is ``[0, value]``), and back into an exception
on the other side: a :class:`RemoteError`, which is also of the remote class when that is a
builtin of a fixed table or a class of a module already imported here. Shared by
shoal.isolate (extensions), shoal.tasks and its engines' side (shoal._engine); what the
other side sends is data: a class is only looked up from it, never imported, and only an
Exception class is taken."""
from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Type


class RemoteError(Exception):
    """An exception in another process (an isolated extension, a task's engine): its
    type's name, message and traceback text, as that process gave them, under shoal's
    names (``type_name``, ``message``, ``remote_traceback``) and ipyparallel's
    (``ename``: the class's own name, ``evalue``, ``traceback``, ``engine_info``).

    When the remote class is a Python builtin (or, for a task farm's client that takes
    pickles from its engines, a class of a module already imported in this process),
    what is raised is both: an instance of a class derived from this one and from that
    class, so ``except ZeroDivisionError`` and ``except RemoteError`` both catch it. A
    module is never imported for it: the other side's data names classes, and importing
    would run code of its choosing; an isolated extension, which is not trusted, is
    given builtins only (making a class derived from another runs code of that class's
    own)."""

    # no __weakref__ slot of its own: a class derived from this one and from a builtin
    # of another layout (OSError's) must still be possible
    __slots__ = ()

    def __init__(self, type_name: str, message: str, remote_traceback: str = "",
                 engine_info: Optional[Dict[str, Any]] = None) -> None:
        BaseException.__init__(self, type_name.rsplit(".", 1)[-1], message)
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback
        self.engine_info: Dict[str, Any] = engine_info or {}

    @property
    def ename(self) -> str:
        """The remote class's own name (``ZeroDivisionError``, ``Custom``)."""
        return self.type_name.rsplit(".", 1)[-1]

    @property
    def evalue(self) -> str:
        """The remote exception's ``str()``."""
        return self.message

    @property
    def traceback(self) -> str:
        """The remote traceback, as text."""
        return self.remote_traceback

    def render_traceback(self) -> List[str]:
        return (self.remote_traceback or "No traceback available").splitlines()

    def print_traceback(self) -> None:
        print("\n".join(self.render_traceback()))

    def __str__(self) -> str:
        return "%s: %s\n\nremote traceback:\n%s" % (self.type_name, self.message,
                                                     self.remote_traceback)

    def __reduce__(self) -> Any:
        # by value: a class made here for a remote one cannot be found by name elsewhere
        return (_remote_error, (self.type_name, self.message, self.remote_traceback,
                                self.engine_info))


# Exceptions raised in the host as themselves: builtins only, by name, from this table.
_BUILTIN_ERRORS: Dict[str, Type[BaseException]] = {
    c.__name__: c for c in (
        ArithmeticError, AssertionError, AttributeError, BufferError, ConnectionError,
        EOFError, FileExistsError, FileNotFoundError, FloatingPointError, ImportError,
        IndexError, InterruptedError, IsADirectoryError, KeyError, LookupError, MemoryError,
        ModuleNotFoundError, NameError, NotADirectoryError, NotImplementedError, OSError,
        OverflowError, PermissionError, RecursionError, RuntimeError, StopIteration,
        TimeoutError, TypeError, UnboundLocalError, UnicodeError, ValueError,
        ZeroDivisionError, Exception)
}


def _running_loop() -> Any:
    """The event loop running in this thread, if any (without importing asyncio: when
    nothing imported it, no loop runs)."""
    aio = sys.modules.get("asyncio")
    return aio.events._get_running_loop() if aio is not None else None


# A code object's flags: a coroutine's, an async generator's, a @types.coroutine one's.
_CO_ASYNC = 0x80 | 0x100 | 0x200


def _caller_loop() -> Any:
    """The event loop running in this thread when the code that called our caller runs
    in one of its coroutines (its frames reach a coroutine's), else None: whether a call
    should answer with an awaitable. A tasklet spawned from a coroutine shares the
    thread, and with it asyncio's running loop, but its frames start at its own function
    (a stack of its own): it is not the loop's, and awaits nothing."""
    loop = _running_loop()
    if loop is None:
        return None
    f: Any = sys._getframe(1).f_back  # our caller's caller, if any (a tasklet's function)
    while f is not None:
        if f.f_code.co_flags & _CO_ASYNC:
            return loop
        f = f.f_back
    return None


def _awaitable(r: Any) -> bool:
    return hasattr(type(r), "__await__")


def _envelope_for(e: BaseException) -> List[Any]:
    """[1, {type, message, traceback}] of an exception in this process."""
    import traceback
    t = type(e)
    if isinstance(e, RemoteError):  # raised again: the class it stands for, not ours
        name, message = e.type_name, e.message
    else:
        name = (t.__name__ if t.__module__ == "builtins"
                else "%s.%s" % (t.__module__, t.__qualname__))
        message = str(e)
    return [1, {"type": name, "message": message,
                "traceback": "".join(traceback.format_exception(t, e, e.__traceback__))}]


def _loaded_class(name: str) -> Optional[Type[BaseException]]:
    """The Exception class "module.qualname" names, when its module is imported here
    already (never imported for it)."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        obj: Any = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p, None)
        if isinstance(obj, type) and issubclass(obj, Exception):
            return obj
        return None
    return None


# The classes made for remote ones, one per class: type(e) is the same for each raise
_DUALS: Dict[type, type] = {}


def _dual_class(type_name: str, loaded: bool) -> type:
    """RemoteError, or a class derived from it and the class type_name names (a builtin
    of the table, or with loaded, a class of a module imported here)."""
    cls = _BUILTIN_ERRORS.get(type_name)
    if cls is None and loaded:
        cls = _loaded_class(type_name)
    if cls is None or issubclass(cls, RemoteError):
        return RemoteError
    d = _DUALS.get(cls)
    if d is None:
        try:
            d = type(cls.__name__, (RemoteError, cls), {
                "__slots__": (),
                "__module__": __name__,
                "__qualname__": "RemoteError[%s]" % type_name,
                "__doc__": "%s raised in another process (shoal's RemoteError too)."
                           % type_name,
                # str() is the message, as the class's own would say it
                "__str__": lambda self: self.message,
            })
            # made without the class's own __init__, whose arguments are unknown here
            # (UnicodeDecodeError wants five): an instance must come out of __new__
            _make(d, type_name)
        except Exception:  # final, a layout or metaclass conflict, a fussy __new__
            d = RemoteError
        if len(_DUALS) > 1024:
            _DUALS.clear()
        _DUALS[cls] = d
    return d


def _make(cls: type, type_name: str, message: str = "", tb: str = "",
          engine_info: Optional[Dict[str, Any]] = None) -> RemoteError:
    if cls is RemoteError:
        return RemoteError(type_name, message, tb, engine_info)
    exc: Any = cls.__new__(cls, message)
    RemoteError.__init__(exc, type_name, message, tb, engine_info)
    exc.args = (message,)  # as the class's own instance would hold it
    return exc  # type: ignore[no-any-return]


def _remote_error(type_name: str, message: str, tb: str = "",
                  engine_info: Optional[Dict[str, Any]] = None,
                  where: str = "", loaded: bool = False) -> RemoteError:
    """The exception that stands for a remote one (see RemoteError); loaded: also of a
    class of a module imported here (a trusted sender only)."""
    cls = _dual_class(type_name, loaded)
    exc = _make(cls, type_name, message, tb, engine_info)
    if cls is not RemoteError:  # str() is the message only: the traceback goes in a note
        exc.add_note("remote traceback%s:\n%s" % (" (%s)" % where if where else "",
                                                   tb.rstrip()))
    return exc


def _unwrap(env: Any, where: str, loaded: bool = False) -> Any:
    """The result of an envelope, or its exception raised. Everything in it is data the
    other side chose: checked, and only builtin exception classes are made from it
    (loaded: also classes of modules imported here, for a trusted sender)."""
    if not isinstance(env, list) or len(env) != 2 or env[0] not in (0, 1):
        raise ValueError("%s: a reply that is not [status, value]" % where)
    if env[0] == 0:
        return env[1]
    err = env[1]
    if not isinstance(err, dict) or not all(isinstance(err.get(k), str)
                                            for k in ("type", "message", "traceback")):
        raise ValueError("%s: an error reply without type, message and traceback" % where)
    raise _remote_error(err["type"], err["message"], err["traceback"], where=where,
                        loaded=loaded)
