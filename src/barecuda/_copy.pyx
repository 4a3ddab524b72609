"""Copies: host <-> device, device <-> device (same device or peer), 2D/3D pitched
copies, and to_device.

Owns: the copy engine behind DeviceBuffer.copy_from/copy_to/to_numpy/copy,
to_device, copy_2d and copy_3d, and the fill behind DeviceBuffer.memset. Every copy checks both sides before any driver call:
open (not closed), writable destination, contiguous memory, sizes and extents in
checked 64-bit arithmetic. Synchronous without a stream; with one, queued on it and
the device sides noted as used there (note_use marks the allocation owner).
"""

__all__ = ["to_device", "copy_2d", "copy_3d"]
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_FORMAT
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from libc.string cimport memset

import operator

from barecuda._abi cimport *
from barecuda._errors cimport check
from barecuda._loader cimport driver_table, set_current
from barecuda._stream cimport Stream, stream_handle, resolve_device, stream_after, stream_use, stream_done
from barecuda._staging cimport staged_htod, staged_dtoh
from barecuda._dtype cimport np_module, resolve_dtype, nbytes_of
from barecuda._buffer cimport (DeviceBuffer, new_buffer, note_use, use_begin, use_end,
                               checked_size, order_stream, capture_use_t, capture_use_slot, captured_use,
                               refuse_captured)
from barecuda._host cimport PinnedBuffer, get_host, find_pinned
from barecuda._interop cimport as_device

cdef bc_driver_t *D = driver_table()
# Stream capture (see _buffer.pxd): a copy queued on a capturing stream makes the graph
# hold both sides; one that cannot be captured (synchronous, pageable host memory) is
# refused before any driver call. NULL outside barecuda captures.
cdef capture_use_t *CAP = capture_use_slot()

_SYNC = "a copy without stream= (complete on return)"
_PAGEABLE = "a copy to or from pageable host memory (staged, complete on return)"


cdef int _sync(CUstream s) except -1:
    cdef CUresult rc
    with nogil:
        rc = D.cuStreamSynchronize(s)
    return check(rc, b"cuStreamSynchronize")


cdef int _raise_mismatch(object dst_dtype, size_t dst_bytes, object src_dtype, size_t src_bytes) except -1:
    """A copy whose two sides differ in size: named a dtype mismatch when both sides have
    a dtype and they differ (the usual cause), else a size mismatch."""
    if dst_dtype is not None and src_dtype is not None and str(dst_dtype) != str(src_dtype):
        raise ValueError(f"dtype mismatch: destination is {dst_dtype} ({dst_bytes} bytes), source is "
                         f"{src_dtype} ({src_bytes} bytes); convert one side first (numpy: .astype)")
    raise ValueError(f"size mismatch: destination has {dst_bytes} bytes, source {src_bytes}")


cdef int _copy_dd(DeviceBuffer dst, DeviceBuffer src, object stream, str op) except -1:
    cdef CUstream s = NULL
    cdef CUstream ss = NULL
    cdef CUresult rc
    cdef size_t n = src.nbytes
    dst._check_writable()
    src._check_open()
    dst._check_contiguous("a copy")
    src._check_contiguous("a copy")
    if dst.nbytes != src.nbytes:
        _raise_mismatch(dst._dtype, dst.nbytes, src._dtype, src.nbytes)
    if n != 0 and dst.device.ordinal == src.device.ordinal and dst.ptr < src.ptr + n and src.ptr < dst.ptr + n:
        # One allocation, overlapping ranges: CUDA leaves the result undefined (docs/errors.md).
        raise ValueError(f"overlapping copy: source [0x{src.ptr:x}, +{n}) and destination [0x{dst.ptr:x}, +{n}) "
                         "share bytes of one allocation, and CUDA leaves such a copy's result undefined; copy "
                         "through a temporary buffer (src.copy()) instead")
    if stream is not None:
        stream_handle(stream, &s)
    if n == 0:
        return 0
    if stream is None:
        order_stream(dst, &s)
        order_stream(src, &ss)
        refuse_captured(CAP, s, op, _SYNC)
        refuse_captured(CAP, ss, op, _SYNC)
    else:
        captured_use(CAP, s, dst, src)
    set_current(dst.ctx)
    # Held over the GIL-free calls: a close() on another thread defers the free or the
    # stream's destruction until they return (docs/architecture.md).
    cdef DeviceBuffer od = use_begin(dst)
    cdef DeviceBuffer osr = None
    cdef Stream so = None
    cdef Stream so2 = None
    try:
        osr = use_begin(src)
        so = stream_use(stream if stream is not None else dst._stream)
        if stream is None and src._stream is not dst._stream:
            so2 = stream_use(src._stream)
        if stream is None and ss != s:
            stream_after(s, ss, dst.ctx)
        if dst.device.ordinal == src.device.ordinal:
            with nogil:
                rc = D.cuMemcpyDtoDAsync(dst.ptr, src.ptr, n, s)
            check(rc, b"cuMemcpyDtoDAsync")
        else:
            with nogil:
                rc = D.cuMemcpyPeerAsync(dst.ptr, dst.ctx, src.ptr, src.ctx, n, s)
            check(rc, b"cuMemcpyPeerAsync")
        if stream is None:
            _sync(s)
        else:
            note_use(dst, s)
            note_use(src, s)
    finally:
        stream_done(so2)
        stream_done(so)
        use_end(osr)
        use_end(od)
    return 0


cdef int _copy_host(DeviceBuffer dev, object host, object stream, bint to_host, str op,
                    bint fresh=False) except -1:
    """Host (buffer protocol) <-> device. ``to_host``: dev -> host (writable), complete
    on return unless host is a PinnedBuffer and a stream is given (then asynchronous).
    Otherwise host -> dev: synchronous without a stream, else ordered on it (host
    memory may be reused on return: pageable bytes are staged). ``fresh``: host was
    just allocated by us and never touched (see staged_dtoh). ``op`` names the public
    operation in errors."""
    cdef Py_buffer view
    cdef bint captured = False
    cdef CUcontext ctx = dev.ctx
    cdef PinnedBuffer p
    cdef CUstream s = NULL
    cdef CUresult rc
    cdef size_t n
    cdef CUdeviceptr dptr
    cdef void *hp
    if to_host:
        dev._check_open()
    else:
        dev._check_writable()
    dev._check_contiguous("a copy")
    if stream is not None:
        stream_handle(stream, &s)
    else:
        order_stream(dev, &s)
    get_host(host, &view, to_host)
    cdef DeviceBuffer od = None
    cdef Stream so = None
    try:
        n = view.len
        if n != dev.nbytes:
            host_dtype = getattr(getattr(host, "dtype", None), "name", None)
            if to_host:
                _raise_mismatch(host_dtype, n, dev._dtype, dev.nbytes)
            _raise_mismatch(dev._dtype, dev.nbytes, host_dtype, n)
        if n == 0:
            return 0
        set_current(ctx)
        # Held over the GIL-free calls (staging included): see _copy_dd.
        od = use_begin(dev)
        so = stream_use(stream if stream is not None else dev._stream)
        dptr = dev.ptr
        hp = view.buf
        if to_host:
            p = find_pinned(host) if stream is not None else None
            if p is not None:
                # Page-locked destination on a stream: a true asynchronous copy.
                captured = captured_use(CAP, s, dev, p)
                with nogil:
                    rc = D.cuMemcpyDtoHAsync(hp, dptr, n, s)
                check(rc, b"cuMemcpyDtoHAsync")
            else:
                # Complete on return (staged through pinned chunks when large).
                refuse_captured(CAP, s, op, _SYNC if find_pinned(host) is not None else _PAGEABLE)
                with nogil:
                    staged_dtoh(hp, dptr, n, s, ctx, fresh)
                return 0
        else:
            p = find_pinned(host)
            if p is not None:
                if stream is None:
                    refuse_captured(CAP, s, op, _SYNC)
                else:
                    captured = captured_use(CAP, s, dev, p)
                with nogil:
                    rc = D.cuMemcpyHtoDAsync(dptr, hp, n, s)
                check(rc, b"cuMemcpyHtoDAsync")
            else:
                # Pageable memory: staged through pinned chunks (plain path below the
                # threshold); returns once host may be reused, the DMAs ordered on s.
                refuse_captured(CAP, s, op, _PAGEABLE)
                with nogil:
                    staged_htod(dptr, hp, n, s, ctx)
            if stream is None:
                _sync(s)
                return 0
        note_use(dev, s)
        if p is not None and not captured:
            p.note_async_use(s)         # (a captured copy's graph holds p instead)
    finally:
        stream_done(so)
        use_end(od)
        PyBuffer_Release(&view)
    return 0


# ---------------------------------------------------------------- DeviceBuffer


cdef int _sync_on(object stream) except -1:
    cdef CUstream h = NULL
    stream_handle(stream, &h)
    cdef Stream so = stream_use(stream)
    try:
        _sync(h)
    finally:
        stream_done(so)
    return 0


# ------------------------------------------------------ DeviceBuffer copy methods
def copy_into(DeviceBuffer self, src, stream):
    """DeviceBuffer.copy_from."""
    cdef DeviceBuffer d = as_device(src, stream)
    if d is not None:
        _copy_dd(self, d, stream, "DeviceBuffer.copy_from")
    else:
        _copy_host(self, src, stream, False, "DeviceBuffer.copy_from")


def copy_out(DeviceBuffer self, dst, stream):
    """DeviceBuffer.copy_to."""
    if dst is None:
        self._check_open()
        # uninitialised (no memset: every byte is written by the copy, and the
        # staging threads fault the pages in in parallel)
        dst = PyByteArray_FromStringAndSize(NULL, <Py_ssize_t>self.nbytes)
        _copy_host(self, dst, stream, True, "DeviceBuffer.copy_to", True)
        if stream is not None:
            _sync_on(stream)
        return dst
    cdef DeviceBuffer d = as_device(dst, stream)
    if d is not None:
        _copy_dd(d, self, stream, "DeviceBuffer.copy_to")
    else:
        _copy_host(self, dst, stream, True, "DeviceBuffer.copy_to")
    return dst


def to_numpy(DeviceBuffer self, stream):
    """DeviceBuffer.to_numpy."""
    self._check_open()
    np = np_module()
    try:
        dt = np.dtype(self._dtype if self._dtype is not None else "uint8")
    except TypeError:
        raise TypeError(f"numpy has no dtype {self._dtype!r}; use .view('uint8') first") from None
    out = np.empty(self.shape, dtype=dt)
    _copy_host(self, out, stream, True, "DeviceBuffer.to_numpy", True)
    if stream is not None:
        _sync_on(stream)
    return out


def duplicate(DeviceBuffer self, stream):
    """DeviceBuffer.copy."""
    cdef CUstream h
    self._check_open()
    self._check_contiguous("copy()")
    order_stream(self, &h)            # its Stream may be closed: then the safe one
    if stream is None:
        refuse_captured(CAP, h, "DeviceBuffer.copy", _SYNC)   # before allocating the copy
    cdef DeviceBuffer b = new_buffer(self.nbytes, self.device, self._stream, None)
    b._shape, b._dtype, b._itemsize = self._shape, self._dtype, self._itemsize
    _copy_dd(b, self, stream, "DeviceBuffer.copy")
    return b


def fill(DeviceBuffer buf, value, width, stream):
    """DeviceBuffer.memset (the checks, then cuMemsetD8/D16/D32Async on the buffer's
    stream or `stream`; synchronous without one)."""
    cdef CUstream s = NULL
    cdef CUresult rc
    cdef unsigned long long v
    cdef size_t count
    cdef CUdeviceptr p
    cdef int w
    buf._check_writable()
    buf._check_contiguous("memset()")
    if type(value) is not int and (isinstance(value, bool) or not hasattr(type(value), "__index__")):
        raise TypeError(f"memset value must be an int, not {type(value).__name__}")
    if type(width) is not int or width not in (8, 16, 32):
        raise ValueError(f"width must be 8, 16 or 32, not {width!r}")
    value = operator.index(value)
    w = width
    wo = width
    if not -(1 << (wo - 1)) <= value < (1 << wo):
        raise OverflowError(f"value {value} does not fit in {w} bits")
    if value < 0:
        value += 1 << wo
    v = value
    if buf.nbytes % (w // 8):
        raise ValueError(f"nbytes ({buf.nbytes}) is not a multiple of {w // 8} (width={w})")
    if stream is not None:
        stream_handle(stream, &s)
    else:
        order_stream(buf, &s)
    count = buf.nbytes // (w // 8)
    if count == 0:
        return 0
    if CAP[0] != NULL:
        if stream is None:
            refuse_captured(CAP, s, "DeviceBuffer.memset", "a memset without stream= (complete on return)")
        else:
            CAP[0](s, buf, None)
    set_current(buf.ctx)
    # Held over the GIL-free calls: a close() on another thread defers the free or
    # the stream's destruction to use_end / stream_done (docs/architecture.md).
    cdef DeviceBuffer o = use_begin(buf)
    cdef Stream so = None
    try:
        so = stream_use(stream if stream is not None else buf._stream)
        p = buf.ptr
        if w == 8:
            with nogil:
                rc = D.cuMemsetD8Async(p, <unsigned char>v, count, s)
            check(rc, b"cuMemsetD8Async")
        elif w == 16:
            with nogil:
                rc = D.cuMemsetD16Async(p, <unsigned short>v, count, s)
            check(rc, b"cuMemsetD16Async")
        else:
            with nogil:
                rc = D.cuMemsetD32Async(p, <unsigned int>v, count, s)
            check(rc, b"cuMemsetD32Async")
        if stream is None:
            with nogil:
                rc = D.cuStreamSynchronize(s)
            check(rc, b"cuStreamSynchronize")
        else:
            note_use(buf, s)
    finally:
        stream_done(so)
        use_end(o)
    return 0


def to_device(obj, *, stream=None, device=None, allocator=None):
    """Copy a host object (any C-contiguous buffer-protocol object; numpy arrays keep
    their shape and dtype) to a new DeviceBuffer. A device array is copied device to
    device. Synchronous unless a stream is given (then the host memory must stay valid
    until the stream reaches the copy)."""
    cdef Py_buffer view
    cdef DeviceBuffer b
    cdef CUstream s = NULL
    cdef int i
    d = as_device(obj, stream)
    if d is not None:
        d._check_open()
        d._check_contiguous("to_device()")
        b = new_buffer(d.nbytes, device if device is not None else d.device, stream, allocator)
        b._shape, b._dtype, b._itemsize = d._shape, d._dtype, d._itemsize
        _copy_dd(b, d, stream, "to_device")
        return b
    try:
        PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    except TypeError:
        raise TypeError(f"to_device needs a buffer-protocol object or a device array, "
                        f"not {type(obj).__name__}") from None
    except (BufferError, ValueError) as e:
        raise ValueError(f"{type(obj).__name__} must be C-contiguous: {e}; "
                         "copy it first, e.g. numpy.ascontiguousarray(x)") from None
    try:
        fmt = view.format.decode() if view.format != NULL else "B"
        shape = tuple(view.shape[i] for i in range(view.ndim)) if view.shape != NULL else (view.len,)
        nbytes = view.len
    finally:
        PyBuffer_Release(&view)
    key = None
    try:
        key, itemsize = resolve_dtype(fmt)
    except TypeError:
        pass
    if key is None or nbytes_of(shape, itemsize) != nbytes:
        dt = getattr(obj, "dtype", None)
        if dt is not None:
            key, itemsize = resolve_dtype(dt)
        if key is None or nbytes_of(shape, itemsize) != nbytes:
            key, itemsize, shape = "uint8", 1, (nbytes,)
    if stream is not None and CAP[0] != NULL and find_pinned(obj) is None:
        stream_handle(stream, &s)       # refused before the allocation as well
        refuse_captured(CAP, s, "to_device", _PAGEABLE)
    b = new_buffer(nbytes, device, stream, allocator)
    b._shape = shape
    b._dtype = key
    b._itemsize = itemsize
    _copy_host(b, obj, stream, False, "to_device")
    return b



# ------------------------------------------------------------ 2D / 3D copies
@cython.final
cdef class _Side:
    """One side of a 2D/3D copy: device address or host pointer, and its extent."""
    cdef CUmemorytype mtype
    cdef CUdeviceptr dptr
    cdef void *hptr
    cdef size_t nbytes
    cdef Py_buffer view
    cdef bint has_view
    cdef DeviceBuffer dev
    cdef object keep

    def __dealloc__(self):
        if self.has_view:
            PyBuffer_Release(&self.view)


cdef _Side _side(object obj, bint writable):
    cdef _Side sd = _Side.__new__(_Side)
    cdef DeviceBuffer d = as_device(obj, None)
    if d is not None:
        if writable:
            d._check_writable()
        else:
            d._check_open()
        d._check_contiguous("copy_2d/copy_3d")
        sd.mtype = CU_MEMORYTYPE_DEVICE
        sd.dptr = d.ptr
        sd.nbytes = d.nbytes
        sd.dev = d
        return sd
    get_host(obj, &sd.view, writable)
    sd.has_view = True
    sd.keep = obj
    sd.mtype = CU_MEMORYTYPE_HOST
    sd.hptr = sd.view.buf
    sd.nbytes = sd.view.len
    return sd


cdef size_t _mul(size_t a, size_t b, str which) except? 0:
    if b and a > (<size_t>-1) // b:
        raise OverflowError(f"{which}: the copy's extent overflows 64 bits")
    return a * b


cdef size_t _add(size_t a, size_t b, str which) except? 0:
    if a > (<size_t>-1) - b:
        raise OverflowError(f"{which}: the copy's extent overflows 64 bits")
    return a + b


cdef int _check_extent(_Side sd, str which, size_t x, size_t y, size_t z, size_t pitch, size_t rows,
                       size_t width, size_t height, size_t depth) except -1:
    """Bounds of one side, in checked 64-bit arithmetic (no wrap-around)."""
    cdef size_t last
    if width == 0 or height == 0 or depth == 0:
        return 0
    if _add(x, width, which) > pitch:
        raise ValueError(f"{which}: x offset + width ({x} + {width}) exceeds the pitch {pitch}")
    if _add(y, height, which) > rows and depth > 1:
        raise ValueError(f"{which}: y offset + height exceeds the rows per slice ({rows})")
    # ((z + depth - 1) * rows + (y + height - 1)) * pitch + x + width
    last = _add(_mul(_add(_mul(_add(z, depth - 1, which), rows, which), _add(y, height - 1, which), which),
                     pitch, which), _add(x, width, which), which)
    if last > sd.nbytes:
        raise ValueError(f"{which}: the copy reaches byte {last} but the buffer has {sd.nbytes}")
    return 0


cdef inline size_t _row_at(size_t base, size_t x, size_t y, size_t z, size_t pitch, size_t rows,
                           size_t height, size_t k) noexcept:
    """Address of the k-th row (slice-major) of a pitched box; bounds already checked."""
    return base + ((z + k // height) * rows + y + k % height) * pitch + x


cdef int _check_no_overlap(_Side d, _Side sr, size_t dx, size_t dy, size_t dz, size_t dp, size_t dh,
                           size_t sx, size_t sy, size_t sz, size_t sp, size_t sh,
                           size_t w, size_t h, size_t depth) except -1:
    """Refuse a pitched device-to-device copy whose source and destination rows share a
    byte (CUDA leaves its result undefined, as for copy_from: docs/errors.md). Exact: the
    rows of each side are disjoint and in address order, so one merge of the two row
    lists finds any overlap (at most 2 x height x depth steps, and only when the two
    boxes' envelopes overlap). Side-by-side boxes in one allocation pass."""
    cdef size_t n = h * depth, i = 0, j = 0, a, b
    cdef size_t d_lo, d_hi, s_lo, s_hi
    if d.dev is None or sr.dev is None or n == 0 or w == 0:
        return 0
    if d.dev.device.ordinal != sr.dev.device.ordinal:
        return 0
    d_lo = _row_at(d.dptr, dx, dy, dz, dp, dh, h, 0)
    d_hi = _row_at(d.dptr, dx, dy, dz, dp, dh, h, n - 1) + w
    s_lo = _row_at(sr.dptr, sx, sy, sz, sp, sh, h, 0)
    s_hi = _row_at(sr.dptr, sx, sy, sz, sp, sh, h, n - 1) + w
    if d_hi <= s_lo or s_hi <= d_lo:
        return 0
    while i < n and j < n:
        a = _row_at(d.dptr, dx, dy, dz, dp, dh, h, i)
        b = _row_at(sr.dptr, sx, sy, sz, sp, sh, h, j)
        if a < b + w and b < a + w:
            raise ValueError(
                f"overlapping copy: destination row {i} [0x{a:x}, +{w}) and source row {j} [0x{b:x}, +{w}) "
                "share bytes of one allocation, and CUDA leaves such a copy's result undefined; copy "
                "through a temporary buffer instead")
        if a + w <= b:
            i += 1
        else:
            j += 1
    return 0


cdef CUcontext _ctx_of(_Side d, _Side sr, object stream) except NULL:
    if d.dev is not None:
        return d.dev.ctx
    if sr.dev is not None:
        return sr.dev.ctx
    return resolve_device(None, stream).ctx


cdef int _pick_stream(_Side d, _Side sr, object stream, CUstream *s) except -1:
    """The stream of a pitched copy: the one given, else dst's, else src's (else NULL)."""
    cdef CUstream ss
    if stream is not None:
        stream_handle(stream, s)
    elif d.dev is not None:
        order_stream(d.dev, s)
        if sr.dev is not None:
            order_stream(sr.dev, &ss)
            if ss != s[0] and sr.dev.ctx == d.dev.ctx:
                stream_after(s[0], ss, d.dev.ctx)    # as copy_from: after the source's work
    elif sr.dev is not None:
        order_stream(sr.dev, s)
    return 0


cdef int _capture_sides(_Side d, _Side sr, object stream, str op) except -1:
    """While a barecuda capture runs (CAP set), before any driver call: refuse a pitched
    copy that cannot be captured (no stream=, or a pageable host side) on a capturing
    stream; else, when its stream is in a capture, make the graph hold both sides (the
    device buffers, the PinnedBuffers under host sides). Returns 1 when it is captured."""
    cdef CUstream s = NULL
    cdef object a, b
    if stream is None:
        if d.dev is not None:
            order_stream(d.dev, &s)
            refuse_captured(CAP, s, op, _SYNC)
        if sr.dev is not None:
            order_stream(sr.dev, &s)
            refuse_captured(CAP, s, op, _SYNC)
        return 0
    stream_handle(stream, &s)
    a = d.dev if d.dev is not None else find_pinned(d.keep)
    b = sr.dev if sr.dev is not None else find_pinned(sr.keep)
    if a is None or b is None:
        refuse_captured(CAP, s, op, _PAGEABLE)
    return captured_use(CAP, s, a, b)


cdef int _after_copy(_Side d, _Side sr, object stream, CUstream s, bint captured) except -1:
    """Synchronous without a stream; else both device sides are noted as used on it, and
    a PinnedBuffer under a host side records the copy (its close() waits for it) unless
    the copy was captured (the graph holds it instead)."""
    cdef PinnedBuffer p
    if stream is None:
        _sync(s)
        return 0
    if d.dev is not None:
        note_use(d.dev, s)
    if sr.dev is not None:
        note_use(sr.dev, s)
    if not captured:
        for side in (d, sr):
            if (<_Side>side).dev is None:
                p = find_pinned((<_Side>side).keep)
                if p is not None:
                    p.note_async_use(s)
    return 0


# ---- the steps copy_2d and copy_3d share (their descriptors differ: a fused type)
ctypedef fused _pitched_desc:
    CUDA_MEMCPY2D
    CUDA_MEMCPY3D

cdef enum:
    _NOTHING = 2        # _pitched_begin: an empty copy, nothing to queue


cdef int _pitched_begin(_Side d, _Side sr, object stream, str op, bint empty, CUstream *s) except -1:
    """After the bounds checks: while a barecuda capture runs, the capture check (before
    any driver call); the copy's stream into *s (also for an empty copy); then the
    copy's context made current. _NOTHING for an empty copy, else 1 when the copy is
    captured (the graph holds both sides), 0 when not."""
    cdef int captured = 0
    if empty:
        _pick_stream(d, sr, stream, s)
        return _NOTHING
    if CAP[0] != NULL:
        captured = _capture_sides(d, sr, stream, op)
    _pick_stream(d, sr, stream, s)
    set_current(_ctx_of(d, sr, stream))
    return captured


ctypedef struct _Box:         # a pitched copy's geometry: extent, then each side's place
    size_t w, h, depth        # bytes per row, rows, slices (1 for a 2D copy)
    size_t dx, dy, dz, dp, dh     # destination: x in bytes, row, slice, pitch, rows per slice
    size_t sx, sy, sz, sp, sh     # source: the same


cdef int _read_extent(_Box *b, object width_bytes, object height, object depth, object dst_pitch,
                      object src_pitch) except -1:
    """The extent and the pitches (default: the width) of a copy, checked in argument
    order; depth None: a 2D copy (one slice)."""
    b.w = checked_size(width_bytes, "width_bytes")
    b.h = checked_size(height, "height")
    b.depth = 1 if depth is None else checked_size(depth, "depth")
    b.dp = b.w if dst_pitch is None else checked_size(dst_pitch, "dst_pitch")
    b.sp = b.w if src_pitch is None else checked_size(src_pitch, "src_pitch")
    return 0


cdef int _pitched_copy(_pitched_desc *c, _Side d, _Side sr, _Box *b, object stream, str op) except -1:
    """The bounds checks, _pitched_begin, the descriptor (every other field zero), _pitched_run.
    A 2D copy's rows per slice are the rows it reaches (each side's y + height)."""
    cdef CUstream s = NULL
    cdef int r
    if _pitched_desc is CUDA_MEMCPY2D:
        b.dh = _add(b.h, b.dy, "dst")
    _check_extent(d, "dst", b.dx, b.dy, b.dz, b.dp, b.dh, b.w, b.h, b.depth)
    if _pitched_desc is CUDA_MEMCPY2D:
        b.sh = _add(b.h, b.sy, "src")
    _check_extent(sr, "src", b.sx, b.sy, b.sz, b.sp, b.sh, b.w, b.h, b.depth)
    _check_no_overlap(d, sr, b.dx, b.dy, b.dz, b.dp, b.dh, b.sx, b.sy, b.sz, b.sp, b.sh, b.w, b.h, b.depth)
    r = _pitched_begin(d, sr, stream, op, b.w == 0 or b.h == 0 or b.depth == 0, &s)
    if r == _NOTHING:
        return 0
    memset(c, 0, sizeof(c[0]))
    c.srcXInBytes, c.srcY, c.srcPitch = b.sx, b.sy, b.sp
    c.srcMemoryType, c.srcHost, c.srcDevice = sr.mtype, sr.hptr, sr.dptr
    c.dstXInBytes, c.dstY, c.dstPitch = b.dx, b.dy, b.dp
    c.dstMemoryType, c.dstHost, c.dstDevice = d.mtype, d.hptr, d.dptr
    c.WidthInBytes, c.Height = b.w, b.h
    if _pitched_desc is CUDA_MEMCPY3D:
        c.srcZ, c.srcHeight = b.sz, b.sh
        c.dstZ, c.dstHeight = b.dz, b.dh
        c.Depth = b.depth
    return _pitched_run(c, d, sr, stream, s, r)


cdef int _pitched_run(_pitched_desc *c, _Side d, _Side sr, object stream, CUstream s, bint captured) except -1:
    """Queue the copy (cuMemcpy2DAsync or cuMemcpy3DAsync), then _after_copy."""
    cdef CUresult rc
    cdef DeviceBuffer o1 = None
    cdef DeviceBuffer o2 = None
    cdef Stream so = None
    try:
        # Held over the GIL-free calls: see _copy_dd.
        if d.dev is not None:
            o1 = use_begin(d.dev)
        if sr.dev is not None:
            o2 = use_begin(sr.dev)
        so = stream_use(stream if stream is not None else
                        d.dev._stream if d.dev is not None else sr.dev._stream if sr.dev is not None else None)
        if _pitched_desc is CUDA_MEMCPY2D:
            with nogil:
                rc = D.cuMemcpy2DAsync(c, s)
            check(rc, b"cuMemcpy2DAsync")
        else:
            with nogil:
                rc = D.cuMemcpy3DAsync(c, s)
            check(rc, b"cuMemcpy3DAsync")
        return _after_copy(d, sr, stream, s, captured)
    finally:
        stream_done(so)
        use_end(o2)
        use_end(o1)


def copy_2d(dst, src, width_bytes, height, *, dst_pitch=None, src_pitch=None, dst_x=0, dst_y=0,
            src_x=0, src_y=0, stream=None):
    """Copy a ``width_bytes`` x ``height`` rectangle between pitched memories (device
    buffers or host buffers, any direction; ``cuMemcpy2DAsync``). Pitches default to
    ``width_bytes``. Synchronous unless a stream is given (host memory must then stay
    valid until the stream reaches the copy). Bounds are checked before any driver call."""
    cdef CUDA_MEMCPY2D c
    cdef _Box b
    cdef _Side d = _side(dst, True)
    cdef _Side sr = _side(src, False)
    _read_extent(&b, width_bytes, height, None, dst_pitch, src_pitch)
    b.dx, b.dy, b.dz = checked_size(dst_x, "dst_x"), checked_size(dst_y, "dst_y"), 0
    b.sx, b.sy, b.sz = checked_size(src_x, "src_x"), checked_size(src_y, "src_y"), 0
    _pitched_copy(&c, d, sr, &b, stream, "copy_2d")


def copy_3d(dst, src, width_bytes, height, depth, *, dst_pitch=None, src_pitch=None, dst_height=None,
            src_height=None, dst_pos=(0, 0, 0), src_pos=(0, 0, 0), stream=None):
    """Copy a ``width_bytes`` x ``height`` x ``depth`` box between pitched memories
    (``cuMemcpy3DAsync``). ``*_height`` is the rows per slice (default ``height``);
    ``*_pos`` are ``(x_bytes, y, z)``. Synchronous unless a stream is given."""
    cdef CUDA_MEMCPY3D c
    cdef _Box b
    cdef _Side d = _side(dst, True)
    cdef _Side sr = _side(src, False)
    _read_extent(&b, width_bytes, height, depth, dst_pitch, src_pitch)
    b.dh = b.h if dst_height is None else checked_size(dst_height, "dst_height")
    b.sh = b.h if src_height is None else checked_size(src_height, "src_height")
    if len(dst_pos) != 3 or len(src_pos) != 3:
        raise ValueError("dst_pos and src_pos are (x_bytes, y, z)")
    b.dx, b.dy, b.dz = [checked_size(v, "dst_pos") for v in dst_pos]
    b.sx, b.sy, b.sz = [checked_size(v, "src_pos") for v in src_pos]
    _pitched_copy(&c, d, sr, &b, stream, "copy_3d")

