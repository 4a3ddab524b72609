from typing import final
from typing import Any, Optional, Tuple

from barecuda._launch import Kernel
from barecuda._launch_config import _Geometry
from barecuda.graph._graph import Graph

__all__ = ["GraphNode", "KernelNode"]

class GraphNode:
    graph: "Graph"
    kind: str
    index: int
    @property
    def handle_int(self) -> int: ...

@final
class KernelNode(GraphNode, _Geometry):
    kernel: Kernel
    @property
    def args(self) -> Tuple[Any, ...]: ...
    def get_priority(self) -> int: ...
    def set_priority(self, value: int) -> None: ...
    @property
    def priority(self) -> int: ...
    @priority.setter
    def priority(self, value: int) -> None: ...
    def set_arg(self, index: int, value: Any) -> None: ...
