"""The allocators that leave caching to the driver, and the free rule of driver memory
(see _driver_pool.pyx)."""
from barecuda._abi cimport CUmemoryPool, CUstream, CUcontext, CUresult
from barecuda._buffer cimport Allocator, DeviceBuffer


cdef class DriverMemoryPool(Allocator):
    cdef CUmemoryPool pool
    cdef bint owned
    cdef long long n_allocs
    cdef unsigned long long _attr(self, int a) except? 0

# For an allocator's stream-ordered free of b (cuMemFreeAsync): the stream to order it
# on (order_stream), after waiting for the whole context when b's Stream was closed or
# work on another stream used it (used_elsewhere).
# The allocate of every allocator on a driver pool (cuMemAllocFromPoolAsync on s, kind
# `kind`, nothing for size 0); the driver's answer in rc, for the caller to word.
cdef int pool_alloc(DeviceBuffer b, size_t size, CUmemoryPool pool, CUcontext ctx, CUstream s, int kind,
                    CUresult *rc) except -1
cdef int free_order(DeviceBuffer b, CUstream *out) except -1
# An allocator's deallocate for memory the driver hands out stream-ordered
# (cuMemAllocAsync, cuMemAllocFromPoolAsync): takes b.ptr (leaves 0) and frees it with
# cuMemFreeAsync on free_order's stream. Nothing to do for b.ptr == 0. While a
# barecuda capture runs: a graph allocation is freed in its stream's order (a free node
# when that stream captures), anything else after the last capture ends.
cdef int free_async(DeviceBuffer b) except -1
# The same for memory from cuMemAlloc: cuMemFree (which waits for the device) without
# the GIL; after the last capture ends while a barecuda capture runs.
cdef int free_sync(DeviceBuffer b) except -1
# b gets stream-ordered memory on s: mark it a graph allocation (_graph_alloc) when s is
# capturing in a barecuda capture (then captures do not hold it).
cdef void note_graph_alloc(DeviceBuffer b, CUstream s) noexcept
# When the last barecuda capture has ended (_capture, only while ST.capture_frees counts
# any): the frees free_async/free_sync put aside during the captures, after one context
# synchronization. Never raises: failures become CudaWarning.
cdef void flush_capture_frees() noexcept
