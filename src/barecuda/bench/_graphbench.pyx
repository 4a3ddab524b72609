"""Raw C baselines of the graph rows (graph_rows.py; the loops: include/barecuda/bc_bench_graph.h).

Owns: ``RawChain``, a chain of kernel nodes built, instantiated and driven with the
driver's entry points straight from C (no barecuda objects in the loops), the
reference every graph row of ``barecuda.bench`` is a ratio to.
"""
cimport cython
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memset
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from barecuda._abi cimport *
from barecuda._errors cimport check
from barecuda._loader cimport driver_table

cdef extern from "barecuda/bc_bench_graph.h" nogil:
    ctypedef struct bc_gb_kernel:
        CUfunction f
        unsigned int grid
        unsigned int block
        void **params
    void bc_gb_node_params(const bc_gb_kernel *k, CUDA_KERNEL_NODE_PARAMS_v2 *p)
    int64_t bc_gb_now_ns()
    CUresult bc_gb_chain(const bc_driver_t *D, const bc_gb_kernel *k, long n, CUgraph *g, CUgraphNode *nodes)
    CUresult bc_gb_replay(const bc_driver_t *D, CUgraphExec x, CUstream s, long reps, int64_t *out)
    CUresult bc_gb_issue(const bc_driver_t *D, CUgraphExec x, CUstream s, long n, int64_t *out)
    CUresult bc_gb_setparams(const bc_driver_t *D, CUgraphExec x, CUgraphNode node, const bc_gb_kernel *k,
                             unsigned int *slot, long n, int64_t *out)
    CUresult bc_gb_set_steps(const bc_driver_t *D, CUgraphExec x, const CUgraphNode *nodes, int nnodes,
                             const bc_gb_kernel *k, unsigned int *slot, int launch, CUstream s, long steps,
                             int64_t *out)
    CUresult bc_gb_update(const bc_driver_t *D, CUgraphExec x, CUgraph g, long n, int64_t *out)
    CUresult bc_gb_capture(const bc_driver_t *D, const bc_gb_kernel *k, CUstream s, long launches, long n,
                           int64_t *out)
    CUresult bc_gb_instantiate(const bc_driver_t *D, CUgraph g, long n, int64_t *out)
    CUresult bc_gb_loop(const bc_driver_t *D, CUgraphExec x, const CUgraphNode *nodes, const bc_gb_kernel *k,
                        unsigned int *slot, CUstream s, long steps, int64_t *out)
    CUresult bc_gb_eager_loop(const bc_driver_t *D, const bc_gb_kernel *k, unsigned int *slot, CUstream s,
                              long nodes, long steps, int64_t *out)

cdef bc_driver_t *D = driver_table()

# RawChain's timed loops (RawChain._time), and the calls each one's failure names.
cdef enum:
    _REPLAY, _ISSUE, _SETPARAMS, _SET_EACH, _UPDATE, _CAPTURE, _INSTANTIATE, _LOOP, _EAGER
cdef const char *_CALLS[9]
_CALLS[:] = [b"cuGraphLaunch", b"cuGraphLaunch", b"cuGraphExecKernelNodeSetParams",
             b"cuGraphExecKernelNodeSetParams", b"cuGraphExecUpdate",
             b"cuStreamBeginCapture/cuLaunchKernel/cuStreamEndCapture", b"cuGraphInstantiateWithFlags",
             b"cuGraphExecKernelNodeSetParams/cuGraphLaunch", b"cuLaunchKernel"]


def now_ns():
    """bc_now_ns() (barecuda/bc_clock.h): the clock of every benchmark row."""
    return bc_gb_now_ns()


cdef class RawChain:
    """``nodes`` kernel nodes in a chain, each launching ``func`` (a ``CUfunction`` as
    an int) on (grid, block) with the parameter block of ``vadd(out, a, b, n)``:
    three device pointers and a u32. The u32 (``n``) is the slot the set-params and
    loop rows change. Needs the function's context current."""
    cdef bc_gb_kernel k
    cdef CUDA_KERNEL_NODE_PARAMS_v2 p
    cdef char buf[32]
    cdef void *ptrs[4]
    cdef CUgraph g
    cdef CUgraphExec x
    cdef CUgraphNode *nodes
    cdef readonly long n

    def __cinit__(self, size_t func, unsigned long long out, unsigned long long a, unsigned long long b,
                  unsigned int n, long nodes, unsigned int grid=1, unsigned int block=32):
        self.g = NULL
        self.x = NULL
        self.nodes = <CUgraphNode *>PyMem_Malloc(max(nodes, 1) * sizeof(CUgraphNode))
        if self.nodes == NULL:
            raise MemoryError()
        memset(self.buf, 0, 32)
        memcpy(self.buf, &out, 8)
        memcpy(self.buf + 8, &a, 8)
        memcpy(self.buf + 16, &b, 8)
        memcpy(self.buf + 24, &n, 4)
        cdef int i
        for i in range(4):
            self.ptrs[i] = <void *>(self.buf + 8 * i)
        self.k.f = <CUfunction>func
        self.k.grid = grid
        self.k.block = block
        self.k.params = self.ptrs
        bc_gb_node_params(&self.k, &self.p)
        self.n = nodes
        check(bc_gb_chain(D, &self.k, nodes, &self.g, self.nodes), b"cuGraphAddKernelNode")
        check(D.cuGraphInstantiateWithFlags(&self.x, self.g, 0), b"cuGraphInstantiateWithFlags")

    def __dealloc__(self):
        if self.x != NULL:
            D.cuGraphExecDestroy(self.x)
        if self.g != NULL:
            D.cuGraphDestroy(self.g)
        PyMem_Free(self.nodes)

    def replay(self, size_t stream, long reps):
        """ns for ``reps`` launches and the sync after them."""
        return self._time(_REPLAY, stream, reps, 0)

    def issue(self, size_t stream, long n):
        """ns for ``n`` cuGraphLaunch calls (the sync after them is not timed)."""
        return self._time(_ISSUE, stream, n, 0)

    def setparams(self, long n):
        """ns for ``n`` cuGraphExecKernelNodeSetParams on node 0."""
        return self._time(_SETPARAMS, 0, n, 0)

    def setparams_each(self, int nodes, long rounds):
        """ns for ``rounds`` rounds of one cuGraphExecKernelNodeSetParams on each of nodes
        0..nodes-1 in turn (the raw shape of a batch that changes one argument per node)."""
        if not 1 <= nodes <= self.n:
            raise ValueError(f"nodes must be in [1, {self.n}], got {nodes}")
        return self._time(_SET_EACH, 0, rounds, nodes)

    def update(self, long n):
        """ns for ``n`` cuGraphExecUpdate from the chain's own graph."""
        return self._time(_UPDATE, 0, n, 0)

    def capture(self, size_t stream, long launches, long n):
        """ns for ``n`` captures of ``launches`` launches (begin, launches, end, destroy)."""
        return self._time(_CAPTURE, stream, n, launches)

    def instantiate(self, long n):
        """ns for ``n`` instantiations (with their destruction) of the chain's graph."""
        return self._time(_INSTANTIATE, 0, n, 0)

    def loop(self, size_t stream, long steps):
        """ns for ``steps`` inference-loop steps: 3 set-params + 1 launch each, one sync."""
        if self.n < 3:
            raise ValueError("the loop row needs at least 3 nodes")
        return self._time(_LOOP, stream, steps, 0)

    def eager_loop(self, size_t stream, long steps):
        """ns for ``steps`` steps of ``nodes`` eager cuLaunchKernel calls, one sync."""
        return self._time(_EAGER, stream, steps, 0)

    cdef int64_t _time(self, int row, size_t stream, long n, long arg) except? -1:
        """The ns one raw loop of `row` reports (its bc_gb_* function; `n` its count,
        `arg` its second count), after checking its CUresult (named by _CALLS[row])."""
        cdef int64_t t = 0
        cdef CUresult rc
        cdef CUstream s = <CUstream>stream
        cdef unsigned int *slot = <unsigned int *>(self.buf + 24)
        with nogil:
            if row == _REPLAY:
                rc = bc_gb_replay(D, self.x, s, n, &t)
            elif row == _ISSUE:
                rc = bc_gb_issue(D, self.x, s, n, &t)
            elif row == _SETPARAMS:
                rc = bc_gb_setparams(D, self.x, self.nodes[0], &self.k, slot, n, &t)
            elif row == _SET_EACH:
                rc = bc_gb_set_steps(D, self.x, self.nodes, <int>arg, &self.k, slot, 0, NULL, n, &t)
            elif row == _UPDATE:
                rc = bc_gb_update(D, self.x, self.g, n, &t)
            elif row == _CAPTURE:
                rc = bc_gb_capture(D, &self.k, s, arg, n, &t)
            elif row == _INSTANTIATE:
                rc = bc_gb_instantiate(D, self.g, n, &t)
            elif row == _LOOP:
                rc = bc_gb_loop(D, self.x, self.nodes, &self.k, slot, s, n, &t)
            else:
                rc = bc_gb_eager_loop(D, &self.k, slot, s, self.n, n, &t)
        check(rc, _CALLS[row])
        return t

    # binding=False, as ExecKernelNode.set_arg and GraphExec.launch: the same call path.
    @cython.binding(False)
    def noop(self, a=None, b=None):
        """Nothing, called as ``chain.noop(3, i & 31)`` or ``chain.noop(s)``: the cost of a
        Python loop calling a C method shaped like ``set_arg`` / ``launch``, the floor
        under any Python-level row of the graph section."""
        return None

    @cython.binding(False)
    def set_one(self, Py_ssize_t index, unsigned int value, /):
        """One cuGraphExecKernelNodeSetParams on node 0 with ``value`` stored in the u32
        slot (``index`` 3), called as ``chain.set_one(3, i & 31)``: the raw driver call
        behind the floor's Python call, no check or packing beyond the store -- what any
        Python-callable ``set_arg`` costs at the least (the row beside ``noop``'s)."""
        cdef CUresult rc
        if index != 3:
            raise IndexError(f"set_one changes parameter 3 (n), not {index}")
        (<unsigned int *>(self.buf + 24))[0] = value
        rc = D.cuGraphExecKernelNodeSetParams(self.x, self.nodes[0], &self.p)
        if rc != 0:
            check(rc, b"cuGraphExecKernelNodeSetParams")
