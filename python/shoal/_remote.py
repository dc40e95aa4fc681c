"""What crosses between processes when a call fails: an exception as an envelope
``[1, {type, message, traceback}]`` (a result is ``[0, value]``), and back into an exception
on the other side: the same builtin class when it is one, else :class:`RemoteError`. Shared
by shoal.isolate (extensions), shoal.tasks and its engines' side (shoal._engine); what the
other side sends is data, and no class is ever looked up from it but the builtins of a
fixed table."""
from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Type


class RemoteError(Exception):
    """An exception in another process (an isolated extension, a task's engine) whose
    type is not a Python builtin: its type's name, message and traceback text, as that
    process gave them (never its class)."""

    def __init__(self, type_name: str, message: str, remote_traceback: str = "") -> None:
        super().__init__("%s: %s" % (type_name, message))
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        return "%s: %s\n\nremote traceback:\n%s" % (self.type_name, self.message,
                                                     self.remote_traceback)


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


def _awaitable(r: Any) -> bool:
    return hasattr(type(r), "__await__")


def _envelope_for(e: BaseException) -> List[Any]:
    """[1, {type, message, traceback}] of an exception in this process."""
    import traceback
    t = type(e)
    name = t.__name__ if t.__module__ == "builtins" else "%s.%s" % (t.__module__, t.__qualname__)
    return [1, {"type": name, "message": str(e),
                "traceback": "".join(traceback.format_exception(t, e, e.__traceback__))}]


def _unwrap(env: Any, where: str) -> Any:
    """The result of an envelope, or its exception raised. Everything in it is data the
    other side chose: checked, and only builtin exception classes are made from it."""
    if not isinstance(env, list) or len(env) != 2 or env[0] not in (0, 1):
        raise ValueError("%s: a reply that is not [status, value]" % where)
    if env[0] == 0:
        return env[1]
    err = env[1]
    if not isinstance(err, dict) or not all(isinstance(err.get(k), str)
                                            for k in ("type", "message", "traceback")):
        raise ValueError("%s: an error reply without type, message and traceback" % where)
    cls = _BUILTIN_ERRORS.get(err["type"])
    if cls is None:
        raise RemoteError(err["type"], err["message"], err["traceback"])
    exc = cls(err["message"])
    exc.remote_traceback = err["traceback"]  # type: ignore[attr-defined]
    exc.add_note("remote traceback (%s):\n%s" % (where, err["traceback"].rstrip()))
    raise exc
