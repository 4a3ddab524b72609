"""Host<->device copies from ordinary (pageable) host memory at pinned speed.

Owns: the per-context stager (src/csrc/bc_staging.c, API in
include/barecuda/bc_staging.h: page-locked chunks, their events, a pool of memcpy
threads), its configuration and statistics, the C entry points ``staged_htod`` / ``staged_dtoh`` other modules call (see
_staging.pxd), and the Python-level ``copy_htod`` / ``copy_dtoh`` on raw device
addresses. (The benchmark's raw copy measurement, ``bench_copy``, lives in
src/barecuda/bench/_baseline.pyx and calls ``staged_htod`` / ``staged_dtoh``.)

Copies below the threshold (8 MiB unless configured) take the driver's plain path
unchanged. The GIL is released for the whole copy; the worker threads only memcpy.

Environment (read at import): ``BARECUDA_STAGING_THREADS``,
``BARECUDA_STAGING_CHUNK_BYTES``, ``BARECUDA_STAGING_CHUNKS``,
``BARECUDA_STAGING_THRESHOLD`` (byte sizes accept a K/M/G suffix).
"""

__all__ = ["configure_staging"]
import atexit
import operator
import os
import warnings

from libc.string cimport memset
from libc.stdint cimport uintptr_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_ERROR_INVALID_CONTEXT
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current
from barecuda._device cimport Device, device_of
from barecuda._stream cimport Stream, stream_handle
from barecuda._buffer cimport capture_use_t, capture_use_slot, captured_use, refuse_captured
from barecuda._host cimport find_pinned

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()
cdef capture_use_t *CAP = capture_use_slot()     # stream capture (see _buffer.pxd)

cdef extern from "barecuda/bc_staging.h" nogil:
    ctypedef struct bc_staging_config:
        size_t chunk_bytes
        int chunks
        int threads
        size_t threshold
        size_t min_piece
        size_t min_part
        int nt_htod
        int nt_dtoh
        long long spin_ns
    ctypedef struct bc_staging_counters:
        long long htod_plain, htod_plain_bytes
        long long dtoh_plain, dtoh_plain_bytes
        long long htod_staged, htod_staged_bytes
        long long dtoh_staged, dtoh_staged_bytes
        long long pinned_direct
        long long fallbacks
        long long chunk_waits
        long long builds
    ctypedef struct bc_stager
    enum: BC_STAGING_MAX_CHUNKS
    enum: BC_STAGING_MAX_THREADS
    enum: BC_STAGING_HAVE_NT
    CUcontext bc_stager_context(const bc_stager *s)
    void bc_staging_init()
    bc_stager *bc_stager_for(CUcontext ctx)
    CUresult bc_stager_htod(const bc_driver_t *drv, bc_stager *s, CUdeviceptr dst, const void *src,
                            size_t n, CUstream stream, const char **call)
    CUresult bc_stager_dtoh(const bc_driver_t *drv, bc_stager *s, void *dst, CUdeviceptr src,
                            size_t n, CUstream stream, int fresh, const char **call)
    CUresult bc_staging_plain_htod(const bc_driver_t *drv, CUdeviceptr dst, const void *src, size_t n,
                                   CUstream stream, const char **call)
    CUresult bc_staging_plain_dtoh(const bc_driver_t *drv, void *dst, CUdeviceptr src, size_t n,
                                   CUstream stream, const char **call)
    int bc_stager_release(const bc_driver_t *drv, bc_stager *s, int try_only, CUresult *rc)
    void bc_stager_counters(bc_stager *s, bc_staging_counters *sum, long long *pinned_bytes, int *threads)
    int bc_staging_count()
    bc_stager *bc_staging_at(int i)
    void bc_staging_get_config(bc_staging_config *out)
    void bc_staging_set_config(const bc_staging_config *cfg)
    size_t bc_staging_threshold()
    void bc_staging_global_counters(bc_staging_counters *sum)

bc_staging_init()


# ------------------------------------------------------------------ C entry points
cdef int _prepare(size_t n, CUcontext *ctx, bc_stager **stager) except -1 nogil:
    """Bind the copy's context (the current one when *ctx is NULL) and choose its path:
    *stager is the context's stager for a copy of n bytes at or over the threshold,
    else NULL (the driver's plain path)."""
    if not (ST.loaded and not ST.forked):
        with gil:
            ensure_driver(ST)
    if ctx[0] == NULL:
        check(D.cuCtxGetCurrent(ctx), b"cuCtxGetCurrent")
        if ctx[0] == NULL:
            check(CUDA_ERROR_INVALID_CONTEXT, b"cuCtxGetCurrent")   # nothing current
    else:
        set_current(ctx[0])
    stager[0] = bc_stager_for(ctx[0]) if n >= bc_staging_threshold() else NULL
    return 0


cdef int staged_htod(CUdeviceptr dst, const void *src, size_t n, CUstream stream,
                     CUcontext ctx) except -1 nogil:
    return _staged(True, dst, <void *>src, n, stream, ctx, False)


cdef int staged_dtoh(void *dst, CUdeviceptr src, size_t n, CUstream stream,
                     CUcontext ctx, bint fresh) except -1 nogil:
    return _staged(False, src, dst, n, stream, ctx, fresh)


cdef inline int _staged(bint htod, CUdeviceptr dev, void *host, size_t n, CUstream stream,
                        CUcontext ctx, bint fresh) except -1 nogil:
    """One pageable copy (see _staging.pxd): through this context's stager above the
    threshold, else the driver's plain copy."""
    cdef const char *call = b"cuMemcpyHtoDAsync" if htod else b"cuMemcpyDtoH"
    cdef CUresult rc
    cdef bc_stager *s = NULL
    if n == 0:
        return 0
    _prepare(n, &ctx, &s)
    if htod:
        rc = (bc_stager_htod(D, s, dev, host, n, stream, &call) if s != NULL
              else bc_staging_plain_htod(D, dev, host, n, stream, &call))
    else:
        rc = (bc_stager_dtoh(D, s, host, dev, n, stream, fresh, &call) if s != NULL
              else bc_staging_plain_dtoh(D, host, dev, n, stream, &call))
    return check(rc, call)


# ------------------------------------------------------------------ Python API
cdef int _context_for(object stream, object device, CUcontext *out) except -1:
    """The context a copy runs in: the Stream's, else the given (or current) device's."""
    cdef Device dev
    if type(stream) is Stream and device is None:
        out[0] = (<Stream>stream).ctx
        return 0
    dev = device_of(device)
    dev.activate()
    out[0] = dev.ctx
    return 0


def copy_htod(dev_ptr, host_obj, stream=None, *, device=None):
    """Copy a host buffer to device memory at ``dev_ptr``, staging through pinned chunks.

    Parameters
    ----------
    dev_ptr : int
        Device address of at least ``nbytes(host_obj)`` bytes.
    host_obj : buffer
        Any C-contiguous object with the buffer protocol (numpy array, bytes, ...).
    stream : Stream, int handle or None
        The copy is ordered on this stream (None: the legacy default stream).
    device : Device or int, optional
        Device whose context the copy runs in (default: the stream's, else the
        current device).

    Notes
    -----
    Returns once ``host_obj`` may be changed again; the device-side writes complete
    in stream order. A page-locked ``host_obj`` is copied asynchronously, as
    ``cuMemcpyHtoDAsync`` does: keep it unchanged until the stream reaches the copy.
    """
    cdef Py_buffer view
    cdef CUstream h
    cdef CUdeviceptr dst = dev_ptr
    cdef CUcontext ctx = NULL
    _context_for(stream, device, &ctx)
    stream_handle(stream, &h)
    if CAP[0] != NULL:
        p = find_pinned(host_obj)
        if p is None:
            refuse_captured(CAP, h, "copy_htod", "a copy from pageable host memory (staged, complete on return)")
        else:
            captured_use(CAP, h, p, None)       # dev_ptr is an address: the caller keeps it alive
    PyObject_GetBuffer(host_obj, &view, PyBUF_C_CONTIGUOUS)
    try:
        with nogil:
            staged_htod(dst, view.buf, <size_t>view.len, h, ctx)
    finally:
        PyBuffer_Release(&view)


def copy_dtoh(host_obj, dev_ptr, stream=None, *, device=None, fresh=False):
    """Copy device memory at ``dev_ptr`` into a writable host buffer; returns when it is written.

    Parameters
    ----------
    host_obj : writable buffer
        Any writable C-contiguous object with the buffer protocol; ``nbytes`` of it
        are filled.
    dev_ptr : int
        Device address of at least that many bytes.
    stream : Stream, int handle or None
        The copy starts after earlier work on this stream (None: legacy default stream).
    device : Device or int, optional
        As for :func:`copy_htod`.
    fresh : bool
        ``host_obj`` was just allocated and never written (``np.empty``): a large
        staged copy first faults its pages in with all staging threads, which is
        faster than one page fault at a time inside the copy. Its previous contents
        are lost either way; only say so for memory that is all about to be written.
    """
    cdef Py_buffer view
    cdef CUstream h
    cdef CUdeviceptr src = dev_ptr
    cdef bint fr = fresh
    cdef CUcontext ctx = NULL
    _context_for(stream, device, &ctx)
    stream_handle(stream, &h)
    refuse_captured(CAP, h, "copy_dtoh", "a copy to host memory that completes on return")
    PyObject_GetBuffer(host_obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
    try:
        with nogil:
            staged_dtoh(view.buf, src, <size_t>view.len, h, ctx, fr)
    finally:
        PyBuffer_Release(&view)


cdef dict _config_dict(const bc_staging_config *c):
    return {"chunk_bytes": c.chunk_bytes, "chunks": c.chunks, "threads": c.threads,
            "threshold": c.threshold, "min_piece": c.min_piece, "min_part": c.min_part,
            "nt_htod": bool(c.nt_htod), "nt_dtoh": bool(c.nt_dtoh), "spin_us": c.spin_ns / 1000.0}


def configure_staging(*, chunk_bytes=None, chunks=None, threads=None, threshold=None,
                      min_piece=None, min_part=None, nt_htod=None, nt_dtoh=None, spin_us=None):
    """Set how pageable host<->device copies are staged; returns the resulting settings.

    Public as ``barecuda.configure_staging``. Every argument is keyword-only; None
    (the default) leaves that setting unchanged, so ``configure_staging()`` just
    returns the current settings. The environment variables named in this module's
    docstring set the initial values at import.

    Parameters
    ----------
    chunk_bytes : int
        Size of each pinned chunk (default 8 MiB).
    chunks : int
        Number of chunks per device, 1 to 64 (default 8: 64 MiB page-locked per
        device while a stager exists); at most ``chunks`` DMAs are in flight while
        the host copies.
    threads : int
        Host threads sharing each memcpy, the calling thread included, 1 to 64
        (default ``min(12, max(2, 3 * cores // 4))``, never more than the usable cores).
    threshold : int
        Copies of fewer bytes take the driver's plain path (default 8 MiB).
    min_piece : int
        Smallest pipeline piece: a copy of only a few chunks is cut into ``chunks``
        pieces of at least this size so that memcpy and DMA still overlap (256 KiB).
    min_part : int
        Smallest share of a memcpy given to one thread (512 KiB).
    nt_htod, nt_dtoh : bool
        Do the host-side copy of that direction with streaming (non-temporal) stores,
        bypassing the cache (x86-64 only; ignored elsewhere). Defaults: off for
        host->device, on for device->host (why: docs/architecture.md, "Copies
        from pageable memory go through pinned chunks").
    spin_us : float
        After each piece of work the threads (and the caller waiting for them) spin
        this many microseconds before sleeping on a condition variable (default 50).
        Longer keeps them awake between the pieces of a copy whose DMAs are slower
        than the host side, at the cost of CPU time after the last piece.

    Returns
    -------
    dict
        ``chunk_bytes``, ``chunks``, ``threads``, ``threshold``, ``min_piece``,
        ``min_part`` (int), ``nt_htod``, ``nt_dtoh`` (bool), ``spin_us`` (float): the
        settings now in force. Passing it back as keywords restores them.

    Raises
    ------
    ValueError
        A value out of its range (nothing is changed then).

    Notes
    -----
    Existing stagers rebuild their chunks and threads at their next large copy.
    Settings are process-wide and thread-safe; a copy running concurrently finishes
    with the settings it started with.
    """
    cdef bc_staging_config c
    bc_staging_get_config(&c)
    ints = {"chunk_bytes": chunk_bytes, "chunks": chunks, "threads": threads, "threshold": threshold,
            "min_piece": min_piece, "min_part": min_part}
    if all(v is None for v in (*ints.values(), nt_htod, nt_dtoh, spin_us)):
        return _config_dict(&c)
    cdef dict fields = c            # the C struct's fields by name (Cython converts both ways)
    for name, lo, hi in _INT_RANGES:
        if ints[name] is not None:
            fields[name] = _setting(name, _integer(name, ints[name]), lo, hi)
    if spin_us is not None:
        fields["spin_ns"] = <long long>(_setting("spin_us", spin_us, 0, 1_000_000) * 1000)
    for name, on in (("nt_htod", nt_htod), ("nt_dtoh", nt_dtoh)):
        if on is not None:
            fields[name] = 1 if (on and BC_STAGING_HAVE_NT) else 0
    c = fields
    bc_staging_set_config(&c)
    return _config_dict(&c)


# configure_staging's integer settings: (name, lowest, highest or None for no bound)
_INT_RANGES = (("chunk_bytes", 1, None), ("chunks", 1, BC_STAGING_MAX_CHUNKS), ("threads", 1, BC_STAGING_MAX_THREADS),
               ("threshold", 0, None), ("min_piece", 1, None), ("min_part", 1, None))


_SIZE_MAX = (1 << 64) - 1


def _integer(name, value):
    """An integer setting as an int: a float (``chunk_bytes=1.5``) or a bool is a TypeError,
    not silently truncated; anything with ``__index__`` (numpy integers) is accepted."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None


def _setting(name, value, lo, hi):
    """configure_staging's check of one setting: value within lo..hi (hi None: no upper
    bound), else ValueError naming it."""
    if hi is not None and not lo <= value <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {value}")
    if value < lo:
        raise ValueError(f"{name} must be {'positive' if lo == 1 else f'>= {lo}'}, got {value}")
    if value > _SIZE_MAX:                            # the settings without a bound are size_t fields
        raise ValueError(f"{name} must be at most {_SIZE_MAX}, got {value}")
    return value


# The former private name, still used by src/barecuda/bench (memory_rows.py,
# staging_sweep.py); new code calls barecuda.configure_staging.
configure = configure_staging


def stats():
    """Counters since import and what the stagers hold now.

    Returns
    -------
    dict
        ``htod_plain``/``dtoh_plain`` (copies below the threshold) and their
        ``_bytes``; ``htod_staged``/``dtoh_staged`` and their ``_bytes``;
        ``pinned_direct`` (host side already page-locked: no staging);
        ``fallbacks`` (chunks could not be allocated: plain path taken);
        ``chunk_waits`` (a chunk's previous DMA was still running when needed);
        ``builds`` (chunk sets allocated); ``stagers`` (contexts seen);
        ``pinned_bytes`` and ``worker_threads`` held now; ``config``.
    """
    cdef bc_staging_counters c
    cdef bc_staging_config cfg
    cdef long long pinned = 0
    cdef int threads = 0, i, n
    cdef bc_stager *s
    memset(&c, 0, sizeof(c))
    bc_staging_global_counters(&c)
    n = bc_staging_count()
    with nogil:
        for i in range(n):
            s = bc_staging_at(i)
            if s != NULL:
                bc_stager_counters(s, &c, &pinned, &threads)
    bc_staging_get_config(&cfg)
    return {
        "htod_plain": c.htod_plain, "htod_plain_bytes": c.htod_plain_bytes,
        "dtoh_plain": c.dtoh_plain, "dtoh_plain_bytes": c.dtoh_plain_bytes,
        "htod_staged": c.htod_staged, "htod_staged_bytes": c.htod_staged_bytes,
        "dtoh_staged": c.dtoh_staged, "dtoh_staged_bytes": c.dtoh_staged_bytes,
        "pinned_direct": c.pinned_direct, "fallbacks": c.fallbacks,
        "chunk_waits": c.chunk_waits, "builds": c.builds,
        "stagers": n, "pinned_bytes": pinned, "worker_threads": threads,
        "config": _config_dict(&cfg),
    }


cdef int _release_all(bint try_only) except -1:
    """Free every stager's chunks, events and threads (they return on next use)."""
    cdef int i, n = bc_staging_count()
    cdef bc_stager *s
    cdef CUresult rc = 0, first = 0
    cdef const char *call = b"cuEventSynchronize"
    for i in range(n):
        s = bc_staging_at(i)
        if s == NULL:
            continue
        set_current(bc_stager_context(s))
        with nogil:
            if bc_stager_release(D, s, try_only, &rc) == 0 and rc != 0 and first == 0:
                first = rc
    if not try_only:
        check(first, call)
    return 0


def release():
    """Free the pinned chunks, events and worker threads of every device now.

    They are created again by the next large copy. Waits for the DMAs that still
    use a chunk.
    """
    if bc_driver_usable(ST):
        _release_all(False)


def _on_exit():
    # Registered after _loader's own exit hook, so it runs first, while the driver
    # is still usable. A stager held by a copy in another thread is leaked.
    if bc_driver_usable(ST):
        try:
            _release_all(True)
        except Exception:   # noqa: BLE001 - nothing to report to at exit
            pass


atexit.register(_on_exit)


# ------------------------------------------------------------------ environment
def _env_size(name):
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    last = len(value) - 1
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(value[last].lower(), 1)
    try:
        n = int(value[:last] if mult > 1 else value, 0) * mult
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        warnings.warn(f"{name}={value!r} is not a size in bytes; ignored", RuntimeWarning)
        return None


def _usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _configure_from_env():
    threads = _env_size("BARECUDA_STAGING_THREADS")
    chunks = _env_size("BARECUDA_STAGING_CHUNKS")
    if threads is None:
        # Three threads per four cores, at most 12: the rest is left to the caller's
        # other threads and the driver's own (why these numbers: docs/architecture.md,
        # "Copies from pageable memory go through pinned chunks").
        cores = _usable_cores()
        threads = min(12, max(2, cores * 3 // 4), cores)
    try:
        configure_staging(threads=max(1, min(threads, BC_STAGING_MAX_THREADS)),
                          chunks=None if chunks is None else max(1, min(chunks, BC_STAGING_MAX_CHUNKS)),
                          chunk_bytes=_env_size("BARECUDA_STAGING_CHUNK_BYTES") or None,
                          threshold=_env_size("BARECUDA_STAGING_THRESHOLD"))
    except ValueError as e:
        warnings.warn(f"barecuda staging environment ignored: {e}", RuntimeWarning)


_configure_from_env()
