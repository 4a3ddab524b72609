"""CUDA graphs (docs/graphs.md): graphs built node by node or by stream capture,
executable graphs, kernel-node handles and batched argument updates, host nodes.

One module per part, each with its own ``__all__``, assembled here:

- ``_graph``: ``Graph`` (explicit graphs, conditionals, captured graphs' nodes);
- ``_nodes``: ``GraphNode``, ``KernelNode``;
- ``_exec``: ``GraphExec`` (instantiate, launch, update);
- ``_args``: ``ExecKernelNode`` (``set_arg`` on an executable), ``ArgUpdate``;
- ``_capture``: ``capture``, ``Capture``, ``is_capturing``;
- ``_host_node``: host-node callables' stored exceptions (``check_host_errors``).

Every name is also re-exported by ``barecuda`` itself.
"""
from barecuda.graph import _args, _capture, _exec, _graph, _host_node, _nodes
from barecuda.graph._graph import *  # noqa: F401,F403
from barecuda.graph._nodes import *  # noqa: F401,F403
from barecuda.graph._exec import *  # noqa: F401,F403
from barecuda.graph._args import *  # noqa: F401,F403
from barecuda.graph._capture import *  # noqa: F401,F403
from barecuda.graph._host_node import *  # noqa: F401,F403

__all__ = []
__all__ += _graph.__all__
__all__ += _nodes.__all__
__all__ += _exec.__all__
__all__ += _args.__all__
__all__ += _capture.__all__
__all__ += _host_node.__all__
