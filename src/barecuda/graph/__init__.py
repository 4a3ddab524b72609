"""CUDA graphs (docs/graphs.md): graphs built node by node or by stream capture,
executable graphs, kernel-node handles and batched argument updates, host nodes.

One module per part, each with its own ``__all__``, assembled here (in this order):

- ``_graph``: ``Graph`` (explicit graphs, conditionals, captured graphs' nodes);
- ``_nodes``: ``GraphNode``, ``KernelNode``;
- ``_exec``: ``GraphExec`` (instantiate, launch, update);
- ``_args``: ``ExecKernelNode`` (``set_arg`` on an executable), ``ArgUpdate``;
- ``_capture``: ``capture``, ``Capture``, ``is_capturing``;
- ``_host_node``: host-node callables' stored exceptions (``check_host_errors``).

``_edges`` (no public names) holds the bodies of ``Graph.add_plan`` for plans bound
with a ``LaunchConfig`` and of ``Graph.edges``; ``_graph`` imports it on first use.

Every name is also re-exported by ``barecuda`` itself.
"""
from barecuda.graph import _args, _capture, _exec, _graph, _host_node, _nodes
from barecuda.graph._graph import *  # noqa: F401,F403
from barecuda.graph._nodes import *  # noqa: F401,F403
from barecuda.graph._exec import *  # noqa: F401,F403
from barecuda.graph._args import *  # noqa: F401,F403
from barecuda.graph._capture import *  # noqa: F401,F403
from barecuda.graph._host_node import *  # noqa: F401,F403

# Each module's __all__, in this order (a literal list, so that type checkers read it;
# tests/packaging/test_public_surface.py checks it is exactly the modules' lists).
__all__ = [
    "Graph", "ConditionalNode", "ConditionalHandle",         # _graph
    "GraphNode", "KernelNode",                               # _nodes
    "GraphExec",                                             # _exec
    "ExecKernelNode", "ArgUpdate",                           # _args
    "Capture", "capture", "is_capturing",                    # _capture
    "check_host_errors",                                     # _host_node
]
