"""Device memory: DeviceBuffer, allocators, and the ownership protocol.

Fields other modules read: ptr, nbytes, used_elsewhere (an owner's), device, ctx.
A buffer's stream is read only through order_stream() (never stream_handle/_stream
directly): its Stream may have been closed since. Dependants (views, slices, plans, graph nodes, IPC and DLPack exports)
hold the allocation OWNER through pin()/unpin(); see docs/errors.md, "Ownership"."""
from libc.stddef cimport ptrdiff_t
from barecuda._abi cimport CUdeviceptr, CUstream, CUcontext, CUevent
from barecuda._device cimport Device
from barecuda._stream cimport Stream

cdef extern from "barecuda/bc_owners.h" nogil:     # the table behind view_at (_buffer.pyx only)
    ctypedef struct bc_owner_entry:
        unsigned long long lo, hi
        void *obj
    ctypedef struct bc_owners:
        bc_owner_entry *v
        ptrdiff_t n
    int bc_owners_reserve(bc_owners *t)
    void bc_owners_add(bc_owners *t, unsigned long long p, size_t n, void *obj, ptrdiff_t *slot)
    void bc_owners_remove(bc_owners *t, ptrdiff_t *slot)
    void bc_owners_move(bc_owners *t, ptrdiff_t *frm, void *obj, ptrdiff_t *to)
    int bc_owners_find(bc_owners *t, unsigned long long p, bc_owner_entry *out)

from barecuda._uses cimport bc_use_enter, bc_use_leave, bc_use_count, bc_flag_set, bc_flag_take, bc_flag_get

# DeviceBuffer._kind
cdef enum:
    KIND_ASYNC = 0      # owned, from cuMemAllocAsync (freed with cuMemFreeAsync)
    KIND_SYNC = 1       # owned, from cuMemAlloc (freed with cuMemFree), or empty
    KIND_VIEW = 2       # memory of another object (foreign array, or a view of one of ours)
    KIND_CLOSED = 3     # close() ran: every use raises (the free may still be deferred)
    KIND_POOL = 4       # owned by a caching allocator (_pool); _block is its bookkeeping
    KIND_MANAGED = 5    # cuMemAllocManaged (freed with cuMemFree)

cdef class DeviceBuffer:
    cdef CUdeviceptr ptr
    cdef size_t nbytes              # bytes (the Python-level `size` is the element count)
    cdef CUstream stream_handle     # stream this buffer's own work is ordered on (read: order_stream)
    cdef bint used_elsewhere        # (owner) work on another stream used it: free must wait for all
    cdef readonly Device device
    """The Device the memory is on."""
    cdef CUcontext ctx
    cdef object _stream             # Stream object kept alive while the buffer lives
    cdef object _owner              # foreign producer kept alive by an import; None otherwise
    cdef DeviceBuffer _root         # the allocation owner of a view of our own memory, else None
    cdef CUstream root_stream       # the owner's stream (note_use compares with it)
    cdef bint *use_flag             # &owner.used_elsewhere (note_use sets it)
    cdef long _pins                 # (owner) live dependants; the free waits for the last (atomic:
                                    #   bc_uses.h, dependants come and go on any thread)
    cdef int _free_pending          # (owner) closed, free not done yet: the last unpin / use_end frees
                                    #   (taken atomically: bc_flag_take, so the free runs once)
    cdef long _uses                 # (owner) driver calls in flight without the GIL (use_begin/use_end; atomic)
    cdef int _free_kind             # (owner) _kind before a deferred close (the allocator reads it)
    cdef CUdeviceptr _free_ptr      # (owner) ptr before a deferred close (ptr reads 0 once closed)
    cdef bint _graph_alloc          # (owner) driver memory allocated on a capturing stream (_driver_pool): a
                                    #   graph allocation (the graph owns it; captures do not hold it)
    cdef bint _readonly             # imported read-only: writes refuse
    cdef bint _strided              # non-contiguous import: pointer use only
    cdef object _allocator          # allocator the memory goes back to, None for views
    cdef object _shape
    cdef object _dtype
    cdef object _strides            # element strides of a strided import, else None
    cdef int _kind                  # see the enum above
    cdef void *_block               # allocator's bookkeeping for this block (caching allocator)
    cdef size_t _itemsize
    cdef ptrdiff_t _reg             # (owner) its slot + 1 in the table of live allocations, else 0
    cdef object __weakref__

    cdef int _release(self) except -1
    cdef int _check_open(self) except -1
    cdef int _check_writable(self) except -1
    cdef int _check_contiguous(self, str what) except -1
    cdef DeviceBuffer _sub(self, CUdeviceptr p, size_t n)


cdef class Allocator:
    """Where DeviceBuffer memory comes from and goes back to (subclassed by _pool)."""
    cdef readonly Device device
    """The Device this allocator allocates on."""
    cdef CUcontext ctx
    # Fill b.ptr / b.nbytes / b._block for `size` bytes ordered on stream s (b.stream_handle
    # is already set). Must leave b.ptr == 0 on failure.
    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1
    # Give b's memory back; never called twice for one allocation. May be called from
    # a destructor: the caller turns an exception into a CudaWarning.
    cdef int deallocate(self, DeviceBuffer b) except -1


# ---- ownership (docs/errors.md, "Ownership"; docs/architecture.md, "One owner per allocation")
cdef inline DeviceBuffer owner_of(DeviceBuffer b):
    """The allocation owner (b itself for an owner or a foreign import)."""
    if b._root is not None:
        return b._root
    return b

# A dependant holds the allocation: raises ValueError if b is closed. Pins the OWNER and
# returns it: keep THAT for unpin (a view may be closed, and lose its owner, before the
# dependant goes).
cdef DeviceBuffer pin(DeviceBuffer b)
# The dependant is gone; may run a deferred free (failures become CudaWarning). Never raises.
cdef void unpin(DeviceBuffer b) noexcept
# A small object that pins b's owner while it lives: for dependants that keep a list
# of objects rather than a count (graph nodes, IPC handles). Raises if b is closed.
cdef object hold(DeviceBuffer b)
# hold() for each DeviceBuffer among objs (a list; empty when there is none).
cdef list holds(object objs)

# ---- use counts: a driver call made without the GIL on b's memory (docs/architecture.md,
# "Close versus in-flight use"). use_begin enters the OWNER's count, then raises
# ValueError (count left again) when b is closed; it returns the owner, which the caller
# gives to use_end after the call (in a finally). A close() meanwhile marks the buffer
# closed at once and leaves the free to the last use_end (never skipped). GIL held for
# both; the count itself is atomic (bc_uses.h).
cdef DeviceBuffer use_begin(DeviceBuffer b)
# Leaves the count; the last one out of a closed owner runs its deferred free (failures
# become CudaWarning). None is accepted (nothing). Never raises.
cdef void use_end(DeviceBuffer o) noexcept

cdef inline void note_use(DeviceBuffer b, CUstream s) noexcept nogil:
    """Record that queued work on stream s uses b: marks the OWNER (cheap; per launch argument).
    Read before write: launches from several threads share their buffers' owners, and a
    store of the same value still takes the owner's cache line away from the other cores."""
    if b.root_stream != s and not b.use_flag[0]:
        b.use_flag[0] = 1

# ---- the stream a buffer's work is ordered on (every reader goes through these)
cdef inline bint stream_closed(DeviceBuffer b) noexcept:
    """True when b is ordered on a barecuda Stream that was closed since: its handle is
    destroyed (and may be reused by a new stream), so no driver call may name it."""
    return b._stream is not None and type(b._stream) is Stream and (<Stream>b._stream).closed

# Slow path of order_stream (b's Stream was closed): waits for the context (so the work
# queued on the dead stream is done), then moves b to the legacy default stream for good
# and marks the owner used elsewhere (views may still compare with the dead handle).
cdef int _order_on_safe_stream(DeviceBuffer b, CUstream *out) except -1

cdef inline int order_stream(DeviceBuffer b, CUstream *out) except -1:
    """The stream b's work is ordered on, safe to name in a driver call: b's own stream,
    or, once that Stream was closed, the legacy default stream (NULL) after the work
    queued on the closed one is done. Afterwards b._stream is the matching object."""
    if stream_closed(b):
        return _order_on_safe_stream(b, out)
    out[0] = b.stream_handle
    return 0

# (An allocator's free of driver memory: free_order / free_async / free_sync in
# _driver_pool.pxd.)

cdef inline int check_usable(DeviceBuffer b) except -1:
    """Raise unless b may be used as a kernel argument / copy side (not closed)."""
    if b._kind == KIND_CLOSED:
        raise ValueError("DeviceBuffer is closed (use after close())")
    return 0


# ---- stream capture: copies and memsets (_capture.pyx fills the slot while a barecuda
# capture runs; NULL otherwise). hook(s, a, b): a copy or memset about to be queued on
# stream s uses a and b (DeviceBuffer, PinnedBuffer or None); when s is in a capture the
# captured graph holds them (returns 1), else returns 0. Modules cache the slot's address
# at import: outside captures a copy pays one load and compare.
ctypedef int (*capture_use_t)(CUstream s, object a, object b) except -1
cdef capture_use_t *capture_use_slot() noexcept nogil
# Slow path of refuse_captured: raises when s is capturing.
cdef int _refuse_captured(CUstream s, str op, str what) except -1

cdef inline int captured_use(capture_use_t *slot, CUstream s, object a, object b) except -1:
    """1 when s is in a barecuda capture (the graph now holds a and b), else 0."""
    if slot[0] == NULL:
        return 0
    return slot[0](s, a, b)

cdef inline int refuse_captured(capture_use_t *slot, CUstream s, str op, str what) except -1:
    """Before any driver call: CudaStreamCaptureError naming `op` when a barecuda capture
    runs and s is capturing (`what`: why the operation cannot be captured). The capture
    is left valid and the stream usable."""
    if slot[0] == NULL:
        return 0
    return _refuse_captured(s, op, what)


# ---- helpers for the sibling modules (_interop, _copy, _host, _managed, _pool)
# (The allocator bc.alloc/empty/... use for a device: default_allocator in _allocators.pxd.
# The device a (device=, stream=) pair names, made current, and the order between two
# streams: resolve_device and stream_after in _stream.pxd.)
# A fresh DeviceBuffer of nbytes on (device, stream) from `allocator` (None: default).
cdef DeviceBuffer new_buffer(size_t nbytes, object device, object stream, object allocator)
# An owner DeviceBuffer over memory from some allocator (managed, pitched...).
cdef DeviceBuffer adopt(CUdeviceptr p, size_t nbytes, Device dev, CUstream h, object stream, int kind,
                        object allocator)
# A view of [ptr, ptr+nbytes): of our own buffer `root` (pinned; may be None) or of a
# foreign producer `owner` (kept alive).
cdef DeviceBuffer make_view(CUdeviceptr ptr, size_t nbytes, Device dev, CUstream h, object stream,
                            object owner, DeviceBuffer root)
# make_view of memory that a producer describes by address (a CAI dict, a foreign DLPack
# capsule; `producer` is kept alive). When [ptr, ptr+nbytes) lies in a live allocation
# of ours, the view pins its owner like any view (even an owner closed with its free
# deferred: that memory is still alive); one that starts inside it and runs past its
# end raises BufferError. Only the lifetime changes: the ordering stays the producer's
# (docs/interop.md's one rule). Linear in the number of live allocations.
cdef DeviceBuffer view_at(CUdeviceptr ptr, size_t nbytes, Device dev, CUstream h, object stream,
                          object producer)
cdef object oom_error(int rc, const char *call, size_t nbytes, Device dev, str extra)
cdef size_t checked_size(object n, str what) except? 0

