"""Type stubs for barecuda._launch_config: LaunchConfig."""

__all__ = ["LaunchConfig"]
from typing import final
from typing import Any, Optional, Sequence, Tuple, Union

# A grid or block argument: launches and configs (_Dim3), graph nodes and the bench (_Dims).
_Dim3 = Union[int, Tuple[int], Tuple[int, int], Tuple[int, int, int]]
_Dims = Union[int, Sequence[int]]


class _Geometry:
    """A launch's geometry, as LaunchConfig, LaunchPlan, KernelNode and ExecKernelNode
    all report it (stubs only: one declaration for the four)."""
    @property
    def grid(self) -> Tuple[int, int, int]: ...
    @property
    def block(self) -> Tuple[int, int, int]: ...
    @property
    def shared_mem(self) -> int: ...


@final
class LaunchConfig(_Geometry):
    stream: Any
    cooperative: bool
    priority: Optional[int]
    programmatic_serialization: bool
    def __init__(self, grid: _Dim3, block: _Dim3, shared_mem: int = 0, stream: Any = None,
                 cluster: Optional[_Dim3] = None, cooperative: bool = False, priority: Optional[int] = None,
                 programmatic_serialization: bool = False) -> None: ...
    @property
    def cluster(self) -> Optional[Tuple[int, int, int]]: ...
