"""CUDA graphs: executable graphs (kernel-node handles and argument updates: _args.pxd)."""
from barecuda._abi cimport CUgraphExec, CUgraphNode, CUcontext, CUstream, CUDA_KERNEL_NODE_PARAMS_v2
from barecuda._device cimport Device
from barecuda._launch cimport Kernel
from barecuda.graph._graph cimport Graph


cdef class GraphExec:
    cdef CUgraphExec handle
    cdef readonly Graph graph
    """The Graph this executable was instantiated from (or last updated from)."""
    cdef readonly Device device
    """The Device the executable runs on."""
    cdef CUcontext ctx
    cdef CUstream last              # stream of the latest launch
    cdef object _last_stream        # ... and its object, kept alive while launches may run on it
    cdef bint launched
    cdef bint multi                 # launched on more than one stream
    cdef list _graphs               # the graph it came from and the latest update's
    cdef tuple _refs                # what the graph it runs referenced (Graph._refs: a shared snapshot)
    cdef tuple _bufs                # the DeviceBuffers among _refs (marked used when they go)
    cdef Graph _source              # the graph whose parameters it runs (its own, or the latest update's)
    cdef readonly unsigned long long flags
    """The ``CUgraphInstantiate_flags`` it was instantiated with (from ``instantiate``'s keywords)."""
    cdef dict _params               # node index -> _KernelParams of the nodes that have handles
    cdef tuple _kernels             # the Kernels it runs (launch refuses when one's module was closed)
    cdef size_t _kernels_seen       # _launch.kernels_closed() when _kernels were last found alive
    cdef bint _kernels_ok           # ... (False: check at the next launch)

    cdef int _live(self) except -1
    cdef void _mark_used(self) noexcept
    cdef void _mark_params(self) noexcept
    cdef int _hold_refs(self, Graph graph) except -1
    cdef int _check_kernels(self) except -1
    cdef int _refresh_params(self, Graph graph) except -1
