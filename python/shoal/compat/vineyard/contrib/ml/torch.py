"""vineyard.contrib.ml.torch on shoal: ``torch_context``, within which gets give torch
tensors (a state dict as a dict of them), as vineyard's torch resolvers do. Puts need
no context: shoal stores torch tensors and their dicts itself and marks them torch's,
so a get outside the context gives torch back too (``framework="auto"``)."""
from __future__ import annotations

import contextlib
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterator, Optional

_depth = threading.local()


def _active() -> bool:
    return getattr(_depth, "n", 0) > 0


@contextlib.contextmanager
def torch_context(client: Optional[Any] = None) -> Iterator[Optional[Any]]:
    """Within it (in this thread), ``client.get`` gives torch tensors."""
    _depth.n = getattr(_depth, "n", 0) + 1
    try:
        yield client
    finally:
        _depth.n -= 1


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(
        "vineyard.contrib.ml.torch.%s is not covered by shoal.compat.vineyard: torch "
        "tensors, state dicts and modules' state dicts go through Client.put and get "
        "(torch_context is covered)" % name)
