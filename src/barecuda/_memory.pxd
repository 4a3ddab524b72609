"""Device and pinned memory. Only the fields the launch path reads are part of the
contract with other modules: ptr, size, stream_handle, used_elsewhere."""
from barecuda._abi cimport CUdeviceptr, CUstream, CUcontext, CUevent
from barecuda._device cimport Device

# DeviceBuffer._kind
cdef enum:
    KIND_ASYNC = 0      # owned, from cuMemAllocAsync (freed with cuMemFreeAsync)
    KIND_SYNC = 1       # owned, from cuMemAlloc (freed with cuMemFree), or empty
    KIND_VIEW = 2       # foreign memory; never freed by us
    KIND_CLOSED = 3     # close() ran
    KIND_POOL = 4       # owned by a caching allocator (_pool); _block is its bookkeeping
    KIND_MANAGED = 5    # cuMemAllocManaged (freed with cuMemFree)

cdef class DeviceBuffer:
    cdef CUdeviceptr ptr
    cdef size_t size                # bytes (the Python-level `size` property is the element count)
    cdef CUstream stream_handle     # stream the memory is ordered on (alloc / free)
    cdef bint used_elsewhere        # work on another stream referenced it: free must wait for all
    cdef readonly Device device
    cdef CUcontext ctx
    cdef object _stream             # Stream object kept alive while the buffer lives
    cdef object _owner              # producer / parent kept alive by views; None when we own the memory
    cdef object _allocator          # allocator the memory goes back to, None for views
    cdef object _shape
    cdef object _dtype
    cdef int _kind                  # see _memory.pyx
    # -- memory-module private below
    cdef void *_block               # allocator's bookkeeping for this block (caching allocator)
    cdef size_t _itemsize
    cdef object __weakref__

    cdef int _release(self) except -1
    cdef int _check_open(self) except -1


cdef class Allocator:
    """Where DeviceBuffer memory comes from and goes back to (subclassed by _pool)."""
    cdef readonly Device device
    cdef CUcontext ctx
    # Fill b.ptr / b.size / b._block for `size` bytes ordered on stream s (b.stream_handle
    # is already set). Must leave b.ptr == 0 on failure.
    cdef int allocate(self, DeviceBuffer b, size_t size, CUstream s) except -1
    # Give b's memory back; never called twice for one allocation. May be called from
    # a destructor: the caller turns an exception into a CudaWarning.
    cdef int deallocate(self, DeviceBuffer b) except -1


cdef class PinnedBuffer:
    cdef void *ptr
    cdef size_t nbytes_
    cdef readonly Device device
    cdef CUcontext ctx
    cdef CUdeviceptr dptr           # device address when mapped, else 0
    cdef unsigned int flags
    cdef bint _closed
    cdef Py_ssize_t _exports        # live buffer-protocol views
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]
    cdef CUevent _last_use          # recorded after async copies that used this memory
    cdef object _pool               # pinned pool the block goes back to (None: cuMemFreeHost)
    cdef object __weakref__

    cdef int note_async_use(self, CUstream s) except -1
    cdef int _free(self) except -1


# The allocator bc.alloc/empty/... use for `ordinal` (created on first use).
cdef Allocator default_allocator(int ordinal)
# A fresh DeviceBuffer of nbytes on (device, stream) from `allocator` (None: default).
cdef DeviceBuffer new_buffer(size_t nbytes, object device, object stream, object allocator)

# A PinnedBuffer over pooled pinned memory, handed back via pool._give_back(ptr, n, dptr, event).
cdef PinnedBuffer pinned_from_block(void *p, size_t n, Device dev, CUdeviceptr dptr, unsigned int flags,
                                    object pool)

cdef inline void note_use(DeviceBuffer b, CUstream s) noexcept nogil:
    """Record that queued work on stream s uses b (cheap; called per launch argument)."""
    if b.stream_handle != s:
        b.used_elsewhere = 1
