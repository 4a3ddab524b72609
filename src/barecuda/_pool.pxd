"""barecuda's stream-ordered caching allocator (MemoryPool), and what the other
allocators (_driver_pool, _pinned_pool) share with it."""
from cpython.ref cimport PyObject
from barecuda._abi cimport CUdeviceptr, CUstream, CUevent, CUcontext
from barecuda._buffer cimport Allocator, DeviceBuffer

cdef extern from "barecuda/bc_sizeclass.h" nogil:
    enum:
        BC_NCLASSES             # number of size classes
    # Class index and rounded size of n bytes (n > 0); -1 above 2**63.
    int bc_size_class(size_t n, size_t *rounded)


# (Whether a buffer's Stream was closed, and the stream to name for it: stream_closed and
# order_stream in _buffer.pxd, free_order in _driver_pool.pxd.)
# Before an ordered free of a buffer whose stream is gone: wait for the context, so
# that the free, ordered on the null stream, cannot overtake the buffer's work.
cdef int sync_for_closed(CUcontext ctx) except -1
# "1.5 MiB": byte counts in allocator messages.
cdef str fmt_bytes(object n)

cdef enum:
    FROM_GRAPH = 2              # bc_block.from_async of a block allocated during a capture (_graph reads it)

cdef struct bc_block:
    CUdeviceptr ptr
    size_t size                 # rounded size (what the driver gave us)
    size_t requested            # bytes the current user asked for
    int cls
    int from_async              # 1: cuMemAllocAsync (free with cuMemFreeAsync); 0: cuMemAlloc;
                                #   FROM_GRAPH: allocated during a capture (graph memory)
    CUstream stream             # the stream the block is ordered on
    CUevent event               # recorded lazily on `stream` when another stream wants it
    bc_block *next

cdef struct bc_scache:
    CUstream stream
    PyObject *stream_obj        # strong reference: the stream cannot die while blocks are cached on it
    size_t nblocks
    size_t nbytes
    bc_block *heads[BC_NCLASSES]

cdef class MemoryPool(Allocator):
    cdef bc_scache **caches
    cdef int ncaches
    cdef int capcaches
    cdef bc_scache *last
    cdef bc_scache *ready           # blocks reusable by any stream (all their work is known done)
    cdef bc_block *deferred         # freed after use on unknown other streams: reusable after a context sync
    cdef size_t deferred_bytes
    cdef size_t deferred_limit
    cdef size_t in_use
    cdef size_t in_use_rounded
    cdef size_t reserved
    cdef size_t cached
    cdef size_t peak_in_use
    cdef size_t peak_reserved
    cdef size_t limit               # 0: none
    cdef long long n_driver_alloc
    cdef long long n_driver_free
    cdef long long n_hits
    cdef long long n_misses
    cdef long long n_cross_stream
    cdef long long n_ctx_syncs
    cdef long long n_oom_retries
    cdef CUevent *events
    cdef int nevents
    cdef int capevents
    cdef bint use_async
    cdef bint closed
    cdef object __weakref__         # _live_pools holds weak references (a free-threaded close hook)

    cdef bc_scache *cache_for(self, CUstream s, object stream_obj) except NULL
    cdef int take_cross_stream(self, int cls, bc_scache *own, bc_block **out) except -1
    cdef int release_cached(self, bint sync_first) except -1
    cdef int flush_deferred(self) except -1
    cdef int free_block(self, bc_block *blk, CUstream s) except -1
    cdef void _drop_structures(self) noexcept
    cdef CUevent _get_event(self) except NULL
    cdef int _put_event(self, CUevent ev) except -1
    cdef bc_block *_new_block(self, int cls, size_t rounded, size_t size, CUstream s) except NULL
    cdef int _allocate_captured(self, DeviceBuffer buf, size_t size, CUstream s) except -1   # CUDA graphs
    cdef int _drop_idle_streams(self) except -1
    cdef int _drop_events(self) except -1
    cdef int _retire_stream(self, CUstream s) except -1   # stream close hook

