"""Launch plans: ``LaunchPlan`` (a launch with its arguments packed once, made by
``Kernel.bind``), ``PlanList`` and ``launch_all`` (many plans issued from one C loop).

A plan launches through the launch path's own pieces, exported by ``_launch.pxd``: the
packer (``pack_slot``), the issue loop (``issue``, ``issue_recs``: inline there, so a plan
launch calls it directly, with no cross-module call), the capture recorder's slot and
the GIL switch's, so kernels, plans and plan lists pack, issue and get recorded alike. ``plan()`` and ``PlanList()`` do no heap allocation and no
driver call besides the launches themselves.
"""
__all__ = ["LaunchPlan", "PlanList", "launch_all"]

cimport cython
from libc.string cimport memset
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.tuple cimport PyTuple_GET_SIZE

from barecuda._abi cimport *
from barecuda._errors cimport bc_state_t
from barecuda._loader cimport runtime_state, ensure_driver
from barecuda._stream cimport Stream, stream_handle, stream_use, stream_done
from barecuda._launch_config cimport geometry_text
from barecuda._buffer cimport DeviceBuffer, note_use, pin, unpin
from barecuda._pack cimport bc_launch_rec, sig_text, raise_closed, raise_count, raise_stream_closed
from barecuda._loader cimport driver_table
from barecuda._launch cimport Kernel, capture_hook_t, capture_hook_slot, releases_gil_slot, pack_slot, issue, \
    issue_recs
from barecuda._errors import make_error

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
cdef capture_hook_t *HOOK = capture_hook_slot()    # _launch's capture recorder slot (NULL outside captures)
cdef bint *RELEASE_GIL = releases_gil_slot()       # _launch's one GIL switch (set_launch_releases_gil)

_TOKEN = object()


# ------------------------------------------------------------------ plans
cdef LaunchPlan new_plan(Kernel k, tuple args):
    ensure_driver(ST)                         # forked child: ForkedProcessError
    if k.func == NULL:
        raise_closed(k)
    if PyTuple_GET_SIZE(args) != k.nparams:
        raise_count(k, k.nparams, PyTuple_GET_SIZE(args))
    cdef LaunchPlan plan = LaunchPlan.__new__(LaunchPlan, _TOKEN)
    plan.kernel = k
    plan._args = list(args)
    plan.buf = <char *>PyMem_Malloc(max(k.argbytes, 1))
    plan.ptrs = <void **>PyMem_Malloc(max(k.nparams, 1) * sizeof(void *))
    if plan.buf == NULL or plan.ptrs == NULL:
        raise MemoryError()
    memset(plan.buf, 0, max(k.argbytes, 1))
    memset(&plan.rec, 0, sizeof(plan.rec))
    plan.rec.pfunc = &k.func
    plan.rec.ctx = k.ctx
    plan.rec.params = plan.ptrs if k.nparams > 0 else NULL
    return plan


@cython.final
cdef class LaunchPlan:
    """A launch with its arguments packed once (from :meth:`Kernel.bind`).

    ``plan()`` issues ``cuLaunchKernel`` with the stored parameter block and does
    nothing else. The plan keeps every argument object and its stream alive, and
    pins its DeviceBuffer arguments: ``buf.close()`` while a plan holds ``buf``
    defers the free until the plan (or ``set_arg`` replacing it) lets go.
    ``set_arg(i, value)`` repacks one parameter with the same checks as
    ``Kernel.launch``; ``plan.stream = s`` moves it to another stream.
    """
    def __cinit__(self, token=None):
        if token is not _TOKEN:
            raise TypeError("LaunchPlan objects come from Kernel.bind()")
        self.buf = NULL
        self.ptrs = NULL

    def __dealloc__(self):
        # The plan's DeviceBuffer arguments were pinned: a close() while the plan
        # lived was deferred to here (unpin never raises).
        if self._pinned is not None:
            for b in self._pinned:
                if b is not None:
                    unpin(<DeviceBuffer>b)
            self._pinned = None
        PyMem_Free(self.buf)
        PyMem_Free(self.ptrs)
        self.buf = NULL
        self.ptrs = NULL

    cdef int _pack_all(self) except -1:
        cdef Py_ssize_t i
        for i in range(self.kernel.nparams):
            self.ptrs[i] = self.buf + self.kernel.params[i].offset
            pack_slot(self.kernel, i, self._args[i], self.buf + self.kernel.params[i].offset, self.rec.stream)
        self._pinned = [None] * self.kernel.nparams
        for i in range(self.kernel.nparams):
            self._pin(i, self._args[i])
        return 0

    cdef int _pin(self, Py_ssize_t i, object value) except -1:
        """Pin value (a DeviceBuffer) for the plan's lifetime as parameter i; unpin
        what parameter i held before. The packed address stays allocated until then."""
        old = self._pinned[i]
        if isinstance(value, DeviceBuffer):
            self._pinned[i] = pin(<DeviceBuffer>value)      # the owner: what unpin needs
        else:
            self._pinned[i] = None
        if old is not None:
            unpin(<DeviceBuffer>old)
        return 0

    cdef int _set_stream(self, object stream) except -1:
        cdef CUstream hs = NULL
        stream_handle(stream, &hs)
        self.rec.stream = hs
        self.rec.stream_closed = <int *>&(<Stream>stream).closed if type(stream) is Stream else NULL
        self._stream = stream
        for a in self._args:
            if type(a) is DeviceBuffer:
                note_use(<DeviceBuffer>a, hs)
        return 0

    def __call__(self):
        """Launch. No packing, no validation beyond the kernel being alive."""
        if HOOK[0] != NULL:
            HOOK[0](<size_t>self.rec.stream, self, self.kernel, self._args)
        if RELEASE_GIL[0]:
            _plan_held(self)      # (a plan pins its buffers already: only the stream is held)
        else:
            issue(D, self.kernel, &self.rec, False)

    def launch(self):
        """Same as calling the plan."""
        if HOOK[0] != NULL:
            HOOK[0](<size_t>self.rec.stream, self, self.kernel, self._args)
        if RELEASE_GIL[0]:
            _plan_held(self)
        else:
            issue(D, self.kernel, &self.rec, False)

    @cython.binding(False)      # a plain method descriptor: CPython calls it straight (no CyFunction)
    def set_arg(self, Py_ssize_t index, value):
        """Repack parameter ``index`` with ``value`` (same checks as ``Kernel.launch``)."""
        cdef Kernel k = self.kernel
        cdef Py_ssize_t i = index
        if i < 0:
            i += k.nparams
        if not 0 <= i < k.nparams:
            raise IndexError(f"kernel {sig_text(k)} has {k.nparams} parameters; no index {index}")
        ensure_driver(ST)
        if self.rec.stream_closed != NULL and self.rec.stream_closed[0]:
            raise_stream_closed(-1)
        # Two set_arg calls on one plan from two threads (free-threaded build) must not
        # both unpin the old buffer; a no-op with the GIL. A launch of the plan running
        # meanwhile is not ordered with this (docs/architecture.md).
        with cython.critical_section(self):
            self._repack(i, value)

    cdef int _repack(self, Py_ssize_t i, object value) except -1:
        """set_arg's body: pin the new buffer first, so that a close() on another thread
        either defers its free to this plan or makes the packer refuse the buffer."""
        cdef DeviceBuffer new_pin = pin(<DeviceBuffer>value) if type(value) is DeviceBuffer else None
        try:
            pack_slot(self.kernel, i, value, self.buf + self.kernel.params[i].offset, self.rec.stream)
        except BaseException:
            if new_pin is not None:
                unpin(new_pin)
            raise
        old = self._pinned[i]
        self._pinned[i] = new_pin
        if old is not None:
            unpin(<DeviceBuffer>old)
        self._args[i] = value
        return 0

    @property
    def args(self):
        """The argument objects the plan holds (and keeps alive)."""
        return tuple(self._args)

    @property
    def stream(self):
        """The Stream the plan launches on (None: the default stream); assign a Stream to move the plan."""
        return self._stream

    @stream.setter
    def stream(self, value):
        with cython.critical_section(self):
            self._set_stream(value)

    @property
    def grid(self):
        """The grid dimensions as ``(x, y, z)``."""
        return (self.rec.grid[0], self.rec.grid[1], self.rec.grid[2])

    @property
    def block(self):
        """The block dimensions as ``(x, y, z)``."""
        return (self.rec.block[0], self.rec.block[1], self.rec.block[2])

    @property
    def shared_mem(self):
        """The dynamic shared memory per block, in bytes."""
        return self.rec.smem

    def __repr__(self):
        return f"<barecuda.LaunchPlan {sig_text(self.kernel)} grid={self.grid} block={self.block}>"


cdef int _batch_failed(object plan, Py_ssize_t index, CUresult rc) except -1:
    cdef Kernel k = (<LaunchPlan>plan).kernel
    if rc == -1:
        raise ValueError(f"plan {index}: kernel {k.name!r} belongs to a module that was closed")
    if rc == -2:
        raise_stream_closed(index)
    raise make_error(rc, "cuLaunchKernelEx" if (<LaunchPlan>plan).rec.nattrs else "cuLaunchKernel",
                     f"plan {index} of the batch (kernel {sig_text(k)}, "
                     f"{geometry_text((<LaunchPlan>plan).rec.grid, (<LaunchPlan>plan).rec.block, (<LaunchPlan>plan).rec.smem)}); the plans before it were launched")


@cython.final
cdef class PlanList:
    """A reusable batch of :class:`LaunchPlan` objects issued from one C loop.

    ``plan_list()`` launches every plan in order with no Python work per launch.
    Later ``set_arg``/``stream`` changes of the plans are seen (the list points at
    the plans' own launch records).
    """
    cdef bc_launch_rec **recs
    cdef Py_ssize_t n
    cdef tuple _plans

    def __cinit__(self, plans):
        self.recs = NULL
        self._plans = tuple(plans)
        self.n = len(self._plans)
        for j, p in enumerate(self._plans):
            if type(p) is not LaunchPlan:
                raise TypeError(f"PlanList item {j} is a {type(p).__name__}, not a LaunchPlan")
        self.recs = <bc_launch_rec **>PyMem_Malloc(max(self.n, 1) * sizeof(bc_launch_rec *))
        if self.recs == NULL:
            raise MemoryError()
        for j in range(self.n):
            self.recs[j] = &(<LaunchPlan>self._plans[j]).rec

    def __dealloc__(self):
        PyMem_Free(self.recs)
        self.recs = NULL

    def __call__(self):
        """Launch every plan, in order."""
        cdef CUresult rc = 0
        cdef Py_ssize_t bad
        if HOOK[0] != NULL:
            for p in self._plans:
                HOOK[0](<size_t>(<LaunchPlan>p).rec.stream, p, (<LaunchPlan>p).kernel,
                              (<LaunchPlan>p)._args)
        if RELEASE_GIL[0]:
            streams = _hold_streams(self._plans)
            try:
                bad = issue_recs(D, self.recs, self.n, &rc, True)
            finally:
                _release_streams(streams)
        else:
            bad = issue_recs(D, self.recs, self.n, &rc, False)
        if bad >= 0:
            _batch_failed(self._plans[bad], bad, rc)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self._plans[i]

    def __iter__(self):
        return iter(self._plans)

    def __repr__(self):
        return f"<barecuda.PlanList of {self.n} plans>"


def launch_all(plans):
    """Launch a list or tuple of :class:`LaunchPlan` objects, in order, from one C loop.

    Every item is checked to be a LaunchPlan before anything is launched. For a
    batch issued repeatedly, :class:`PlanList` avoids even that check.
    """
    cdef Py_ssize_t i, n
    cdef CUresult rc = 0
    cdef LaunchPlan p
    cdef bc_launch_rec *rp
    if type(plans) is not list and type(plans) is not tuple:
        plans = list(plans)
    n = len(plans)
    for i in range(n):
        if type(plans[i]) is not LaunchPlan:
            raise TypeError(f"launch_all: item {i} is a {type(plans[i]).__name__}, not a LaunchPlan")
    for i in range(n):
        p = <LaunchPlan>plans[i]
        if HOOK[0] != NULL:
            HOOK[0](<size_t>p.rec.stream, p, p.kernel, p._args)
        rp = &p.rec
        if RELEASE_GIL[0]:
            _plan_held(p, i)
        elif issue_recs(D, &rp, 1, &rc, False) >= 0:
            _batch_failed(p, i, rc)


# ---- GIL-released plan launches: the plans pin their buffers (a close() defers the free
# to the plan's end), so only their streams are held over the call (see _hold_args).
cdef int _plan_held(LaunchPlan p, Py_ssize_t index=-1) except -1:
    if type(p._stream) is Stream and (<Stream>p._stream).closed:
        raise_stream_closed(index)          # the words of the GIL-held path ("plan i: its stream...")
    cdef Stream so = stream_use(p._stream)
    try:
        issue(D, p.kernel, &p.rec, True)
    finally:
        stream_done(so)
    return 0


cdef list _hold_streams(object plans):
    """stream_use for each plan's barecuda Stream (a list of those held)."""
    cdef list held = []
    try:
        for i, p in enumerate(plans):
            if type((<LaunchPlan>p)._stream) is Stream:
                if (<Stream>(<LaunchPlan>p)._stream).closed:
                    raise_stream_closed(i)
                held.append(stream_use((<LaunchPlan>p)._stream))
    except BaseException:
        _release_streams(held)
        raise
    return held


cdef void _release_streams(list held) noexcept:
    for so in held:
        stream_done(<Stream>so)
