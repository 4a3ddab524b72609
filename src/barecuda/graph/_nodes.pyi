from typing import final
from typing import Any, Optional, Tuple

from barecuda._launch import Kernel
from barecuda.graph._graph import Graph

__all__ = ["GraphNode", "KernelNode"]

class GraphNode:
    graph: "Graph"
    kind: str
    index: int
    @property
    def handle_int(self) -> int: ...

@final
class KernelNode(GraphNode):
    kernel: Kernel
    @property
    def grid(self) -> Tuple[int, int, int]: ...
    @property
    def block(self) -> Tuple[int, int, int]: ...
    @property
    def shared_mem(self) -> int: ...
    @property
    def args(self) -> Tuple[Any, ...]: ...
    @property
    def priority(self) -> int: ...
    @priority.setter
    def priority(self, value: int) -> None: ...
    def set_arg(self, index: int, value: Any) -> None: ...
