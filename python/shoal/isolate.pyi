"""Type stubs of shoal.isolate: isolate.py imports no typing at run time (an extension's
process imports it at its start), so its generic manager is typed here."""
from typing import Any, Callable, Dict, Generic, List, Optional, Type, TypeVar, Union

T = TypeVar("T")

class RemoteError(Exception):
    type_name: str
    message: str
    remote_traceback: str
    engine_info: Dict[str, Any]
    def __init__(self, type_name: str, message: str, remote_traceback: str = ...,
                 engine_info: Optional[Dict[str, Any]] = ...) -> None: ...
    @property
    def ename(self) -> str: ...
    @property
    def evalue(self) -> str: ...
    @property
    def traceback(self) -> str: ...
    def render_traceback(self) -> List[str]: ...
    def print_traceback(self) -> None: ...

class ExtensionCrashed(RuntimeError): ...
class ExtensionLoadError(ImportError): ...

def register_type(cls: type, to_value: Callable[[Any], Any], from_value: Callable[[Any], Any],
                  name: Optional[str] = ...) -> None: ...

class ExtensionBase:
    # plain or ``async def`` (awaited in the extension): None or an awaitable of None
    def before_module_loaded(self) -> Any: ...
    def on_module_loaded(self, module: Any) -> Any: ...

class ProxiedSingleton: ...

F = TypeVar("F", bound=Callable[..., Any])

def local_execution(func: F) -> F: ...

class ExtensionManagerConfig:
    venv_root_path: Optional[str]
    def __init__(self, venv_root_path: Optional[str] = ...) -> None: ...

class ExtensionConfig:
    name: str
    module_path: str
    python: Optional[str]
    sys_path: List[str]
    env: Dict[str, str]
    cwd: Optional[str]
    dependencies: List[str]
    isolated: bool
    apis: Optional[List[Type[ProxiedSingleton]]]
    share_torch: bool
    sandbox: str
    allow_network: bool
    mem_max: Optional[int]
    cpu_limit: Optional[int]
    max_files: Optional[int]
    call_timeout: Optional[float]
    start_timeout: Optional[float]
    restart: str
    log_output: bool
    def __init__(self, name: str, module_path: str, python: Optional[str] = ...,
                 sys_path: Optional[List[str]] = ..., env: Optional[Dict[str, str]] = ...,
                 cwd: Optional[str] = ..., dependencies: Optional[List[str]] = ...,
                 share_torch: bool = ..., sandbox: str = ..., allow_network: bool = ...,
                 mem_max: Optional[int] = ..., cpu_limit: Optional[int] = ...,
                 max_files: Optional[int] = ..., call_timeout: Optional[float] = ...,
                 start_timeout: Optional[float] = ..., restart: str = ...,
                 log_output: bool = ..., isolated: bool = ...,
                 apis: Optional[List[Type[ProxiedSingleton]]] = ...) -> None: ...

class ExtensionManager(Generic[T]):
    base: Type[T]
    config: ExtensionManagerConfig
    venv_root_path: Optional[str]
    def __init__(self, base: Type[T],
                 config: Union[ExtensionManagerConfig, Dict[str, Any], None] = ..., *,
                 store: Any = ...) -> None: ...
    def store_socket(self) -> str: ...
    @property
    def client(self) -> Any: ...
    def load_extension(self, config: ExtensionConfig) -> T: ...
    def get_extension(self, name: str) -> T: ...
    def stop_extension(self, name: str) -> None: ...
    def stop_all_extensions(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "ExtensionManager[T]": ...
    def __exit__(self, *exc: Any) -> None: ...
