"""An allocator on a driver memory pool (see _driver_pool.pyx)."""
from barecuda._abi cimport CUmemoryPool
from barecuda._buffer cimport Allocator


cdef class DriverMemoryPool(Allocator):
    cdef CUmemoryPool pool
    cdef bint owned
    cdef long long n_allocs
    cdef unsigned long long _attr(self, int a) except? 0
