"""Device and pinned memory. Only the fields the launch path reads are part of the
contract with other modules: ptr, size, stream_handle, used_elsewhere."""
from barecuda._abi cimport CUdeviceptr, CUstream, CUcontext
from barecuda._device cimport Device

cdef class DeviceBuffer:
    cdef CUdeviceptr ptr
    cdef size_t size
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

cdef inline void note_use(DeviceBuffer b, CUstream s) noexcept nogil:
    """Record that queued work on stream s uses b (cheap; called per launch argument)."""
    if b.stream_handle != s:
        b.used_elsewhere = 1
