"""Pageable host<->device copies through pinned chunks (src/csrc/bc_staging.c).

Both functions make ctx current on the calling thread, need no GIL, and raise a
CudaError through check() on failure. ``n`` below the staging threshold takes the
driver's plain path, so they can be called for every copy size.
"""
from barecuda._abi cimport CUdeviceptr, CUstream, CUcontext

# Host->device from pageable (or any) host memory. Returns when the caller may
# reuse src: the bytes are in pinned chunks or already on the device; the DMAs
# complete in order on `stream` (NULL: the legacy default stream). A page-locked
# src is copied directly and asynchronously, as cuMemcpyHtoDAsync does.
cdef int staged_htod(CUdeviceptr dst, const void *src, size_t n, CUstream stream,
                     CUcontext ctx) except -1 nogil

# Device->host into pageable (or any) host memory, ordered after earlier work on
# `stream`. Returns when dst is fully written (synchronous, like cuMemcpyDtoH).
# `fresh`: dst was just allocated and never touched, and every byte of it is about
# to be written: its pages are faulted in by all staging threads first.
cdef int staged_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream stream,
                     CUcontext ctx, bint fresh) except -1 nogil
