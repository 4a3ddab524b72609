"""CUDA graphs: kernel-node handles and batched argument updates of an executable.

Owns: ``ExecKernelNode`` (``GraphExec.kernel_node``: one argument checked and packed in
C into the node's parameter block in the executable, pushed with
``cuGraphExecKernelNodeSetParams``), ``ArgUpdate`` (``GraphExec.prepare_args``: many
slots set in one call, one push per node) and the parameters they share
(``_KernelParams``: the block and the values packed in it, one per handled node of an
executable). ``_exec.pyx`` makes them.
"""
__all__ = ["ExecKernelNode", "ArgUpdate"]

cimport cython
from libc.string cimport memcpy, memset
from libc.stdint cimport uint8_t, uint16_t, uint32_t
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.object cimport PyTypeObject, Py_TYPE

cdef extern from "Python.h":
    PyTypeObject PyLong_Type

import operator

from barecuda._abi cimport *
from barecuda._errors cimport check
from barecuda._loader cimport driver_table, set_current
from barecuda._buffer cimport DeviceBuffer, note_use, pin, unpin
from barecuda._launch cimport Kernel, pack_arg, check_dims, kernels_closed
from barecuda._pack cimport bc_param, bc_store_int, int_ok, int_in_range, _bc_as_ll
from barecuda._signature cimport bc_kind_is_pointer
from barecuda.graph._nodes cimport KernelNode
from barecuda.graph._exec cimport GraphExec
from barecuda._errors import make_error

cdef bc_driver_t *D = driver_table()
cdef const size_t *_closed = kernels_closed()       # kernels invalidated so far (_launch.pyx)

_TOKEN = object()


cdef object handle_token():
    """The token the handle and update constructors take (they come from GraphExec only)."""
    return _TOKEN


@cython.final
cdef class _KernelParams:
    """One kernel node's parameters in one executable: the block pushed with
    ``cuGraphExecKernelNodeSetParams`` and the values packed in it. Held by the
    executable (so the values live as long as it may run them) and shared by every
    handle on the node."""

    def __cinit__(self):
        self.buf = NULL
        self.ptrs = NULL
        self.pinned = NULL
        self.params = NULL
        self.nparams = 0
        self.seen = <size_t>-1
        self.vals = []

    def __dealloc__(self):
        # The executable marked the values used on its launch streams first (_mark_used).
        self._unpin_all()
        PyMem_Free(self.buf)
        PyMem_Free(self.ptrs)
        PyMem_Free(self.pinned)
        self.buf = NULL
        self.ptrs = NULL
        self.pinned = NULL

    cdef void _unpin_all(self) noexcept:
        cdef Py_ssize_t i
        if self.pinned == NULL or self.vals is None:
            return
        for i in range(len(self.vals)):
            if self.pinned[i]:
                self.pinned[i] = 0
                unpin(<DeviceBuffer>self.vals[i])

    cdef int load(self, KernelNode src, CUgraphNode node) except -1:
        """Take src's kernel, dimensions and parameter block; `node` is the handle the
        executable knows the node by."""
        cdef Kernel k = src.kernel
        cdef char *buf
        cdef Py_ssize_t i
        self._unpin_all()               # the values set_arg put here go (already marked used)
        if k is not self.kernel:        # (the same kernel again, after an update: same sizes)
            buf = <char *>PyMem_Realloc(self.buf, max(k.argbytes, 1))
            if buf == NULL:
                raise MemoryError()
            self.buf = buf
            buf = <char *>PyMem_Realloc(self.ptrs, max(k.nparams, 1) * sizeof(void *))
            if buf == NULL:
                raise MemoryError()
            self.ptrs = <void **>buf
            buf = <char *>PyMem_Realloc(self.pinned, max(k.nparams, 1))
            if buf == NULL:
                raise MemoryError()
            self.pinned = buf
            memset(self.pinned, 0, max(k.nparams, 1))
            for i in range(k.nparams):
                self.ptrs[i] = self.buf + k.params[i].offset
            self.kernel = k
            self.params = k.params
            self.nparams = max(k.nparams, 0)
            self.seen = <size_t>-1          # the hot path checks the kernel's module once first
        memcpy(self.buf, src.buf, max(k.argbytes, 1))
        self.p = src.p
        self.p.kernelParams = self.ptrs if k.nparams > 0 else NULL
        self.node = node
        self.vals = list(src._vals)
        return 0


cdef inline unsigned long long _load_slot(const char *slot, uint32_t size) noexcept nogil:
    """The bytes of a slot of at most 8 bytes, as bc_store_int stores them back."""
    cdef uint8_t u8
    cdef uint16_t u16
    cdef uint32_t u32
    cdef unsigned long long u64
    if size == 1:
        memcpy(&u8, slot, 1)
        return u8
    if size == 2:
        memcpy(&u16, slot, 2)
        return u16
    if size == 4:
        memcpy(&u32, slot, 4)
        return u32
    memcpy(&u64, slot, 8)
    return u64


cdef inline bint _word(uint32_t size) noexcept nogil:
    """A slot of 1, 2, 4 or 8 bytes: _load_slot / bc_store_int move exactly its bytes
    (other sizes, structs, take the slow paths)."""
    return size - 1 < 8 and (size & (size - 1)) == 0


cdef list _NO_KEEP = []     # pack_arg's keep argument where nothing needs keeping (it stays empty)


@cython.final
cdef class ExecKernelNode:
    """A kernel node of one executable graph.

    ``set_arg(i, value)`` checks and packs one argument in C (as ``Kernel.launch``
    does) into the node's parameter block and pushes the block to the executable with
    ``cuGraphExecKernelNodeSetParams``; ``set_dims`` changes grid, block and shared
    memory. The change applies to launches issued after it. Handles on one node of one
    executable share its parameters.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("kernel-node handles come from GraphExec.kernel_node()")

    def __repr__(self):
        return f"<barecuda.ExecKernelNode {self.st.kernel.name!r} #{self.node.index}>"

    @property
    def kernel(self):
        """The node's kernel (after an update, the new graph's)."""
        return self.st.kernel

    @property
    def args(self):
        """The values currently packed, one per parameter."""
        return tuple(self.st.vals)

    @property
    def grid(self):
        """The grid dimensions the executable's node launches with, as ``(x, y, z)``."""
        return (self.st.p.gridDimX, self.st.p.gridDimY, self.st.p.gridDimZ)

    @property
    def block(self):
        """The block dimensions the executable's node launches with, as ``(x, y, z)``."""
        return (self.st.p.blockDimX, self.st.p.blockDimY, self.st.p.blockDimZ)

    @property
    def shared_mem(self):
        """The dynamic shared memory per block the executable's node launches with, in bytes."""
        return self.st.p.sharedMemBytes

    # binding=False: a plain method descriptor, which CPython calls straight (a
    # CyFunction costs a generic vectorcall and its own argument parsing more).
    @cython.binding(False)
    def set_arg(self, Py_ssize_t index, value, /):
        """Set parameter ``index`` to ``value`` in the executable.

        The hot path: exact int/DeviceBuffer values are checked and packed in C straight
        into the persistent parameter block (other values with :meth:`Kernel.launch`'s
        packer), then one ``cuGraphExecKernelNodeSetParams``; no Python object is created.

        Raises
        ------
        IndexError, TypeError, OverflowError, ValueError
            As :meth:`Kernel.launch` for a bad index, type, range or a closed buffer
            (nothing changed).
        """
        # Written as attribute chains (self.exec.handle, ...): Cython reads those without
        # taking references, where typed locals would cost an incref/decref each.
        cdef const bc_param *p
        cdef char *slot
        cdef unsigned long long saved
        cdef PyTypeObject *t
        cdef long long v
        cdef int ovf = 0
        cdef int kind
        cdef CUresult rc
        # st.seen == kernels_closed(): the kernel's module was open when last looked at and
        # no module was closed since (one compare instead of a hop to the Kernel).
        if (self.exec.handle == NULL or self.st.seen != _closed[0]
                or <size_t>index >= <size_t>self.st.nparams or not _word(self.st.params[index].size)):
            return self._set_arg_slow(index, value)
        p = &self.st.params[index]
        slot = self.st.buf + p.offset
        kind = p.kind
        saved = _load_slot(slot, p.size)
        t = Py_TYPE(value)
        if t is &PyLong_Type and int_ok(kind):
            v = _bc_as_ll(value, &ovf)
            if ovf == 0 and int_in_range(kind, v):
                bc_store_int(slot, p.size, <unsigned long long>v)
            else:       # a u64 above 2**63, or the range error
                pack_arg(self.st.kernel, index, value, self.st.buf, self.exec.last, _NO_KEEP)
        elif t is <PyTypeObject *>DeviceBuffer and bc_kind_is_pointer(kind) and (<DeviceBuffer>value).ptr != 0:
            note_use(<DeviceBuffer>value, self.exec.last)
            bc_store_int(slot, 8, (<DeviceBuffer>value).ptr)
        else:
            pack_arg(self.st.kernel, index, value, self.st.buf, self.exec.last, _NO_KEEP)
        set_current(self.exec.ctx)
        rc = D.cuGraphExecKernelNodeSetParams(self.exec.handle, self.st.node, &self.st.p)
        if rc != 0:
            bc_store_int(slot, p.size, saved)
            check(rc, b"cuGraphExecKernelNodeSetParams")
        _replace_val(self.exec, self.st, index, value)

    cdef object _set_arg_slow(self, Py_ssize_t index, object value):
        """set_arg for a closed executable or module, a bad index (these raise) and
        slots over 8 bytes (structs)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef Kernel k = st.kernel
        cdef char *slot
        x._live()
        if k.func == NULL or <size_t>index >= <size_t>st.nparams:
            return pack_arg(k, index, value, st.buf, x.last, _NO_KEEP)     # raises
        st.seen = _closed[0]            # alive now: the hot path may skip the look
        slot = st.buf + k.params[index].offset
        saved = slot[:k.params[index].size]
        pack_arg(k, index, value, st.buf, x.last, _NO_KEEP)
        set_current(x.ctx)
        rc = D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &st.p)
        if rc != 0:
            memcpy(slot, <char *>saved, k.params[index].size)
            check(rc, b"cuGraphExecKernelNodeSetParams")
        _replace_val(x, st, index, value)

    def set_args(self, *args):
        """Set every parameter (one ``cuGraphExecKernelNodeSetParams``)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef Kernel k = st.kernel
        cdef Py_ssize_t i
        x._live()
        if len(args) != k.nparams:
            raise TypeError(f"kernel {k.name!r} takes {k.nparams} arguments, got {len(args)}")
        saved = st.buf[:max(k.argbytes, 1)]
        try:
            for i in range(k.nparams):
                pack_arg(k, i, args[i], st.buf, x.last, _NO_KEEP)
            set_current(x.ctx)
            check(D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &st.p), b"cuGraphExecKernelNodeSetParams")
        except BaseException:
            memcpy(st.buf, <char *>saved, max(k.argbytes, 1))
            raise
        for i in range(k.nparams):
            _replace_val(x, st, i, args[i])

    def set_dims(self, grid=None, block=None, shared_mem=None):
        """Change grid, block and/or dynamic shared memory (checked as a launch checks them)."""
        cdef GraphExec x = self.exec
        cdef _KernelParams st = self.st
        cdef unsigned int g[3]
        cdef unsigned int b[3]
        cdef CUDA_KERNEL_NODE_PARAMS_v2 p = st.p
        x._live()
        if grid is None:
            grid = self.grid
        if block is None:
            block = self.block
        if shared_mem is None:
            shared_mem = st.p.sharedMemBytes
        import operator
        shared_mem = operator.index(shared_mem)
        if not 0 <= shared_mem <= 0xFFFFFFFF:
            raise ValueError(f"shared_mem must be in [0, 2**32), got {shared_mem}")
        check_dims(st.kernel, grid, block, shared_mem, g, b)
        p.gridDimX, p.gridDimY, p.gridDimZ = g[0], g[1], g[2]
        p.blockDimX, p.blockDimY, p.blockDimZ = b[0], b[1], b[2]
        p.sharedMemBytes = shared_mem
        set_current(x.ctx)
        check(D.cuGraphExecKernelNodeSetParams(x.handle, st.node, &p), b"cuGraphExecKernelNodeSetParams")
        st.p = p


cdef inline int _replace_val(GraphExec x, _KernelParams st, Py_ssize_t index, object value) except -1:
    """st.vals[index] = value (index checked by the caller), after the push."""
    cdef PyObject *old = PyList_GET_ITEM(st.vals, index)
    if old == <PyObject *>value:        # the same object again (a buffer re-set): its pin stays
        return 0
    if (st.pinned[index] or Py_TYPE(<object>old) is <PyTypeObject *>DeviceBuffer
            or Py_TYPE(value) is not &PyLong_Type):
        return _replace_buffer_val(x, st, index, value)
    Py_INCREF(value)                    # an int replaces a value that holds nothing
    PyList_SET_ITEM(st.vals, index, value)
    Py_XDECREF(old)
    return 0


cdef int _replace_buffer_val(GraphExec x, _KernelParams st, Py_ssize_t index, object value) except -1:
    """_replace_val where a buffer comes or goes. The executable pins a buffer it got this
    way (its close() defers the free); a replaced buffer was used by earlier launches: its
    free waits for them."""
    cdef PyObject *old = PyList_GET_ITEM(st.vals, index)
    cdef char was_pinned = st.pinned[index]
    if Py_TYPE(<object>old) is <PyTypeObject *>DeviceBuffer and x.launched:
        note_use(<DeviceBuffer><object>old, x.last)
        if x.multi:
            (<DeviceBuffer><object>old).use_flag[0] = 1
    st.pinned[index] = 0
    if isinstance(value, DeviceBuffer):
        pin(<DeviceBuffer>value)        # open: packing refused a closed one
        st.pinned[index] = 1
    Py_INCREF(value)
    PyList_SET_ITEM(st.vals, index, value)
    if was_pinned:
        unpin(<DeviceBuffer><object>old)
    Py_XDECREF(old)
    return 0


cdef inline int _pack_fast(_KernelParams st, Py_ssize_t index, object value, CUstream last) except -1:
    """Pack value into slot index of st's block (index < st.nparams, a slot of at most 8
    bytes): exact ints and open DeviceBuffers inline, anything else with launch's packer
    (which raises on a bad value and leaves the slot as it was)."""
    cdef const bc_param *p = &st.params[index]
    cdef char *slot = st.buf + p.offset
    cdef int kind = p.kind
    cdef PyTypeObject *t = Py_TYPE(value)
    cdef long long v
    cdef int ovf = 0
    if t is &PyLong_Type and int_ok(kind):
        v = _bc_as_ll(value, &ovf)
        if ovf == 0 and int_in_range(kind, v):
            bc_store_int(slot, p.size, <unsigned long long>v)
            return 0
    elif t is <PyTypeObject *>DeviceBuffer and bc_kind_is_pointer(kind) and (<DeviceBuffer>value).ptr != 0:
        note_use(<DeviceBuffer>value, last)
        bc_store_int(slot, 8, (<DeviceBuffer>value).ptr)
        return 0
    return pack_arg(st.kernel, index, value, st.buf, last, _NO_KEEP)


@cython.final
cdef class ArgUpdate:
    """A prepared set of kernel-node parameter slots of one executable graph (from
    :meth:`GraphExec.prepare_args`): ``set(*values)`` changes them all in one call.

    ``set`` checks and packs every value in C first (the checks of :meth:`Kernel.launch`:
    type, range, closed buffer; and a closed executable or module), so a bad value
    changes nothing; then it pushes each touched node's block with one
    ``cuGraphExecKernelNodeSetParams`` (one per node, however many of its slots
    changed), in the order the nodes first appear in the slots. If the push of the
    k-th node fails, the nodes before it hold their new values in the executable (and
    in their handles' ``args``), that node and the later ones keep their old values, and
    the :class:`CudaError` names the node. The update shares the nodes' parameters with
    their :class:`ExecKernelNode` handles and follows :meth:`GraphExec.update`.
    """

    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("argument updates come from GraphExec.prepare_args()")
        self.slots = NULL
        self.n = 0

    def __dealloc__(self):
        PyMem_Free(self.slots)
        self.slots = NULL

    def __len__(self):
        return self.n

    def __repr__(self):
        return f"<barecuda.ArgUpdate {self.n} slots on {len(self._nodes)} nodes>"

    @property
    def slots(self):
        """The ``(ExecKernelNode, index)`` pairs, in the order ``set`` takes values."""
        return tuple((self._handles[i], self.slots[i].index) for i in range(self.n))

    @cython.binding(False)      # a plain method descriptor (see ExecKernelNode.set_arg)
    def set(self, *values):
        """Set every slot, ``values[i]`` into slot ``i`` (one value per slot).

        Raises
        ------
        TypeError, OverflowError, ValueError, IndexError
            As :meth:`ExecKernelNode.set_arg`, before any driver call; nothing changed.
        CudaError
            A failed ``cuGraphExecKernelNodeSetParams``: see the class docstring for
            what state remains.
        """
        # The nodes' blocks are read through borrowed pointers (self._nodes holds them):
        # no reference counting per slot.
        cdef Py_ssize_t i = 0, j, nn
        cdef _arg_slot *sl
        cdef PyObject *stp
        cdef const bc_param *p
        cdef CUresult rc
        cdef CUgraphExec x
        if PyTuple_GET_SIZE(values) != self.n:
            raise TypeError(f"this update sets {self.n} slots, got {PyTuple_GET_SIZE(values)} values")
        if self.exec.handle == NULL:
            self.exec._live()
        try:
            while i < self.n:
                sl = &self.slots[i]
                stp = sl.st
                if ((<_KernelParams>stp).seen == _closed[0] and <size_t>sl.index < <size_t>(<_KernelParams>stp).nparams
                        and _word((<_KernelParams>stp).params[sl.index].size)):
                    p = &(<_KernelParams>stp).params[sl.index]
                    sl.saved = _load_slot((<_KernelParams>stp).buf + p.offset, p.size)
                    _pack_fast(<_KernelParams>stp, sl.index, <object>PyTuple_GET_ITEM(values, i), self.exec.last)
                else:
                    self._pack_slow(i, <_KernelParams>stp, sl.index, <object>PyTuple_GET_ITEM(values, i))
                i += 1
            x = self.exec.handle            # (a packer may have run Python code: look again)
            if x == NULL:
                self.exec._live()
            set_current(self.exec.ctx)
        except BaseException:
            self._restore(i, 0)
            raise
        nn = PyTuple_GET_SIZE(self._nodes)
        for j in range(nn):
            stp = PyTuple_GET_ITEM(self._nodes, j)
            rc = D.cuGraphExecKernelNodeSetParams(x, (<_KernelParams>stp).node, &(<_KernelParams>stp).p)
            if rc != 0:
                self._restore(self.n, j)
                self._commit(values, j)
                raise make_error(rc, "cuGraphExecKernelNodeSetParams",
                                 f"pushing kernel node #{self._node_index(j)} "
                                 f"({(<_KernelParams>stp).kernel.name!r}; node {j + 1} of {nn} in this update; "
                                 "the ones before it were set)")
        self._commit(values, nn)

    cdef int _pack_slow(self, Py_ssize_t i, _KernelParams st, Py_ssize_t index, object value) except -1:
        """Slot i after a module close somewhere, an update that changed the node's kernel,
        or a slot that is not 1, 2, 4 or 8 bytes (structs): launch's packer, which raises
        on a closed module or a bad index."""
        cdef Kernel k = st.kernel
        cdef uint32_t size
        if k.func == NULL or <size_t>index >= <size_t>st.nparams:
            return pack_arg(k, index, value, st.buf, self.exec.last, _NO_KEEP)     # raises
        st.seen = _closed[0]
        size = st.params[index].size
        if _word(size):
            self.slots[i].saved = _load_slot(st.buf + st.params[index].offset, size)
        else:
            self._saved_big[i] = (st.buf + st.params[index].offset)[:size]
            self._any_big = True
        try:
            pack_arg(k, index, value, st.buf, self.exec.last, _NO_KEEP)
        except BaseException:
            self._saved_big[i] = None
            raise
        return 0

    cdef int _restore(self, Py_ssize_t upto, Py_ssize_t first_node) except -1:
        """Put back the bytes slots [0, upto) held, for slots of nodes >= first_node (last
        packed first: the restored state of each slot is the one before its packing)."""
        cdef Py_ssize_t i
        cdef _arg_slot *sl
        cdef _KernelParams st
        cdef const bc_param *p
        for i in range(upto - 1, -1, -1):
            sl = &self.slots[i]
            if sl.node < first_node:
                continue
            st = <_KernelParams>sl.st
            if <size_t>sl.index >= <size_t>st.nparams:
                continue
            p = &st.params[sl.index]
            big = self._saved_big[i]
            if big is not None:
                memcpy(st.buf + p.offset, <char *>big, p.size)
                self._saved_big[i] = None
            elif _word(p.size):
                bc_store_int(st.buf + p.offset, p.size, sl.saved)
        return 0

    cdef int _commit(self, tuple values, Py_ssize_t nodes_done) except -1:
        """The values of slots whose node was pushed (position < nodes_done) now belong
        to it (held, buffers pinned; replaced buffers marked used)."""
        cdef Py_ssize_t i
        cdef _arg_slot *sl
        if self._any_big:
            for i in range(self.n):
                self._saved_big[i] = None
            self._any_big = False
        for i in range(self.n):
            sl = &self.slots[i]
            if sl.node < nodes_done:
                _replace_val(self.exec, <_KernelParams>sl.st, sl.index, <object>PyTuple_GET_ITEM(values, i))
        return 0

    cdef Py_ssize_t _node_index(self, Py_ssize_t j):
        cdef Py_ssize_t i
        for i in range(self.n):
            if self.slots[i].node == j:
                return (<ExecKernelNode>self._handles[i]).node.index
        return -1
