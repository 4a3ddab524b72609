"""GGUF files: a reader of versions 2 and 3, memory-mapped, and the upload of tensors.

barecuda's own parser (the ``gguf`` package is only a test dependency that writes test
files and cross-checks this one). It needs neither numpy nor a GPU: a header, every
metadata value, every tensor's name, type, shape and place are read from the mapping
at ``open``, and every tensor is checked to lie inside the file then, so a truncated
file, an unknown type, a missing key or a missing tensor is reported by name before
any GPU memory is taken. Tensor bytes are never copied on the host: ``TensorInfo.data``
is a memoryview of the mapping, and ``upload`` hands those views to the pinned staging
path (``barecuda._staging.copy_htod``).

Layout reminders (ggml's conventions, which GGUF stores):

- ``dims`` are ggml's ``ne``: ``dims[0]`` is the fastest-varying (the row length), so
  a weight of ``dims == (n_in, n_out)`` is a row-major ``n_out x n_in`` matrix; ``shape``
  gives the numpy order (``(n_out, n_in)``).
- Quantized rows are whole blocks: a row of ``n`` elements of a type with block size
  ``B`` and block bytes ``S`` is ``n // B * S`` bytes, and rows are contiguous.
"""
from __future__ import annotations

import mmap
import os
import struct
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = [
    "GGUFError", "GGMLType", "GGUFFile", "TensorInfo", "open_gguf", "upload",
    "SUPPORTED_TYPES", "type_size", "row_bytes",
]

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32


class GGUFError(ValueError):
    """A GGUF file that cannot be used: truncated, malformed, of an unknown type, or
    lacking a key or tensor the caller needs. The message names the file and the item."""


class GGMLType:
    """ggml tensor type ids (ggml.h ``enum ggml_type``) and their block geometry."""
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    BF16 = 30


# id -> (name, elements per block, bytes per block). Every type ggml defines is listed,
# so that a file holding one we cannot compute with still opens (its size is known) and
# the error comes where the tensor is used, naming it and its type.
_TYPES: Dict[int, Tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
_TYPE_IDS = {v[0]: k for k, v in _TYPES.items()}

#: The types barecuda computes with (kernels, numpy dequantizers).
SUPPORTED_TYPES = frozenset({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"})


def type_size(t: Union[int, str]) -> Tuple[int, int]:
    """(elements per block, bytes per block) of a ggml type id or name."""
    tid = _TYPE_IDS[t] if isinstance(t, str) else t
    _, be, bb = _TYPES[tid]
    return be, bb


def row_bytes(t: Union[int, str], n: int) -> int:
    """Bytes of ``n`` consecutive elements of type ``t`` (``n`` a multiple of the block)."""
    be, bb = type_size(t)
    if n % be:
        raise GGUFError(f"{n} elements is not a whole number of {be}-element blocks")
    return n // be * bb


# GGUF metadata value types: id -> (name, struct code or None)
_VT = {0: ("UINT8", "B"), 1: ("INT8", "b"), 2: ("UINT16", "H"), 3: ("INT16", "h"),
       4: ("UINT32", "I"), 5: ("INT32", "i"), 6: ("FLOAT32", "f"), 7: ("BOOL", "?"),
       8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "Q"), 11: ("INT64", "q"),
       12: ("FLOAT64", "d")}


class TensorInfo:
    """One tensor of a GGUF file: where it is and what it holds (no bytes copied)."""
    __slots__ = ("name", "dims", "type", "offset", "nbytes", "_file")

    def __init__(self, name: str, dims: Tuple[int, ...], type_id: int, offset: int, nbytes: int,
                 file: "GGUFFile") -> None:
        self.name = name
        self.dims = dims            # ggml order: dims[0] fastest
        self.type = type_id
        self.offset = offset        # absolute byte offset in the file
        self.nbytes = nbytes
        self._file = file

    @property
    def type_name(self) -> str:
        return _TYPES[self.type][0]

    @property
    def shape(self) -> Tuple[int, ...]:
        """numpy order (rows first)."""
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def data(self) -> memoryview:
        """The tensor's bytes: a read-only memoryview of the mapping (valid while the file is open)."""
        return self._file._view(self.offset, self.nbytes)

    def check_supported(self) -> None:
        if self.type_name not in SUPPORTED_TYPES:
            raise GGUFError(f"{self._file.path}: tensor {self.name!r} has type {self.type_name} "
                            f"(ggml type {self.type}), which barecuda does not compute with "
                            f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})")

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, shape={self.shape}, type={self.type_name}, nbytes={self.nbytes})"


class _Cursor:
    """Reads little-endian values from the mapping, naming what it was reading when the file ends."""
    __slots__ = ("buf", "pos", "size", "path")

    def __init__(self, buf: Any, pos: int, size: int, path: str) -> None:
        self.buf = buf
        self.pos = pos
        self.size = size
        self.path = path

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise GGUFError(f"{self.path}: file truncated: {what} needs bytes {self.pos}..{self.pos + n} "
                            f"but the file has {self.size}")

    def scalar(self, code: str, what: str) -> Any:
        n = struct.calcsize("<" + code)
        self.need(n, what)
        v = struct.unpack_from("<" + code, self.buf, self.pos)[0]
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar("Q", what)
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="surrogateescape")

    def value(self, vt: int, what: str) -> Any:
        if vt not in _VT:
            raise GGUFError(f"{self.path}: {what} has unknown value type {vt}")
        name, code = _VT[vt]
        if code is not None:
            return self.scalar(code, what)
        if vt == 8:
            return self.string(what)
        et = self.scalar("I", what)
        n = self.scalar("Q", what)
        if et not in _VT:
            raise GGUFError(f"{self.path}: {what} is an array of unknown value type {et}")
        ecode = _VT[et][1]
        if ecode is not None:                       # numeric array: one unpack
            size = struct.calcsize("<" + ecode) * n
            self.need(size, what)
            vals = list(struct.unpack_from(f"<{n}{ecode}", self.buf, self.pos))
            self.pos += size
            return vals
        if et == 8:
            return self._strings(n, what)
        return [self.value(et, f"{what}[{i}]") for i in range(n)]

    def _strings(self, n: int, what: str) -> List[str]:
        out = []
        buf, pos, size = self.buf, self.pos, self.size
        unpack = struct.unpack_from
        for i in range(n):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, f"{what}[{i}]")
            k = unpack("<Q", buf, pos)[0]
            pos += 8
            if pos + k > size:
                self.pos = pos
                self.need(k, f"{what}[{i}]")
            raw = bytes(buf[pos:pos + k])
            pos += k
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(raw.decode("utf-8", errors="surrogateescape"))
        self.pos = pos
        return out


class GGUFFile:
    """A GGUF file, memory-mapped and parsed (header, metadata, tensor infos).

    Parameters
    ----------
    path : str or os.PathLike
        The file. It stays mapped until ``close()`` (or the end of a ``with`` block).

    Attributes
    ----------
    version : int
        2 or 3.
    metadata : dict
        Every key -> value: ints, floats, bools, str, or lists of those.
    tensors : dict
        Tensor name -> ``TensorInfo``, in file order.
    alignment : int
        ``general.alignment`` (default 32).
    data_offset : int
        Where the tensor data region starts.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"]) -> None:
        self.path = os.fspath(path)
        self._fd: Optional[int] = None
        self._map: Optional[mmap.mmap] = None
        self._mv: Optional[memoryview] = None
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise GGUFError(f"{self.path}: file truncated: empty file")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            # the same open file for upload(via="read"): reads by descriptor, never by path,
            # so a file renamed over this one since cannot be read in its place
            self._fd = os.dup(f.fileno())
        self.file_size = size
        self._mv = memoryview(self._map)
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    # -- parsing
    def _parse(self) -> None:
        mv = self._mv
        assert mv is not None
        c = _Cursor(mv, 0, self.file_size, self.path)
        c.need(4, "the magic")
        magic = bytes(mv[0:4])
        if magic != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
        c.pos = 4
        version = c.scalar("I", "the version")
        if version not in (2, 3):
            if version & 0xFFFF == 0 and version:
                raise GGUFError(f"{self.path}: a big-endian GGUF file; only little-endian files are supported")
            raise GGUFError(f"{self.path}: GGUF version {version} is not supported (2 and 3 are)")
        self.version = version
        n_tensors = c.scalar("Q", "the tensor count")
        n_kv = c.scalar("Q", "the metadata count")
        self.metadata: Dict[str, Any] = {}
        self.metadata_types: Dict[str, str] = {}
        for i in range(n_kv):
            key = c.string(f"metadata key #{i}")
            vt = c.scalar("I", f"the type of metadata {key!r}")
            self.metadata[key] = c.value(vt, f"metadata {key!r}")
            self.metadata_types[key] = _VT.get(vt, ("?", None))[0]
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFError(f"{self.path}: general.alignment = {align!r} is not a power of two")
        self.alignment = align
        infos = []
        for i in range(n_tensors):
            name = c.string(f"tensor info #{i} (name)")
            nd = c.scalar("I", f"tensor {name!r} (dimension count)")
            if nd > 8:
                raise GGUFError(f"{self.path}: tensor {name!r} has {nd} dimensions (malformed file)")
            dims = tuple(c.scalar("Q", f"tensor {name!r} (dimensions)") for _ in range(nd))
            tid = c.scalar("I", f"tensor {name!r} (type)")
            off = c.scalar("Q", f"tensor {name!r} (offset)")
            if tid not in _TYPES:
                raise GGUFError(f"{self.path}: tensor {name!r} has unknown ggml type {tid}")
            infos.append((name, dims, tid, off))
        self.data_offset = (c.pos + align - 1) // align * align
        self.tensors: Dict[str, TensorInfo] = {}
        for name, dims, tid, off in infos:
            tname, be, bb = _TYPES[tid]
            n = 1
            for d in dims:
                n *= d
            if dims and dims[0] % be:
                raise GGUFError(f"{self.path}: tensor {name!r} ({tname}) has rows of {dims[0]} elements, "
                                f"not a multiple of the {be}-element block")
            nbytes = n // be * bb
            if off % align:
                raise GGUFError(f"{self.path}: tensor {name!r} at data offset {off} is not {align}-aligned")
            start = self.data_offset + off
            if start + nbytes > self.file_size:
                raise GGUFError(f"{self.path}: file truncated: tensor {name!r} ({tname}, {nbytes} bytes) "
                                f"needs bytes {start}..{start + nbytes} but the file has {self.file_size}")
            if name in self.tensors:
                raise GGUFError(f"{self.path}: tensor {name!r} appears twice")
            self.tensors[name] = TensorInfo(name, dims, tid, start, nbytes, self)

    # -- access
    def _view(self, offset: int, nbytes: int) -> memoryview:
        if self._mv is None:
            raise ValueError(f"{self.path}: the file is closed")
        return self._mv[offset:offset + nbytes]

    def __getitem__(self, key: str) -> Any:
        """A metadata value; a missing key raises GGUFError naming it."""
        try:
            return self.metadata[key]
        except KeyError:
            raise GGUFError(f"{self.path}: metadata key {key!r} is missing") from None

    def __contains__(self, key: str) -> bool:
        return key in self.metadata

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def tensor(self, name: str) -> TensorInfo:
        """The tensor ``name``; a missing one raises GGUFError naming it."""
        try:
            return self.tensors[name]
        except KeyError:
            raise GGUFError(f"{self.path}: tensor {name!r} is missing") from None

    @property
    def architecture(self) -> str:
        return str(self["general.architecture"])

    def close(self) -> None:
        """Unmap the file. Views from ``TensorInfo.data`` must be released first."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._mv is not None:
            self._mv.release()
            self._mv = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a caller still holds a view: the mapping goes with it
                pass
            self._map = None

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, version={self.version}, {len(self.metadata)} keys, "
                f"{len(self.tensors)} tensors)")


def open_gguf(path: Union[str, "os.PathLike[str]"]) -> GGUFFile:
    """Open and parse a GGUF file (see ``GGUFFile``)."""
    return GGUFFile(path)


# -- upload -------------------------------------------------------------------------------

_PIECE = 64 << 20       # bytes per staged copy (and per progress-bar step)
_UPLOAD_ALIGN = 256     # device offset of each entry in the arena
_SPAN_PIECE = 256 << 20  # bytes per staged copy of upload(via="device")
_READ_MIN_STEP = 1 << 20  # upload(via="read"): the least bytes one thread reads of a piece

#: Phases of the last ``upload`` in this process (seconds, bytes): where a load's time goes
#: (``alloc_s``: the arena and staging buffer; ``htod_s``: the staged host-to-device copies,
#: done when they return; ``place_s``: the device-to-device placement and the final sync).
LAST_UPLOAD: Dict[str, Any] = {}


class _Progress:
    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.done, self.label, self.enabled = total, 0, label, enabled
        self.t0 = time.perf_counter()
        self.last = 0.0

    def step(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.1 and self.done < self.total:
            return
        self.last = now
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(30 * frac)
        rate = self.done / max(now - self.t0, 1e-9) / 1e9
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {self.done / 1e9:6.2f}/{self.total / 1e9:.2f} GB "
                         f"{rate:5.1f} GB/s")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


Layout = Sequence[Union[str, Tuple[str, Sequence[str]]]]


def plan_upload(f: GGUFFile, layout: Layout) -> Tuple[List[Tuple[str, int, int, List[TensorInfo]]], int]:
    """Check every entry of ``layout`` and place it: [(key, arena offset, nbytes, tensors)], total.

    An entry is a tensor name, or ``(key, [names...])``: tensors stored back to back
    (rows concatenated: same type and row length), e.g. Q, K and V as one matrix.
    Raises GGUFError (missing tensor, unsupported type, mismatched rows) and takes no memory.
    """
    placed = []
    off = 0
    for entry in layout:
        if isinstance(entry, str):
            key, names = entry, [entry]
        else:
            key, names = entry[0], list(entry[1])
        infos = [f.tensor(n) for n in names]
        for t in infos:
            t.check_supported()
        if len(infos) > 1:
            t0 = infos[0]
            for t in infos[1:]:
                if t.type != t0.type or t.dims[:1] != t0.dims[:1] or len(t.dims) != 2:
                    raise GGUFError(f"{f.path}: cannot store {t.name!r} ({t.type_name}, dims {t.dims}) after "
                                    f"{t0.name!r} ({t0.type_name}, dims {t0.dims}) as one matrix")
        n = sum(t.nbytes for t in infos)
        placed.append((key, off, n, infos))
        off = (off + n + _UPLOAD_ALIGN - 1) // _UPLOAD_ALIGN * _UPLOAD_ALIGN
    return placed, off


def _read_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _pread_into(fd: int, buf: memoryview, a: int, b: int, offset: int, path: str) -> None:
    """Fill ``buf[a:b]`` from ``fd`` at ``offset`` (short reads continued; end of file raises).
    Every slice it makes is released on return, so the buffer can be closed after an error."""
    done = a
    while done < b:
        with buf[done:b] as mv:
            n = os.preadv(fd, [mv], offset + done - a)
        if n <= 0:
            raise GGUFError(f"{path}: file truncated: bytes {offset + done - a}..{offset + b - a} "
                            f"could not be read (end of file)")
        done += n


def _read_span(f: GGUFFile, tmp: Any, lo: int, span: int, stream: Any, device: Any, bar: "_Progress") -> None:
    """upload(via="read"): file bytes [lo, lo + span) into ``tmp``: each 64 MiB piece read by
    ``_read_threads()`` threads (``os.preadv`` releases the GIL) into one of three
    page-locked buffers, then copied asynchronously to the device while the next is read.
    Complete on return."""
    import barecuda
    from concurrent.futures import ThreadPoolExecutor

    fd = f._fd
    assert fd is not None
    nbuf = 3
    # the copies go on the caller's stream (the legacy stream for None, as the placement after)
    s = stream if stream is not None else barecuda.Stream.default(device)
    bufs: List[Any] = [barecuda.PinnedBuffer(min(_PIECE, span), device=device) for _ in range(nbuf)]
    views = [memoryview(b).cast("B") for b in bufs]
    done: List[Any] = [None] * nbuf
    workers = _read_threads()
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="barecuda-gguf-read") as ex:
            for i, s0 in enumerate(range(0, span, _PIECE)):
                k = min(_PIECE, span - s0)
                j = i % nbuf
                if done[j] is not None:
                    done[j].synchronize()      # the copy out of this buffer has finished
                step = max(_READ_MIN_STEP, (k // workers + 4095) & ~4095)
                futs = [ex.submit(_pread_into, fd, views[j], a, min(a + step, k), lo + s0 + a, f.path)
                        for a in range(0, k, step)]
                for fu in futs:
                    fu.result()
                with views[j][:k] as part:
                    tmp[s0:s0 + k].copy_from(part, s)
                done[j] = s.record()
                bar.step(min(k * bar.total // span, bar.total - bar.done - 1) if s0 + k < span
                         else bar.total - bar.done)
        s.synchronize()
    finally:
        for v in views:
            v.release()
        for b in bufs:
            b.close()                          # waits for a copy still reading it


def upload(f: GGUFFile, layout: Optional[Layout] = None, *, device: Any = None, stream: Any = None,
           progress: Optional[bool] = None, via: str = "auto") -> Dict[str, Any]:
    """Upload tensors to the GPU through the pinned staging path; returns key -> DeviceBuffer.

    Parameters
    ----------
    f : GGUFFile
    layout : list, optional
        Tensor names, or ``(key, [names])`` entries whose tensors are stored back to back
        (see ``plan_upload``); default: every tensor of the file, in file order.
    device, stream :
        Where and on which stream (default: the current device, the legacy stream).
    progress : bool, optional
        Draw a progress bar on stderr (default: for uploads of 256 MB or more when
        stderr is a terminal).
    via : {"auto", "device", "direct", "read"}
        "direct": one staged copy per tensor (per 64 MiB of it) straight into place.
        "device": the file's span of these tensors in 256 MiB staged copies into a
        temporary device buffer, then device-to-device copies into place (long copies
        keep the staging pipeline full; costs the span in device memory for the while).
        "read": as "device", but the span is read with ``os.preadv`` by several threads
        straight into page-locked buffers (no page faults on the mapping, no second host
        copy), each 64 MiB piece copied to the device while the next is read (POSIX only).
        "auto" (default): "device" for spans of 256 MiB or more when the device has the
        room (the span, the arena and 1 GiB free), else "direct".

    Every entry is checked before the one arena (a single allocation) is taken; each
    value of the result is a uint8 view into it (``.ptr`` is 256-byte aligned).
    The copies are complete on return.
    """
    import barecuda
    from barecuda._staging import copy_htod

    t0 = time.perf_counter()
    if layout is None:
        layout = list(f.tensors)
    placed, total = plan_upload(f, layout)
    if progress is None:
        progress = total >= (256 << 20) and sys.stderr.isatty()
    if via not in ("auto", "device", "direct", "read"):
        raise ValueError(f"via={via!r}: 'auto', 'device', 'direct' or 'read'")
    if via == "read" and not hasattr(os, "preadv"):
        raise ValueError("via='read' needs os.preadv (POSIX); use 'device' or 'direct'")
    if via == "read" and f._fd is None:
        raise ValueError(f"{f.path}: the file is closed")
    tensors = [t for p in placed for t in p[3]]
    lo = min((t.offset for t in tensors), default=0)
    hi = max((t.offset + t.nbytes for t in tensors), default=0)
    span = hi - lo
    if via == "auto":
        via = "direct"
        if span >= (256 << 20):
            free, _ = barecuda.Device(int(device) if device is not None else None).mem_info()
            if free >= span + total + (1 << 30):
                via = "device"
    arena = barecuda.empty(max(total, 1), "uint8", device=device, stream=stream)
    LAST_UPLOAD.clear()
    LAST_UPLOAD.update(via=via, bytes=total, span=span, alloc_s=0.0, htod_s=0.0, place_s=0.0)
    t1 = time.perf_counter()
    bar = _Progress(sum(p[2] for p in placed), f"upload {os.path.basename(f.path)}", bool(progress))
    out: Dict[str, Any] = {"__arena__": arena}
    base = arena.ptr
    if via in ("device", "read") and span:
        tmp = barecuda.empty(span, "uint8", device=device, stream=stream)
        t2 = time.perf_counter()
        LAST_UPLOAD["alloc_s"] = t2 - t0
        if via == "read":
            _read_span(f, tmp, lo, span, stream, device, bar)
        for s0 in range(0, span if via == "device" else 0, _SPAN_PIECE):
            k = min(_SPAN_PIECE, span - s0)
            mv = f._view(lo + s0, k)
            try:
                copy_htod(tmp.ptr + s0, mv, stream, device=device)
            finally:
                mv.release()
            bar.step(min(k * bar.total // span, bar.total - bar.done - 1) if s0 + k < span else bar.total - bar.done)
        t1 = time.perf_counter()
        LAST_UPLOAD["htod_s"] = t1 - t2
        for key, off, n, infos in placed:
            d = off
            for t in infos:
                arena[d:d + t.nbytes].copy_from(tmp[t.offset - lo:t.offset - lo + t.nbytes], stream)
                d += t.nbytes
            out[key] = arena[off:off + n]
        if stream is not None:
            stream.synchronize()
        del tmp
        placed = []
    else:
        LAST_UPLOAD["alloc_s"] = t1 - t0
    for key, off, n, infos in placed:
        dst = base + off
        for t in infos:
            # file order is usually device order: one staged copy per 64 MiB piece
            for s in range(0, t.nbytes, _PIECE):
                k = min(_PIECE, t.nbytes - s)
                mv = f._view(t.offset + s, k)
                try:
                    copy_htod(dst + s, mv, stream, device=device)
                finally:
                    mv.release()
                bar.step(k)
            dst += t.nbytes
        out[key] = arena[off:off + n]
    if via == "direct" or not span:
        LAST_UPLOAD["htod_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
    if stream is not None:
        stream.synchronize()
    else:
        barecuda.Device(int(device) if device is not None else None).synchronize()
    LAST_UPLOAD["place_s"] = time.perf_counter() - t1
    LAST_UPLOAD["total_s"] = time.perf_counter() - t0
    return out
