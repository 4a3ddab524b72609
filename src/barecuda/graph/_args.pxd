"""CUDA graphs: kernel-node handles and batched argument updates of an executable."""
from barecuda._abi cimport CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2
from barecuda._launch cimport Kernel
from barecuda._pack cimport bc_param
from barecuda.graph._nodes cimport KernelNode
from barecuda.graph._exec cimport GraphExec
from cpython.ref cimport PyObject


cdef class _KernelParams:
    cdef Kernel kernel
    cdef const bc_param *params     # kernel.params, kernel.nparams: the hot path reads them here
    cdef Py_ssize_t nparams         # ... without a hop through the Kernel
    cdef size_t seen                # _launch.kernels_closed() when kernel.func was last found set
    cdef CUgraphNode node           # the node in the graph the executable was made from
    cdef char *buf                  # the parameter block pushed to the executable
    cdef void **ptrs                # kernelParams: one pointer per slot into buf
    cdef CUDA_KERNEL_NODE_PARAMS_v2 p
    cdef list vals                  # the value packed in each slot (held: the executable may run it)
    cdef char *pinned               # per slot: vals[i] is a DeviceBuffer this object pinned (set_arg)

    cdef int load(self, KernelNode src, CUgraphNode node) except -1
    cdef void _unpin_all(self) noexcept


cdef class ExecKernelNode:
    cdef readonly GraphExec exec
    """The executable whose node this handle changes."""
    cdef readonly KernelNode node
    """The graph's KernelNode this handle is for."""
    cdef _KernelParams st           # shared with the other handles on this node of this executable
    cdef object __weakref__

    cdef object _set_arg_slow(self, Py_ssize_t index, object value)


ctypedef struct _arg_slot:
    PyObject *st                    # the node's _KernelParams (held by ArgUpdate._nodes)
    Py_ssize_t index                # the parameter index
    Py_ssize_t node                 # position of the node in ArgUpdate._nodes
    unsigned long long saved        # the bytes the slot held before set() (1, 2, 4 or 8-byte slots)


cdef class ArgUpdate:
    cdef readonly GraphExec exec
    """The executable whose nodes the update changes."""
    cdef tuple _handles             # ExecKernelNode per slot
    cdef tuple _nodes               # _KernelParams per touched node, in order of first use
    cdef Py_ssize_t n               # slots
    cdef _arg_slot *slots
    cdef list _saved_big            # per slot: the bytes it held when it is not a 1/2/4/8-byte slot
    cdef bint _any_big              # _saved_big holds something

    cdef int _pack_slow(self, Py_ssize_t i, _KernelParams st, Py_ssize_t index, object value) except -1
    cdef int _restore(self, Py_ssize_t upto, Py_ssize_t first_node) except -1
    cdef int _commit(self, tuple values, Py_ssize_t nodes_done) except -1
    cdef Py_ssize_t _node_index(self, Py_ssize_t j)


# The token the handle and update constructors take (they come from GraphExec only).
cdef object handle_token()
