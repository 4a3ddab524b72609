"""Argument checks shared by every op: pointer-like -> DeviceBuffer view, dtype codes,
row geometry, ``out=`` allocation, device agreement.

Everything here raises ``TypeError`` (wrong kind of object or dtype) or ``ValueError``
(wrong shape, stride, alignment, device) *before* any launch. Arrays are resolved
with ``barecuda.as_device_buffer(x, stream=stream)``, which also orders a foreign
array's producer stream before ``stream`` (docs/interop.md); a ``DeviceBuffer`` is
taken as is. No numpy, no torch import.
"""
import ctypes
from typing import Any, Callable, Dict, Tuple

from barecuda._buffer import DeviceBuffer, empty
from barecuda._interop import as_device_buffer

__all__ = ["array", "float_code", "rows", "collapse", "row_input", "operand", "out_array", "same_device", "check_align",
           "FLOAT_CODES", "CODE_DTYPE", "ITEMSIZE", "scalar_f32", "int_arg"]

# barecuda dtype name -> the suffix of kernel entry points (<op>_<code>_<variant>)
FLOAT_CODES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
CODE_DTYPE = {v: k for k, v in FLOAT_CODES.items()}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint32": 4, "float64": 8}


def array(x, name, stream=None):
    """``x`` as a DeviceBuffer (a view for foreign arrays; ``x`` itself when it is one).

    Raises TypeError for anything that is not a device array with a shape and dtype
    (an int address has neither: wrap it with ``DeviceBuffer.view`` or give a buffer).
    """
    if type(x) is DeviceBuffer:
        if x.is_closed:
            raise ValueError(f"{name}: the buffer is closed")
        return x
    if x is None:
        raise TypeError(f"{name}: expected a device array, got None")
    if isinstance(x, (int, float, bool)):
        raise TypeError(f"{name}: expected a device array (DeviceBuffer, torch/CuPy tensor, "
                        f"__cuda_array_interface__/__dlpack__), got {type(x).__name__}: an address has "
                        "no shape or dtype")
    try:
        return as_device_buffer(x, stream=stream)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None


def dt(b):
    """The dtype name of a DeviceBuffer ('bfloat16', 'float16', 'int32'...): its dtype is a
    str without numpy and a numpy dtype with it."""
    d = b.dtype
    if type(d) is str:
        return d
    n = _DT_NAMES.get(d)
    if n is None:
        n = _DT_NAMES[d] = getattr(d, "name", str(d))      # numpy's .name is slow: once per dtype
    return n


_DT_NAMES: Dict[Any, str] = {}


def float_code(b, name, allowed=FLOAT_CODES):
    """The kernel dtype code ('f32', 'f16', 'bf16') of ``b``; TypeError otherwise."""
    code = allowed.get(dt(b))
    if code is None:
        raise TypeError(f"{name}: dtype {dt(b)} is not supported (expected one of "
                        f"{', '.join(sorted(allowed))})")
    return code


def rows(b, name):
    """(n_rows, n_cols, row_stride) of ``b`` seen as rows of its last axis.

    The last axis must be contiguous and the leading axes must collapse to one
    uniformly strided axis (any contiguous array, a row slice of one, a
    transposed-leading view whose leading strides nest). Strides are in elements.
    """
    shape = b.shape
    if len(shape) == 0:
        raise ValueError(f"{name}: expected at least 1 dimension, got a scalar")
    cols = shape[-1]
    st = b.strides
    if st is None:
        n = 1
        for s in shape[:-1]:
            n *= s
        return n, cols, cols
    if cols > 1 and st[-1] != 1:
        raise ValueError(f"{name}: the last axis must be contiguous (stride {st[-1]} elements); "
                         "make it contiguous first (t.contiguous(), cupy.ascontiguousarray(a))")
    n, stride = collapse(shape[:-1], st[:-1], name, "one strided axis of rows; make it contiguous first")
    if stride is None:
        stride = cols
    if n > 1 and stride < cols:
        raise ValueError(f"{name}: rows overlap (row stride {stride} < {cols} columns)")
    return n, cols, stride


def collapse(shape, strides, name, what):
    """(count, stride) of axes ``shape`` with element ``strides`` seen as one strided axis
    (axes of length 1 skipped; stride None when all are); ValueError when they do not nest."""
    n, stride = 1, None
    for size, st in zip(reversed(shape), reversed(strides)):      # innermost first
        if size != 1:
            if stride is None:
                stride = st
            elif st != stride * n:
                raise ValueError(f"{name}: leading axes with strides {tuple(strides)} do not collapse to {what}")
            n *= size
    return n, stride


def row_input(x, name, stream):
    """(buffer, dtype code, rows, cols, row stride) of a row op's input: a float32/16/bf16
    array with a contiguous, non-empty last axis, aligned to its element size."""
    bx = array(x, name, stream)
    code = float_code(bx, name)
    n, cols, sx = rows(bx, name)
    check_align(bx, name)
    if cols < 1:
        raise ValueError(f"{name}: the last axis is empty")
    return bx, code, n, cols, sx


def operand(v, name, ref, ref_name, stream, shape=None):
    """A second operand ``v`` of ``ref``'s dtype (and ``shape`` when given), aligned to its
    element size: its buffer. TypeError / ValueError name both."""
    b = array(v, name, stream)
    if dt(b) != dt(ref):
        raise TypeError(f"{name}: dtype {dt(b)}, expected {dt(ref)} (that of {ref_name})")
    if shape is not None and tuple(b.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(b.shape)}, expected {shape}")
    check_align(b, name)
    return b


def check_align(b, name, nbytes=None):
    """The address must be aligned to the element size (or ``nbytes``)."""
    a = nbytes or b.itemsize
    if b.ptr % a:
        raise ValueError(f"{name}: address 0x{b.ptr:x} is not aligned to {a} bytes")


def same_device(first, *others):
    """ValueError unless every array given (name, buffer) lies on ``first``'s device."""
    n0, b0 = first
    d0 = int(b0.device)
    for n, b in others:
        if b is not None and int(b.device) != d0:
            raise ValueError(f"{n} is on device {int(b.device)} but {n0} is on device {d0}")
    return d0


def out_array(out, shape, dtype, like, stream, name="out"):
    """``out`` checked against ``shape``/``dtype`` (contiguous, same device as
    ``like``), or a new buffer on ``like``'s device, ordered on ``stream``."""
    shape = tuple(shape)
    if out is None:
        if stream is None:
            return empty(shape, dtype, device=like.device)
        return empty(shape, dtype, device=like.device, stream=stream)
    o = array(out, name, stream)
    if o.readonly:
        raise ValueError(f"{name}: read-only array")
    if dt(o) != dtype:
        raise TypeError(f"{name}: dtype {dt(o)}, expected {dtype}")
    if tuple(o.shape) != shape:
        # accept any shape with the same number of elements only when it is the same rows x cols
        raise ValueError(f"{name}: shape {tuple(o.shape)}, expected {shape}")
    if o.strides is not None:
        n = 1
        for s in shape:
            n *= s
        if n > 1:
            raise ValueError(f"{name}: must be contiguous")
    if int(o.device) != int(like.device):
        raise ValueError(f"{name} is on device {int(o.device)} but the input is on device {int(like.device)}")
    return o


def scalar_f32(v, name):
    """A Python float for a float32 kernel parameter; TypeError for non-numbers."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            return float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{name}: expected a number, got {type(v).__name__}") from None
    return float(v)


def f32(v):
    """A float32 kernel argument as a 4-byte ctypes scalar: it packs into a parameter whose
    type is known (PTX) or only its size (a cubin loaded without PTX: a cache hit, a prebuilt
    file), where a Python float would be refused as ambiguous."""
    return ctypes.c_float(v)


def int_arg(v, name, lo=None, hi=None):
    """An int in [lo, hi]; TypeError for non-integers, ValueError out of range."""
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import operator
            v = operator.index(v)
        except TypeError:
            raise TypeError(f"{name}: expected an int, got {type(v).__name__}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name}={v}: out of range [{lo}, {hi}]")
    return v


def vec_ok(itemsize, cols, arrays_and_strides):
    """True when the 16-byte vector path applies: ``cols`` a multiple of 16/itemsize and
    every (buffer or None, row stride in elements) 16-byte aligned."""
    if cols % (16 // itemsize):
        return False
    for b, st in arrays_and_strides:
        if b is not None and (b.ptr % 16 or (st * itemsize) % 16):
            return False
    return True


def go(kernel, grid, block, args, stream, plan, shared_mem=0):
    """Launch now, or (``plan``) return the bound ``LaunchPlan``."""
    if plan:
        return kernel.bind(grid, block, *args, stream=stream, shared_mem=shared_mem)
    kernel.launch(grid, block, *args, stream=stream, shared_mem=shared_mem)
    return None


def row_kernel(vec, cols, vn, kernel_of):
    """(kernel, block) of a one-block-per-row kernel (rowwise.cuh): the variant keeping
    the fewest chunks a thread (v1, v2, v4, v8) with about 256 threads covering the row;
    ``s8`` (scalar, 8 a thread) without the vector path. ``kernel_of(variant)`` gives the
    kernel; the block is capped by what the kernel allows (its registers). Rows longer
    than the block holds take the kernel's streaming path."""
    if vec:
        nch = cols // vn
        kv = 1 if nch <= 256 else 2 if nch <= 512 else 4 if nch <= 1024 else 8
        var = f"v{kv}"
    else:
        nch, kv, var = cols, 8, "s8"
    k = kernel_of(var)
    cap = k.max_threads_per_block & ~31
    t = ((-(-nch // kv)) + 31) & ~31
    return k, max(32, min(cap, t))


_sm_count: Dict[int, int] = {}
_wave: Dict[Tuple[int, int, int], int] = {}


def sm_count(device):
    """The device's multiprocessor count (cached)."""
    d = int(device)
    n = _sm_count.get(d)
    if n is None:
        from barecuda._device import Device
        n = _sm_count[d] = Device(d).attribute("multiprocessor_count")
    return n


def wave(kernel, block, n, device):
    """Grid of a kernel whose blocks loop over ``n`` rows: one resident wave (blocks a
    multiprocessor holds x multiprocessors), at most ``n``."""
    key = (id(kernel), block, int(device))
    w = _wave.get(key)
    if w is None:
        w = _wave[key] = max(1, kernel.max_active_blocks_per_sm(block)) * sm_count(device)
    return min(n, w)


def row_out(out, x, bx, sx, stream):
    """(output buffer, its row stride) of a row op: ``x`` itself (``out is x``: in place, x's
    strides) or ``out`` / a new contiguous array shaped like x."""
    if out is x:
        return bx, sx
    return out_array(out, bx.shape, dt(bx), bx, stream), bx.shape[-1]


def attach_plan(op: Callable[..., Any], plan: Callable[..., Any]) -> None:
    """``op.plan = plan``: an op's plan form, reached as ``barecuda.kernels.rmsnorm.plan``."""
    setattr(op, "plan", plan)


def ptr_or_0(b):
    """A kernel pointer argument: the buffer, or 0 (null) for an absent optional one."""
    return 0 if b is None else b
