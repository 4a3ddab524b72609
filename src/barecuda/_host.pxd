"""Page-locked host memory (see _host.pyx)."""
from barecuda._abi cimport CUdeviceptr, CUstream, CUcontext, CUevent, CUresult
from barecuda._device cimport Device

cdef class PinnedAllocator:
    """A pinned-memory cache (barecuda._pinned_pool.PinnedMemoryPool implements it)."""
    cdef readonly Device device
    """The Device whose context the cache allocates in."""
    # Take back n bytes at p (device address dptr when mapped) that a PinnedBuffer from
    # this cache used; ev (may be NULL) completes when the last async copy that used the
    # memory is done: reuse only after it. Called at most once per block.
    cdef int give_back(self, void *p, size_t n, CUdeviceptr dptr, CUevent ev) except -1


cdef class PinnedBuffer:
    cdef void *ptr
    cdef size_t nbytes_
    cdef readonly Device device
    """The Device whose context allocated the memory."""
    cdef CUcontext ctx
    cdef CUdeviceptr dptr           # device address when mapped, else 0
    cdef unsigned int flags
    cdef bint _closed
    cdef Py_ssize_t _exports        # live buffer-protocol views
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]
    cdef CUevent _last_use          # recorded after async copies that used this memory
    cdef PinnedAllocator _pool      # pinned cache the block goes back to (None: cuMemFreeHost)
    cdef Py_ssize_t _pins           # graphs holding it (hold_host); close() defers the free while > 0
    cdef bint _free_pending         # closed while pinned: the last unpin frees
    cdef bint _graph_held           # a graph held it once: the free waits for the context first
    cdef object __weakref__

    cdef void _set_block(self, void *p, size_t n, CUdeviceptr dptr, unsigned int flags) noexcept
    cdef int note_async_use(self, CUstream s) except -1
    cdef int _unguarded(self, CUstream s, CUresult rc, const char *call) except -1
    cdef int _free(self) except -1


# A small object that pins p while it lives (graphs hold one per PinnedBuffer a node
# copies to or from): p.close() then defers the free to the last holder, and the free
# waits for the context (a launched graph may still copy). Raises ValueError if p is closed.
cdef object hold_host(PinnedBuffer p)
# A PinnedBuffer over memory a pinned cache owns (given back to `pool` on close).
cdef PinnedBuffer pinned_from_block(void *p, size_t n, Device dev, CUdeviceptr dptr, unsigned int flags,
                                    PinnedAllocator pool)
# Host buffer of obj (C-contiguous; writable when asked): clear TypeError/ValueError otherwise.
cdef int get_host(object obj, Py_buffer *view, bint writable) except -1
# The PinnedBuffer under obj (itself, a memoryview of it, a numpy view of it...), or None.
cdef PinnedBuffer find_pinned(object obj)
