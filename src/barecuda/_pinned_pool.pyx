"""PinnedMemoryPool: a cache of page-locked host memory.

Owns: PinnedMemoryPool, the C-level pinned allocator (_host.PinnedAllocator) behind
``pool.empty()``: PinnedBuffers whose close hands the memory back here. Blocks are
rounded to the device caching allocator's size classes (bc_sizeclass.h) and reused
only after the copies that used them completed (cuEventQuery, no blocking).
"""

__all__ = ["PinnedMemoryPool"]
cimport cython
import warnings

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable
from barecuda._loader cimport driver_table, runtime_state, ensure_driver
from barecuda._device cimport Device, device_of
from barecuda._host cimport PinnedAllocator, PinnedBuffer, pinned_from_block
from barecuda._pool cimport bc_size_class, fmt_bytes
from barecuda._buffer cimport checked_size
from barecuda._errors import CudaWarning, make_error

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()


@cython.final
cdef class PinnedMemoryPool(PinnedAllocator):
    """A cache of page-locked host memory: ``pool.empty(nbytes)`` gives a PinnedBuffer
    whose ``close()`` (or drop) hands the memory back here instead of to the driver.
    A block is reused only after the asynchronous copies that used it have completed
    (the event each PinnedBuffer records after an async copy; ``cuEventQuery``, no
    blocking). Sizes are rounded to the same classes as MemoryPool.

    Parameters
    ----------
    device : Device or int, optional
    portable, mapped, write_combined : bool
        As for PinnedBuffer.
    """
    cdef dict free_blocks           # rounded size -> list of (ptr, dptr, event)
    cdef unsigned int flags
    cdef size_t reserved
    cdef size_t in_use
    cdef size_t cached
    cdef long long n_driver
    cdef long long n_hits
    cdef long long n_busy

    def __cinit__(self, device=None, *, bint portable=True, bint mapped=False, bint write_combined=False):
        ensure_driver(ST)
        cdef Device dev = device_of(device)
        dev.activate()
        self.device = dev
        self.free_blocks = {}
        self.flags = ((CU_MEMHOSTALLOC_PORTABLE if portable else 0) | (CU_MEMHOSTALLOC_DEVICEMAP if mapped else 0)
                      | (CU_MEMHOSTALLOC_WRITECOMBINED if write_combined else 0))

    def __dealloc__(self):
        if self.free_blocks and bc_driver_usable(ST):
            try:
                self.trim()
            except BaseException as e:
                warnings.warn(f"releasing PinnedMemoryPool memory failed: {e}", CudaWarning)

    def empty(self, nbytes):
        """A PinnedBuffer of ``nbytes`` from the pool."""
        cdef size_t rounded = 0
        cdef void *p = NULL
        cdef CUdeviceptr dp = 0
        cdef CUevent ev = NULL
        cdef CUresult rc
        cdef size_t n = checked_size(nbytes, "nbytes")
        cdef PinnedBuffer b
        cdef size_t i
        if n == 0:
            return PinnedBuffer(0, device=self.device)
        if bc_size_class(n, &rounded) < 0:
            raise OverflowError(f"cannot allocate {n} bytes of pinned memory (above 2**63)")
        self.device.activate()
        lst = self.free_blocks.get(rounded)
        found = None
        if lst:
            for i in range(len(lst) - 1, -1, -1):
                ev = <CUevent><size_t>lst[i][2]
                if ev == NULL or D.cuEventQuery(ev) == 0:
                    found = lst.pop(i)
                    break
                self.n_busy += 1
        if found is not None:
            p = <void *><size_t>found[0]
            dp = found[1]
            self.cached -= rounded
            self.n_hits += 1
        else:
            ev = NULL
            with nogil:
                rc = D.cuMemHostAlloc(&p, rounded, self.flags)
            if rc != 0:
                self.trim()
                with nogil:
                    rc = D.cuMemHostAlloc(&p, rounded, self.flags)
                if rc != 0:
                    raise make_error(rc, "cuMemHostAlloc",
                                     f"PinnedMemoryPool could not allocate {n} bytes ({fmt_bytes(n)}); "
                                     f"pool stats: {self.stats()}")
            if self.flags & CU_MEMHOSTALLOC_DEVICEMAP:
                rc = D.cuMemHostGetDevicePointer(&dp, p, 0)
                if rc != 0:
                    D.cuMemFreeHost(p)
                    check(rc, b"cuMemHostGetDevicePointer")
            self.reserved += rounded
            self.n_driver += 1
        b = pinned_from_block(p, n, self.device, dp, self.flags, self)
        b._last_use = ev              # completed (or NULL): reused for the next record
        self.in_use += rounded
        return b

    def array(self, shape, dtype="uint8"):
        """A numpy array over a PinnedBuffer from the pool (like ``pinned_empty``)."""
        import numpy as np
        dt = np.dtype(dtype)
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        count = 1
        for k in shp:
            count *= k
        buf = self.empty(count * dt.itemsize)
        return np.frombuffer(buf, dtype=dt, count=count).reshape(shp)

    cdef int give_back(self, void *p, size_t n, CUdeviceptr dptr, CUevent ev) except -1:
        cdef size_t rounded = 0
        bc_size_class(n, &rounded)
        self.free_blocks.setdefault(rounded, []).append((<size_t>p, dptr, <size_t>ev))
        self.in_use -= rounded
        self.cached += rounded
        return 0

    def trim(self):
        """Free every cached block (waiting for the copies still using one)."""
        cdef CUevent ev
        cdef CUresult rc
        cdef void *p
        self.device.activate()
        blocks = self.free_blocks
        self.free_blocks = {}
        err = None
        for rounded, lst in blocks.items():
            for ptr, dptr, event in lst:
                ev = <CUevent><size_t>event
                p = <void *><size_t>ptr
                if ev != NULL:
                    with nogil:
                        D.cuEventSynchronize(ev)
                    D.cuEventDestroy(ev)
                rc = D.cuMemFreeHost(p)
                self.reserved -= rounded
                self.cached -= rounded
                if rc != 0 and err is None:
                    err = make_error(rc, "cuMemFreeHost")
        if err is not None:
            raise err

    def stats(self):
        """``in_use``, ``reserved``, ``cached`` (bytes, rounded), ``driver_allocations``,
        ``cache_hits``, ``busy_skips`` (cached blocks passed over: copy still running)."""
        return {"in_use": self.in_use, "reserved": self.reserved, "cached": self.cached,
                "driver_allocations": self.n_driver, "cache_hits": self.n_hits, "busy_skips": self.n_busy}

    def __repr__(self):
        return f"<barecuda.PinnedMemoryPool reserved={fmt_bytes(self.reserved)} in_use={fmt_bytes(self.in_use)}>"
