"""GGUF weight formats: the format table, :class:`QuantWeight` (a tensor's bytes, format
and logical shape), and the ``dequantize`` op (csrc/dequant.cu).

A GGUF tensor's bytes are uploaded unchanged; ``QuantWeight(buffer, "q4_k", (N, K))``
names them for :func:`barecuda.kernels.matvec` and :func:`dequantize`. Formats are
spelled as ggml does (``"Q4_K"``, any case) or by ggml's type number (``12``, a
``gguf.GGMLQuantizationType``). The dense formats ``f32``/``f16``/``bf16`` are accepted
too, so a loader can wrap every tensor of a file the same way.
"""
from typing import Any, Tuple

from barecuda.kernels import _args, _registry
from barecuda.kernels._opcall import op
from barecuda.kernels._opkey import keyed_weight_class

__all__ = ["QuantWeight", "FORMATS", "format_info", "dequantize", "plan_dequantize"]

# name -> (ggml type number, weights per block, bytes per block)
FORMATS = {
    "f32": (0, 1, 4),
    "f16": (1, 1, 2),
    "bf16": (30, 1, 2),
    "q4_0": (2, 32, 18),
    "q4_1": (3, 32, 20),
    "q8_0": (8, 32, 34),
    "q4_k": (12, 256, 144),
    "q6_k": (14, 256, 210),
}
_BY_NUMBER = {v[0]: k for k, v in FORMATS.items()}
DENSE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_DTYPE_FORMAT = {v: k for k, v in DENSE.items()}
_SEG = {32: 64, 256: 8}          # blocks per staged segment (dequant.cu / matvec.cu: SEGB)
_WARPS = 4                       # DQ_WARPS / MV_WARPS
# blocks a multiprocessor (the kernel loops over the segments left); 0: a block a 4-segment
# group, no loop (bench: kernels_matvec_rows.dequant_grid_rows)
GRID_PER_SM = 0
# GGUF blocks a CUDA block takes where that is not a 4-segment group (_SEG x _WARPS): Q6_K's
# default kernel takes a run of 128 quads (dequant.cu's DQ6_Q=1: 4 parts a thread) = 16 blocks
_CTA_BLOCKS = {"q6_k": 16}


def format_info(fmt):
    """``(name, ggml_type, block_weights, block_bytes)`` of a format given by name or number."""
    if isinstance(fmt, str):
        name = fmt.lower()
        if name in _DTYPE_FORMAT:
            name = _DTYPE_FORMAT[name]
        if name not in FORMATS:
            raise ValueError(f"format {fmt!r} is not supported (one of {', '.join(FORMATS)})")
    else:
        try:
            import operator
            num = operator.index(fmt)
        except TypeError:
            raise TypeError(f"format: expected a name or a ggml type number, got {type(fmt).__name__}") from None
        name = _BY_NUMBER.get(num)
        if name is None:
            raise ValueError(f"ggml type {num} is not supported (one of {sorted(_BY_NUMBER)})")
    t, qk, nb = FORMATS[name]
    return name, t, qk, nb


class QuantWeight:
    """A weight tensor in a GGUF format: its bytes on the device, format and logical shape.

    Parameters
    ----------
    data : device array
        The tensor's bytes exactly as GGUF stores them (any dtype; a ``uint8``
        ``DeviceBuffer`` or tensor typically), contiguous, 16-byte aligned, of exactly
        ``rows * (cols / block_weights) * block_bytes`` bytes.
    format : str or int
        ``"q4_k"``, ``"Q6_K"``, ``"q8_0"``, ``"q4_0"``, ``"q4_1"``, ``"f16"``, ``"bf16"``,
        ``"f32"`` or ggml's type number (``gguf.GGMLQuantizationType``).
    shape : tuple of int
        The logical shape, rows first as numpy sees the dequantized tensor: ``(N, K)`` for
        a matvec weight (GGUF lists dimensions the other way round: ``ne = [K, N]``).
        The last dimension must be a multiple of the block size (32 or 256).

    Attributes
    ----------
    data : DeviceBuffer
    format : str        canonical name (``"q4_k"``)
    ggml_type : int
    shape : tuple of int

    A QuantWeight is immutable (make a new one for other bytes, format or shape): ops key a
    call on its format, shape and data buffer, read in C (kernels/_opkey.pyx), so a repeated
    ``matvec(qw, x)`` is one recorded launch.
    """
    __slots__ = ("data", "format", "ggml_type", "shape", "block", "block_bytes")
    data: Any                   # a DeviceBuffer
    format: str
    ggml_type: int
    shape: Tuple[int, ...]
    block: int
    block_bytes: int

    def __init__(self, data, format, shape):
        name, t, qk, nbytes_block = format_info(format)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"QuantWeight: shape {shape} must have positive dimensions")
        if shape[-1] % qk:
            raise ValueError(f"QuantWeight: the last dimension ({shape[-1]}) must be a multiple of "
                             f"{qk}, the {name} block size")
        b = _args.array(data, "QuantWeight data")
        if b.strides is not None:
            raise ValueError("QuantWeight data: must be contiguous")
        n = 1
        for s in shape:
            n *= s
        want = n // qk * nbytes_block
        if b.nbytes != want:
            raise ValueError(f"QuantWeight data: {b.nbytes} bytes, but a {name} tensor of shape {shape} "
                             f"takes {want} ({n // qk} blocks of {nbytes_block} bytes)")
        if b.ptr % 16:
            raise ValueError(f"QuantWeight data: address 0x{b.ptr:x} is not 16-byte aligned")
        for a, v in (("data", b), ("format", name), ("ggml_type", t), ("shape", shape), ("block", qk),
                     ("block_bytes", nbytes_block)):
            object.__setattr__(self, a, v)

    def __setattr__(self, name, value):
        raise AttributeError(f"QuantWeight is immutable: cannot set {name!r} (make a new QuantWeight)")

    def __delattr__(self, name):
        raise AttributeError(f"QuantWeight is immutable: cannot delete {name!r}")

    def __reduce__(self):
        # copy/pickle through the constructor (the default slot-state path would set attributes)
        return QuantWeight, (self.data, self.format, self.shape)

    @property
    def nbytes(self):
        return self.data.nbytes

    @property
    def ptr(self):
        return self.data.ptr

    @property
    def dense(self):
        """True for f32/f16/bf16 (no blocks)."""
        return self.format in DENSE

    def __repr__(self):
        return f"QuantWeight({self.format}, shape={self.shape}, {self.nbytes} bytes at 0x{self.data.ptr:x})"


def weight_facts(w, name, stream=None):
    """``(format, ggml_type, buffer, N, K)`` of a matvec weight: a 2-D ``QuantWeight`` or a
    row-major ``[N, K]`` float32/float16/bfloat16 device array (``_matvec`` and ``_fused``)."""
    if isinstance(w, QuantWeight):
        if len(w.shape) != 2:
            raise ValueError(f"{name}: expected a 2-D weight [N, K], got shape {w.shape}")
        return w.format, w.ggml_type, w.data, w.shape[0], w.shape[1]
    b = _args.array(w, name, stream)
    fmt = _DTYPE_FORMAT.get(_args.dt(b))
    if fmt is None:
        raise TypeError(f"{name}: dtype {b.dtype} is not a weight dtype (float32, float16, bfloat16; "
                        "wrap GGUF block data in barecuda.kernels.QuantWeight)")
    if len(b.shape) != 2:
        raise ValueError(f"{name}: expected a 2-D weight [N, K], got shape {tuple(b.shape)}")
    n, k, stride = _args.rows(b, name)
    if stride != k:
        raise ValueError(f"{name}: rows must be contiguous (row stride {stride}, {k} columns)")
    return fmt, FORMATS[fmt][0], b, n, k


# plan_dequantize(pdl=True): the build with griddepcontrol (dequant.cu's DQ_PDL; sm_90 and newer,
# a plain launch of the default build below)
PDL_DEFINES = (("DQ_PDL", 1),)
# pdl=True plans' grid where it differs from the plain one: Q4_K a block a run of 24 GGUF blocks
# (dequant.cu's DQ_K4U x DQ_WARPS: a block's prefetch before the wait covers all of its work). H200
# 2026-11-27 10:0x, three rounds: pdl 78.8-79.0% of spec so against 78.0-78.1 on the plain grid
# (plain plans: 77.3-77.7 on this grid, 77.9-78.3 on theirs)
_PDL_CTA_BLOCKS = {"q4_k": 24}


def _prepare(buffer, format, shape, dtype, out, stream):
    if isinstance(buffer, QuantWeight):
        if format is not None or shape is not None:
            qw = QuantWeight(buffer.data, format or buffer.format, shape or buffer.shape)
        else:
            qw = buffer
    else:
        if format is None or shape is None:
            raise TypeError("dequantize: give format= and shape= (or a QuantWeight)")
        qw = QuantWeight(buffer, format, shape)
    if qw.dense:
        raise ValueError(f"dequantize: {qw.format} is not a block format (copy or cast it instead)")
    code = _args.FLOAT_CODES.get(dtype)
    if code is None:
        raise TypeError(f"dequantize: dtype {dtype!r} is not supported (float32, float16 or bfloat16)")
    y = _args.out_array(out, qw.shape, dtype, qw.data, stream)
    if y.ptr % 16:
        raise ValueError(f"out: address 0x{y.ptr:x} is not 16-byte aligned")
    nblocks = qw.data.nbytes // qw.block_bytes
    kern = _registry.get("dequant.cu", f"dequant_{qw.format}_{code}", (), int(qw.data.device))
    per = _CTA_BLOCKS.get(qw.format, _SEG[qw.block] * _WARPS)
    grid = -(-nblocks // per)
    if GRID_PER_SM:
        grid = max(1, min(grid, _args.sm_count(qw.data.device) * GRID_PER_SM))
    return kern, grid, qw, y, nblocks


keyed_weight_class(QuantWeight)


@op
def dequantize(buffer, format=None, shape=None, *, dtype="float16", out=None, stream=None):
    """Dequantize a GGUF tensor into a float array of its logical shape.

    Parameters
    ----------
    buffer : device array or QuantWeight
        The tensor's bytes (see :class:`QuantWeight`), or a ``QuantWeight``.
    format, shape
        The format and logical shape (omit both for a ``QuantWeight``).
    dtype : {"float16", "bfloat16", "float32"}
    out : device array, optional
        Contiguous, ``shape``, ``dtype``, 16-byte aligned.
    stream : Stream, optional

    Returns
    -------
    DeviceBuffer or the array given as ``out``
    """
    kern, grid, qw, y, nblocks = _prepare(buffer, format, shape, dtype, out, stream)
    return kern, grid, 32 * _WARPS, (qw.data, y, nblocks), y


def plan_dequantize(buffer, format=None, shape=None, *, dtype="float16", out, pdl=False, stream=None):
    """The launch of :func:`dequantize` packed once (``plan()`` replays it; ``graph.add_plan``).
    ``out`` is required: a plan writes into memory you name.

    ``pdl=True`` (compute capability 9.0 and newer; a plain launch elsewhere) launches it with
    programmatic stream serialization (``cuLaunchKernelEx``): it may start while the previous
    kernel on the stream finishes, asks the L2 for its first input bytes meanwhile, and waits
    for that kernel's results (``griddepcontrol.wait``) before it reads or writes anything, so
    the previous kernel may write the input or read ``out``. The overlap is kept in a graph
    made by stream capture or by ``graph.add_plan(plan, depends_on=<the previous kernel node>)``
    (a programmatic edge): a chain of such plans hides most of each launch's start and end."""
    if out is None:
        raise ValueError("plan_dequantize: out= is required")
    kern, grid, qw, y, nblocks = _prepare(buffer, format, shape, dtype, out, stream)
    if pdl:
        from barecuda.kernels._matmul import _cc
        pdl = _cc(qw.data.device) >= (9, 0)
    if pdl:
        from barecuda import LaunchConfig
        kern = _registry.get("dequant.cu", kern.name, PDL_DEFINES, int(qw.data.device))
        if qw.format in _PDL_CTA_BLOCKS and not GRID_PER_SM:
            grid = -(-nblocks // _PDL_CTA_BLOCKS[qw.format])
        return kern.bind_config(LaunchConfig(grid, 32 * _WARPS, stream=stream, programmatic_serialization=True),
                                qw.data, y, nblocks)
    return kern.bind(grid, 32 * _WARPS, qw.data, y, nblocks, stream=stream)


_args.attach_plan(dequantize, plan_dequantize)

_NAMES = tuple(f"dequant_{f}_{c}" for f in FORMATS if f not in DENSE for c in ("f32", "f16", "bf16"))
KERNELS = [("dequant.cu", _NAMES, ()), ("dequant.cu", _NAMES, PDL_DEFINES)]
