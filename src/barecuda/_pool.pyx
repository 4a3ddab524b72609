"""The caching device-memory allocator.

Owns: MemoryPool (barecuda's stream-ordered caching allocator, the default behind
alloc/empty/zeros/to_device), the module functions memory_stats/trim_memory, and
the stream-close and capture hooks every allocator shares (sync_for_closed;
whether a buffer's stream was closed: _buffer.pxd's stream_closed/order_stream). Elsewhere: DriverMemoryPool (on a driver memory pool) in
_driver_pool.pyx, PinnedMemoryPool in _pinned_pool.pyx, the size classes in
include/barecuda/bc_sizeclass.h.

MemoryPool, how it works:
- Sizes are rounded to a size class (bc_sizeclass.h): 512-byte multiples up to 8 KiB,
  then 16 classes per power of two (at most 6.25% rounding). A block is only ever reused for its own
  class: no splitting, so no fragmentation beyond the rounding.
- Every stream has its own cache (one C free list per class). A freed block goes to
  the cache of the stream it is ordered on at once: work queued later on that stream
  runs after the work that used it, so the stream may reuse it immediately.
- Another stream reuses a cached block only after an event recorded on the owning
  stream (lazily: the first time another stream looks at the block) has completed,
  checked with cuEventQuery; nothing blocks.
- A block the launch path saw used on another stream (``used_elsewhere``) cannot be
  given back to any one stream: it waits in a deferred list until a context
  synchronization (done when the deferred bytes pass ``deferred_limit``, at trim(),
  and before giving up on an allocation) proves all work is done.
- Blocks come from cuMemAllocAsync on the requesting stream (cuMemAlloc without driver
  pools). Out of memory (or over ``limit``): give every cached block back, wait for
  deferred frees, retry once, then raise CudaOutOfMemoryError naming the requested
  size and the pool's statistics.
- A stream with cached blocks is kept alive by the pool (its handle cannot be reused
  by a new stream while we rely on its ordering); trim() lets it go.
- Closing a stream (Stream.close() or its destructor) runs _on_stream_close (a
  _stream.add_close_hook hook) while the stream still exists: every pool moves the
  blocks cached on it to the deferred list (reusable after a context synchronization),
  so nothing is ever ordered on a destroyed stream. A live buffer that outlives its
  closed Stream is freed the same safe way when it goes: a MemoryPool block is
  deferred; a driver-ordered free (cuMemFreeAsync) waits for the context and is
  ordered on the null stream instead (sync_for_closed below; _driver_pool.pxd's
  free_order for the other allocators).

The hot path (cached block, same stream) is a few C operations with the GIL held:
no driver call, no dict, no allocation besides the DeviceBuffer (a freelist).
"""

__all__ = ["MemoryPool", "memory_stats", "trim_memory"]
cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdlib cimport calloc, free, realloc
import os
import warnings
import weakref

from barecuda._abi cimport *
from barecuda._errors cimport check, bc_state_t, bc_driver_usable, CUDA_ERROR_OUT_OF_MEMORY, \
    CUDA_ERROR_NOT_SUPPORTED
from barecuda._loader cimport driver_table, runtime_state, ensure_driver, set_current, require
from barecuda._device cimport Device, device_of
from barecuda._buffer cimport (Allocator, DeviceBuffer, KIND_POOL, stream_closed, order_stream, capture_use_t,
                               capture_use_slot)
from barecuda._errors import CudaWarning, make_error
from barecuda import _allocators

cdef bc_driver_t *D = driver_table()
cdef bc_state_t *ST = runtime_state()

cdef CUstream READY_STREAM = <CUstream>(<size_t>-1)   # key of the "any stream" cache

# -- Stream close (see the module notes). Live MemoryPools by address, as weak references
# (each removes itself first thing in __dealloc__), for the close hook: a weak reference,
# not a borrowed pointer, because on a free-threaded build a pool may die on another
# thread while a stream's close hook walks this table.
_live_pools = {}


cdef int sync_for_closed(CUcontext ctx) except -1:
    """Before an ordered free of a buffer whose stream is gone: wait for the context,
    so that the free, ordered on the null stream, cannot overtake the buffer's work."""
    cdef CUresult rc
    set_current(ctx)
    with nogil:
        rc = D.cuCtxSynchronize()
    check(rc, b"cuCtxSynchronize")
    return 0


def _pools():
    """Every live MemoryPool (for leak checks: tools/gpu_leak_plugin.py trims them all)."""
    return [<object><PyObject *><size_t>addr for addr in list(_live_pools)]


def _on_stream_close(handle):
    """Stream close hook: every MemoryPool defers the blocks cached on the stream."""
    cdef CUstream s = <CUstream><size_t>handle
    cdef MemoryPool pool
    if not _live_pools:                  # none, or module teardown
        return
    for ref in list(_live_pools.values()):
        # Checked again at each step: a decref in the previous step may have freed it.
        obj = ref()
        if obj is not None:
            pool = <MemoryPool>obj
            pool._retire_stream(s)


from barecuda import _stream as _stream_mod
_stream_mod.add_close_hook(_on_stream_close)

# -- CUDA graphs: stream capture. While a barecuda capture runs (graph._capture fills
# _buffer's capture slot, CAP: non-NULL exactly then), allocations on a capturing
# stream bypass the cache: they are cuMemAllocAsync (graph allocation nodes) and their
# frees cuMemFreeAsync, so no cached block is handed to captured work and no block the
# graph allocated is reused by the cache; blocks freed during a capture on the capturing
# stream are deferred (reusable only after a context-wide sync). The driver is asked
# (cuStreamIsCapturing) only while a capture runs, and only in these two paths.
cdef capture_use_t *CAP = capture_use_slot()


cdef bint _capturing(CUstream s) noexcept nogil:
    cdef CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE
    if D.cuStreamIsCapturing == NULL or s == NULL or s == READY_STREAM:
        return False
    if D.cuStreamIsCapturing(s, &st) != 0:
        return False
    return st != CU_STREAM_CAPTURE_STATUS_NONE


def _size_class(n):
    """(class, rounded size) for n bytes: exposed for tests."""
    cdef size_t r = 0
    cdef int c = bc_size_class(n, &r)
    return c, r


cdef str fmt_bytes(object n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024


@cython.final
cdef class MemoryPool(Allocator):
    """A stream-ordered caching allocator for one device (see the module notes).

    Parameters
    ----------
    device : Device or int, optional
    limit : int, optional
        Most bytes the pool may hold from the driver (in use + cached); None: no limit.
    deferred_limit : int
        Bytes of cross-stream frees allowed to wait for a context synchronization
        before one is forced (default 256 MiB).

    Use it with ``bc.empty(..., allocator=pool)`` / ``pool.alloc(n)``, or make it the
    device default with ``bc.set_allocator(pool)``.
    """

    def __cinit__(self, device=None, *, limit=None, deferred_limit=256 << 20):
        ensure_driver(ST)
        cdef Device dev = device_of(device)
        dev.activate()
        self.device = dev
        self.ctx = dev.ctx
        self.use_async = D.cuMemAllocAsync != NULL and D.cuMemFreeAsync != NULL
        self.limit = 0 if limit is None else limit
        self.deferred_limit = deferred_limit
        self.capcaches = 8
        self.caches = <bc_scache **>calloc(self.capcaches, sizeof(bc_scache *))
        self.ready = <bc_scache *>calloc(1, sizeof(bc_scache))
        if self.caches == NULL or self.ready == NULL:
            raise MemoryError()
        self.ready.stream = READY_STREAM
        _live_pools[<size_t><PyObject *>self] = weakref.ref(self)

    def __dealloc__(self):
        # Only reached when no buffer uses the pool any more (each holds a reference).
        _live_pools.pop(<size_t><PyObject *>self, None)
        if self.caches == NULL:
            return
        if not self.closed and bc_driver_usable(ST):
            try:
                self.release_cached(True)
            except BaseException as e:
                warnings.warn(f"releasing MemoryPool memory failed: {e}", CudaWarning)
        self._drop_structures()

    cdef void _drop_structures(self) noexcept:
        cdef int i, n
        cdef bc_block *b
        cdef bc_block *nb
        cdef int c
        cdef bc_scache **caches = self.caches
        cdef PyObject *obj
        n = self.ncaches
        self.caches = NULL            # detached first: a stream's close hook finds nothing
        self.ncaches = 0
        self.last = NULL
        for i in range(n):
            for c in range(BC_NCLASSES):
                b = caches[i].heads[c]
                while b != NULL:              # leaked on purpose (driver unusable)
                    nb = b.next
                    free(b)
                    b = nb
            obj = caches[i].stream_obj
            free(caches[i])
            Py_XDECREF(obj)
        free(caches)
        if self.ready != NULL:
            for c in range(BC_NCLASSES):
                b = self.ready.heads[c]
                while b != NULL:
                    nb = b.next
                    free(b)
                    b = nb
            free(self.ready)
            self.ready = NULL
        b = self.deferred
        while b != NULL:
            nb = b.next
            free(b)
            b = nb
        self.deferred = NULL
        if bc_driver_usable(ST):
            for i in range(self.nevents):
                D.cuEventDestroy(self.events[i])
        free(self.events)
        self.events = NULL
        self.nevents = 0

    # ---------------------------------------------------------------- caches
    cdef bc_scache *cache_for(self, CUstream s, object stream_obj) except NULL:
        cdef bc_scache *c = self.last
        cdef int i
        if c != NULL and c.stream == s:
            return c
        for i in range(self.ncaches):
            c = self.caches[i]
            if c.stream == s:
                self.last = c
                return c
        if self.ncaches == self.capcaches:
            newp = <bc_scache **>realloc(self.caches, 2 * self.capcaches * sizeof(bc_scache *))
            if newp == NULL:
                raise MemoryError()
            self.caches = newp
            self.capcaches *= 2
        c = <bc_scache *>calloc(1, sizeof(bc_scache))
        if c == NULL:
            raise MemoryError()
        c.stream = s
        if stream_obj is not None:
            Py_INCREF(stream_obj)
            c.stream_obj = <PyObject *>stream_obj
        self.caches[self.ncaches] = c
        self.ncaches += 1
        self.last = c
        return c

    cdef CUevent _get_event(self) except NULL:
        cdef CUevent ev = NULL
        if self.nevents:
            self.nevents -= 1
            return self.events[self.nevents]
        check(D.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), b"cuEventCreate")
        return ev

    cdef int _put_event(self, CUevent ev) except -1:
        if ev == NULL:
            return 0
        if self.nevents == self.capevents:
            newp = <CUevent *>realloc(self.events, (self.capevents * 2 + 16) * sizeof(CUevent))
            if newp == NULL:
                D.cuEventDestroy(ev)
                return 0
            self.events = newp
            self.capevents = self.capevents * 2 + 16
        self.events[self.nevents] = ev
        self.nevents += 1
        return 0

    cdef int take_cross_stream(self, int cls, bc_scache *own, bc_block **out) except -1:
        """In out: a cached block of class cls that another stream has finished with, or NULL."""
        cdef bc_block *b
        cdef bc_block *prev
        cdef bc_scache *c
        cdef int i, tries
        cdef CUresult rc
        b = self.ready.heads[cls]
        if b != NULL:
            self.ready.heads[cls] = b.next
            self.ready.nblocks -= 1
            self.ready.nbytes -= b.size
            out[0] = b
            return 0
        for i in range(self.ncaches):
            c = self.caches[i]
            if c == own or c.heads[cls] == NULL:
                continue
            prev = NULL
            b = c.heads[cls]
            tries = 0
            while b != NULL and tries < 4:
                if b.event == NULL:
                    # Everything queued on c.stream now includes the block's last use.
                    b.event = self._get_event()
                    rc = D.cuEventRecord(b.event, c.stream)
                    if rc != 0:
                        self._put_event(b.event)
                        b.event = NULL
                elif D.cuEventQuery(b.event) == 0:
                    if prev == NULL:
                        c.heads[cls] = b.next
                    else:
                        prev.next = b.next
                    c.nblocks -= 1
                    c.nbytes -= b.size
                    self._put_event(b.event)
                    b.event = NULL
                    self.n_cross_stream += 1
                    out[0] = b
                    return 0
                prev = b
                b = b.next
                tries += 1
        out[0] = NULL
        return 0

    # ---------------------------------------------------------- allocation
    cdef int allocate(self, DeviceBuffer buf, size_t size, CUstream s) except -1:
        cdef size_t rounded = 0
        cdef int cls
        cdef bc_scache *c
        cdef bc_block *b
        with cython.critical_section(self):
            buf.ptr = 0
            buf.nbytes = size
            buf._kind = KIND_POOL
            if size == 0:
                buf._block = NULL
                return 0
            cls = bc_size_class(size, &rounded)
            if cls < 0:
                raise OverflowError(f"cannot allocate {size} bytes (above 2**63)")
            if CAP[0] != NULL and _capturing(s):
                return self._allocate_captured(buf, size, s)
            c = self.cache_for(s, buf._stream)
            b = c.heads[cls]
            if b != NULL:                                   # hot path: same stream, cached
                c.heads[cls] = b.next
                c.nblocks -= 1
                c.nbytes -= b.size
                self.cached -= b.size
                self.n_hits += 1
                if b.event != NULL:
                    self._put_event(b.event)
                    b.event = NULL
            else:
                self.take_cross_stream(cls, c, &b)
                if b != NULL:
                    self.cached -= b.size
                    self.n_hits += 1
                else:
                    self.n_misses += 1
                    b = self._new_block(cls, rounded, size, s)
            b.stream = s
            b.next = NULL
            b.requested = size
            buf.ptr = b.ptr
            buf._block = b
            self.in_use += size
            self.in_use_rounded += b.size
            if self.in_use > self.peak_in_use:
                self.peak_in_use = self.in_use
            return 0

    cdef int _allocate_captured(self, DeviceBuffer buf, size_t size, CUstream s) except -1:
        """A graph allocation node (the capture hook above); never cached."""
        cdef CUdeviceptr p = 0
        cdef bc_block *b
        require(<const void *>D.cuMemAllocAsync, b"cuMemAllocAsync", b"allocating during a stream capture")
        set_current(self.ctx)
        check(D.cuMemAllocAsync(&p, size, s), b"cuMemAllocAsync")
        b = <bc_block *>calloc(1, sizeof(bc_block))
        if b == NULL:
            D.cuMemFreeAsync(p, s)
            raise MemoryError()
        b.ptr = p
        b.size = size
        b.requested = size
        b.cls = -1
        b.from_async = FROM_GRAPH
        b.stream = s
        buf.ptr = p
        buf._block = b
        self.in_use += size
        self.in_use_rounded += size
        if self.in_use > self.peak_in_use:
            self.peak_in_use = self.in_use
        return 0

    cdef bc_block *_new_block(self, int cls, size_t rounded, size_t size, CUstream s) except NULL:
        cdef CUdeviceptr p = 0
        cdef CUresult rc = 0
        cdef bc_block *b
        cdef int attempt
        cdef bint used_async = False
        cdef bint over = False
        if self.deferred_bytes >= self.deferred_limit:
            self.flush_deferred()
            self.take_cross_stream(cls, NULL, &b)
            if b != NULL:
                self.cached -= b.size
                return b
        set_current(self.ctx)
        for attempt in range(2):
            over = self.limit and self.reserved + rounded > self.limit
            if over:
                rc = CUDA_ERROR_OUT_OF_MEMORY          # over our own limit
            else:
                if self.use_async:
                    with nogil:
                        rc = D.cuMemAllocAsync(&p, rounded, s)
                    if rc == CUDA_ERROR_NOT_SUPPORTED:   # no memory pools on this device/driver
                        self.use_async = False
                    used_async = True
                if not self.use_async:
                    with nogil:
                        rc = D.cuMemAlloc(&p, rounded)
                    used_async = False
            if rc == 0:
                break
            if rc != CUDA_ERROR_OUT_OF_MEMORY or attempt == 1:
                break
            # Out of memory: give back everything cached (after all work is done) and retry.
            self.n_oom_retries += 1
            self.release_cached(True)
        if rc != 0:
            stats = self.stats()
            over_msg = " (over the pool's limit)" if over else ""
            raise make_error(rc, "cuMemAllocAsync" if self.use_async else "cuMemAlloc",
                             f"MemoryPool could not allocate {size} bytes ({fmt_bytes(size)}, rounded to "
                             f"{fmt_bytes(rounded)}) on device {self.device.ordinal}{over_msg}; pool stats: "
                             f"in_use={fmt_bytes(stats['in_use'])}, reserved={fmt_bytes(stats['reserved'])}, "
                             f"cached={fmt_bytes(stats['cached'])}, limit="
                             f"{fmt_bytes(self.limit) if self.limit else 'none'}, "
                             f"driver_allocations={stats['driver_allocations']}")
        b = <bc_block *>calloc(1, sizeof(bc_block))
        if b == NULL:
            if used_async:
                D.cuMemFreeAsync(p, s)
            else:
                D.cuMemFree(p)
            raise MemoryError()
        b.ptr = p
        b.size = rounded
        b.cls = cls
        b.from_async = used_async
        self.reserved += rounded
        self.n_driver_alloc += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return b

    cdef int deallocate(self, DeviceBuffer buf) except -1:
        cdef bc_block *b = <bc_block *>buf._block
        cdef bc_scache *c
        cdef CUdeviceptr p
        cdef CUstream s
        with cython.critical_section(self):
            buf._block = NULL
            buf.ptr = 0
            if b == NULL:
                return 0
            self.in_use -= b.requested
            self.in_use_rounded -= b.size
            if stream_closed(buf):
                # Its stream is gone (see the module notes): never name it again; deferred
                # (no wait here, unlike order_stream's context synchronization).
                if b.from_async == FROM_GRAPH or self.closed:
                    sync_for_closed(self.ctx)
                    if b.from_async == FROM_GRAPH:
                        p = b.ptr
                        free(b)
                        check(D.cuMemFreeAsync(p, NULL), b"cuMemFreeAsync")
                    else:
                        self.free_block(b, NULL)
                    return 0
                b.stream = READY_STREAM
                b.next = self.deferred
                self.deferred = b
                self.deferred_bytes += b.size
                self.cached += b.size
                return 0
            order_stream(buf, &s)              # open: its own stream, no driver call
            if b.from_async == FROM_GRAPH:     # capture hook: graph allocations go back to the driver
                p = b.ptr
                free(b)
                set_current(self.ctx)
                check(D.cuMemFreeAsync(p, s), b"cuMemFreeAsync")
                return 0
            if self.closed:
                self.free_block(b, s)
                return 0
            if buf.used_elsewhere or (CAP[0] != NULL and _capturing(s)):
                b.next = self.deferred
                self.deferred = b
                self.deferred_bytes += b.size
                self.cached += b.size
                return 0
            c = self.cache_for(s, buf._stream)
            b.next = c.heads[b.cls]
            c.heads[b.cls] = b
            c.nblocks += 1
            c.nbytes += b.size
            self.cached += b.size
            return 0

    # ------------------------------------------------------------- release
    cdef int free_block(self, bc_block *b, CUstream s) except -1:
        """Give one block back to the driver, ordered after work on s; frees b."""
        cdef CUresult rc
        cdef CUdeviceptr p = b.ptr
        cdef size_t n = b.size
        cdef bint from_async = b.from_async
        if b.event != NULL:
            self._put_event(b.event)
        free(b)
        self.reserved -= n
        self.n_driver_free += 1
        set_current(self.ctx)
        if s == READY_STREAM:
            s = NULL
        if from_async:
            check(D.cuMemFreeAsync(p, s), b"cuMemFreeAsync")
        else:
            check(D.cuMemFree(p), b"cuMemFree")
        return 0

    cdef int flush_deferred(self) except -1:
        """Wait for the whole context, then make deferred blocks reusable by any stream."""
        cdef bc_block *b
        cdef bc_block *nb
        cdef CUresult rc
        if self.deferred == NULL:
            return 0
        set_current(self.ctx)
        with nogil:
            rc = D.cuCtxSynchronize()
        check(rc, b"cuCtxSynchronize")
        self.n_ctx_syncs += 1
        b = self.deferred
        self.deferred = NULL
        self.deferred_bytes = 0
        while b != NULL:
            nb = b.next
            b.next = self.ready.heads[b.cls]
            self.ready.heads[b.cls] = b
            self.ready.nblocks += 1
            self.ready.nbytes += b.size
            b = nb
        return 0

    cdef int release_cached(self, bint sync_first) except -1:
        """Give every cached block back to the driver (stream-ordered frees)."""
        cdef int i, k
        cdef bc_scache *c
        cdef bc_block *b
        cdef bc_block *nb
        cdef CUresult rc
        if sync_first:
            self.flush_deferred()
        if not self.use_async:
            # cuMemFree is not stream-ordered: make sure no queued work still uses a block.
            set_current(self.ctx)
            with nogil:
                rc = D.cuCtxSynchronize()
            check(rc, b"cuCtxSynchronize")
        for i in range(-1, self.ncaches):
            c = self.ready if i < 0 else self.caches[i]
            if c.nblocks == 0:
                continue
            for k in range(BC_NCLASSES):
                b = c.heads[k]
                c.heads[k] = NULL
                while b != NULL:
                    nb = b.next
                    self.cached -= b.size
                    c.nblocks -= 1
                    c.nbytes -= b.size
                    self.free_block(b, c.stream)
                    b = nb
        return 0

    cdef int _drop_idle_streams(self) except -1:
        cdef int i = 0
        cdef bc_scache *c
        cdef PyObject *obj
        self.last = NULL
        while i < self.ncaches:
            c = self.caches[i]
            if c.nblocks == 0:
                # Unlink before the decref: dropping the last reference closes the
                # stream, whose close hook (_retire_stream) walks self.caches.
                self.ncaches -= 1
                self.caches[i] = self.caches[self.ncaches]
                obj = c.stream_obj
                free(c)
                Py_XDECREF(obj)
            else:
                i += 1
        return 0

    cdef int _retire_stream(self, CUstream s) except -1:
        """Stream close hook: move the blocks cached on s (about to be destroyed) to
        the deferred list and forget s's cache. Makes no driver call."""
        cdef int i, k
        cdef bc_scache *c = NULL
        cdef bc_block *b
        cdef bc_block *nb
        cdef PyObject *obj
        with cython.critical_section(self):
            if s == NULL or self.caches == NULL:
                return 0
            for i in range(self.ncaches):
                if self.caches[i].stream == s:
                    c = self.caches[i]
                    self.ncaches -= 1
                    self.caches[i] = self.caches[self.ncaches]
                    break
            if c == NULL:
                return 0
            self.last = NULL
            for k in range(BC_NCLASSES):
                b = c.heads[k]
                while b != NULL:
                    nb = b.next
                    if b.event != NULL:
                        self._put_event(b.event)
                        b.event = NULL
                    b.stream = READY_STREAM
                    b.next = self.deferred
                    self.deferred = b
                    self.deferred_bytes += b.size
                    b = nb
            obj = c.stream_obj
            free(c)
            Py_XDECREF(obj)
            return 0

    # ---------------------------------------------------------------- public
    def trim(self):
        """Give every cached block back to the driver (waiting for cross-stream frees
        first), destroy the pool's spare events and forget idle streams. Afterwards
        ``reserved`` is the rounded size of the blocks in use."""
        with cython.critical_section(self):
            ensure_driver(ST)
            self.release_cached(True)
            self._drop_idle_streams()
            self._drop_events()

    cdef int _drop_events(self) except -1:
        """Destroy the spare events (those not recorded for a cached block)."""
        while self.nevents:
            self.nevents -= 1
            D.cuEventDestroy(self.events[self.nevents])
        return 0

    def stats(self):
        """A dict: ``in_use`` (bytes requested by live buffers), ``in_use_rounded``,
        ``reserved`` (bytes held from the driver), ``cached`` (reserved, not in use),
        ``deferred`` (cached, waiting for a context sync), ``peak`` (peak in_use),
        ``peak_reserved``, ``driver_allocations``, ``driver_frees``, ``cache_hits``,
        ``cache_misses``, ``cross_stream_reuses``, ``context_syncs``, ``oom_retries``,
        ``streams``, ``limit``."""
        with cython.critical_section(self):
            return {
                "in_use": self.in_use,
                "in_use_rounded": self.in_use_rounded,
                "reserved": self.reserved,
                "cached": self.cached,
                "deferred": self.deferred_bytes,
                "peak": self.peak_in_use,
                "peak_reserved": self.peak_reserved,
                "driver_allocations": self.n_driver_alloc,
                "driver_frees": self.n_driver_free,
                "cache_hits": self.n_hits,
                "cache_misses": self.n_misses,
                "cross_stream_reuses": self.n_cross_stream,
                "context_syncs": self.n_ctx_syncs,
                "oom_retries": self.n_oom_retries,
                "streams": self.ncaches,
                "limit": self.limit if self.limit else None,
            }

    def reset_peak(self):
        """Reset ``peak`` and ``peak_reserved`` to the current values."""
        with cython.critical_section(self):
            self.peak_in_use = self.in_use
            self.peak_reserved = self.reserved

    @property
    def limit(self):
        """Most bytes the pool may hold from the driver (in use + cached), or None for no limit; assignable."""
        return self.limit if self.limit else None

    @limit.setter
    def limit(self, value):
        self.limit = 0 if value is None else value

    def close(self):
        """Give cached memory back; later frees go straight to the driver."""
        with cython.critical_section(self):
            if not self.closed:
                self.release_cached(True)
                self._drop_idle_streams()
                self._drop_events()
                self.closed = True

    def __repr__(self):
        return (f"<barecuda.MemoryPool device={self.device.ordinal} in_use={fmt_bytes(self.in_use)} "
                f"reserved={fmt_bytes(self.reserved)}>")


def memory_stats(device=None):
    """Statistics of the default allocator of ``device`` (see MemoryPool.stats)."""
    a = _allocators.get_allocator(device)
    f = getattr(a, "stats", None)
    return f() if f is not None else {}


def trim_memory(device=None):
    """Give the default allocator's cached memory back to the driver."""
    a = _allocators.get_allocator(device)
    f = getattr(a, "trim", None)
    if f is not None:
        f()


def _default_pool(dev):
    return MemoryPool(dev)


# BARECUDA_ALLOCATOR=driver turns the cache off (every buffer straight from the
# driver), for debugging memory errors.
if os.environ.get("BARECUDA_ALLOCATOR", "cache").lower() != "driver":
    _allocators._set_default_allocator_factory(_default_pool)
