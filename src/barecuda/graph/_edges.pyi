from typing import Any

from barecuda._launch_config import LaunchConfig
from barecuda.graph._graph import Graph
from barecuda.graph._nodes import GraphNode, KernelNode

__all__: list[str] = []

def add_configured(g: Graph, plan: Any, cfg: LaunchConfig, depends_on: Any, priority: int | None) -> KernelNode: ...
def edges(g: Graph) -> list[tuple[GraphNode, GraphNode, str]]: ...
