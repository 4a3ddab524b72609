from typing import final
from typing import Any, Optional, Sequence, Tuple, Union

from barecuda._launch import Kernel
from barecuda.graph._exec import GraphExec
from barecuda.graph._nodes import KernelNode
from barecuda._launch_config import _Dims, _Geometry

__all__ = ["ExecKernelNode", "ArgUpdate"]

@final
class ExecKernelNode(_Geometry):
    exec: GraphExec
    node: KernelNode
    kernel: Kernel
    @property
    def args(self) -> Tuple[Any, ...]: ...
    def set_arg(self, index: int, value: Any, /) -> None: ...
    def set_args(self, *args: Any) -> None: ...
    def set_dims(self, grid: Optional[_Dims] = ..., block: Optional[_Dims] = ...,
                 shared_mem: Optional[int] = ...) -> None: ...

@final
class ArgUpdate:
    exec: GraphExec
    def __len__(self) -> int: ...
    @property
    def slots(self) -> Tuple[Tuple[ExecKernelNode, int], ...]: ...
    def set(self, *values: Any) -> None: ...
