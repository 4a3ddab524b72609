"""Type stubs for barecuda._launch_config: LaunchConfig."""

__all__ = ["LaunchConfig"]
from typing import final
from typing import Any, Optional, Tuple, Union

_Dim3 = Union[int, Tuple[int], Tuple[int, int], Tuple[int, int, int]]


@final
class LaunchConfig:
    stream: Any
    cooperative: bool
    priority: Optional[int]
    programmatic_serialization: bool
    def __init__(self, grid: _Dim3, block: _Dim3, shared_mem: int = 0, stream: Any = None,
                 cluster: Optional[_Dim3] = None, cooperative: bool = False, priority: Optional[int] = None,
                 programmatic_serialization: bool = False) -> None: ...
    @property
    def grid(self) -> Tuple[int, int, int]: ...
    @property
    def block(self) -> Tuple[int, int, int]: ...
    @property
    def shared_mem(self) -> int: ...
    @property
    def cluster(self) -> Optional[Tuple[int, int, int]]: ...
