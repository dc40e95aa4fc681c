"""ipyparallel.error's names on shoal's exceptions, so that ``from ipyparallel.error import
RemoteError`` keeps working with the import changed: a remote exception is a
:class:`RemoteError` (also of its own class, see shoal.compat.ipyparallel), several of one
DirectView call a :class:`CompositeError`, an engine that died an :class:`EngineError`, a
task past its deadline a :class:`TaskTimeout`, a failed dependency a
:class:`DependencyError` (ipyparallel's ``UnmetDependency`` family: one class here)."""
import builtins

from ...tasks import CompositeError, DependencyError, EngineError, RemoteError, TaskTimeout

__all__ = ["CompositeError", "DependencyError", "EngineError", "RemoteError", "TaskTimeout",
           "TimeoutError", "UnmetDependency"]

TimeoutError = builtins.TimeoutError  # AsyncResult.get(timeout)'s, as ipyparallel's
UnmetDependency = DependencyError
