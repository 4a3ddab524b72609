"""Helpers shared by the test modules: import them from here, never from ``conftest``.

(``pytest tests bench`` loads two conftest modules, and the name ``conftest`` then
means only one of them.) Nothing here imports barecuda, numpy or pytest at import
time: child interpreters started by the tests import this module too.

- ``join_all``: join threads with a deadline instead of hanging the suite.
- ``FakeCuda`` (and ``Launch``): the ctypes view of the driver double's control API.
- ``child_env``, ``run_child``, ``result_of``: run code in a fresh interpreter against
  a given driver library (the barecuda under test, the tests directory importable).
- ``fresh``: random data of a dtype; ``pending_model``: the double's pending-work model;
  ``live_mem_after_gc``: live allocations once garbage and pool caches are gone.
- ``graph_double``, ``graphs_live``, ``execs_live``, ``fake_read``, ``fake_write``,
  ``vadd_block``: graphs on the double (tests/graph/).
- ``exchange_api_class``: a tensor class with DLPack's C exchange API (torch 2.10+'s).
- ``IMPORTS``: every way a user gets a second handle on our memory (views, re-imports,
  another library's wrapper: ``ForeignArray``; a hand-built CAI dict: ``cai_dict``).
- ``in_fork``: run code in a forked child; ``DriverCalls``: count every driver call
  (for "calls no driver": closed objects, objects made before a fork).
- ``ref_pack`` (with ``FMT``, ``INT_RANGES``, ``STRICT_RANGES``, ``struct_type``): the
  reference packer of a kernel's parameter block; ``no_launch``: a call that raises
  and launches nothing (tests/launch/).
- ``lowered_ptx_get``: barecuda.kernels' ``_registry.get`` for the driver double (PTX with
  its ISA line lowered; tests/kernels/, tests/models/).
"""
import ctypes
import json
import os
import re
import subprocess
import struct
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
ABI_H = os.path.join(REPO, "include", "barecuda", "cuda_abi.h")


def join_all(threads, timeout=120.0):
    """Join every thread within `timeout` seconds in all, then fail the test (instead
    of hanging it) if one is still running. Threads given here should be daemons, so
    that one stuck on a wait cannot hold the interpreter at exit either. Every test
    that waits on a thread does it through this, or with its own timeout."""
    end = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {timeout} s: {alive}"


@dataclass(frozen=True)
class Launch:
    """One launch as the fake driver recorded it."""
    name: str
    grid: tuple
    block: tuple
    shared: int
    stream: int            # the CUstream handle value (0 for the NULL stream)
    params: bytes          # the parameter buffer, exactly as the kernel would see it
    kind: str              # "kernel", "cooperative" or "ex"
    cluster: tuple
    cooperative: bool
    priority: int
    programmatic_serialization: int
    num_attrs: int
    used_extra: bool       # parameters came through `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER)


class FakeCuda:
    """ctypes view of the fake driver's control API (state shared with barecuda's copy)."""

    KINDS = ("kernel", "cooperative", "ex")

    def __init__(self, path):
        self.path = path
        lib = self.lib = ctypes.CDLL(path)
        c_uint_p = ctypes.POINTER(ctypes.c_uint)
        c_int_p = ctypes.POINTER(ctypes.c_int)
        sigs = {
            "fakecuda_reset": (ctypes.c_int, []),
            "fakecuda_fail": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
            "fakecuda_calls": (ctypes.c_longlong, [ctypes.c_char_p]),
            "fakecuda_delay": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]),
            "fakecuda_version_requested": (ctypes.c_int, [ctypes.c_char_p]),
            "fakecuda_live": (ctypes.c_int, [ctypes.c_char_p]),
            "fakecuda_mem_used": (ctypes.c_longlong, [ctypes.c_int]),
            "fakecuda_launch_count": (ctypes.c_longlong, []),
            "fakecuda_last_launch": (ctypes.c_int, [
                ctypes.c_int, ctypes.c_char_p, ctypes.c_int, c_uint_p, c_uint_p,
                ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_int]),
            "fakecuda_last_launch_ex": (ctypes.c_int, [
                ctypes.c_int, c_int_p, c_uint_p, c_int_p, c_int_p, c_int_p, c_int_p, c_int_p]),
            "fakecuda_set_attribute": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_int]),
            "fakecuda_current_device": (ctypes.c_int, [c_int_p]),
            "fakecuda_last_reason": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes

    def reset(self):
        self.lib.fakecuda_reset()

    def fail(self, symbol, code, after=0, times=1):
        """Make call number after+1 (from now) of `symbol` return `code`, `times` times (-1: forever)."""
        if self.lib.fakecuda_fail(symbol.encode(), int(code), int(after), int(times)) != 0:
            raise KeyError(f"the fake driver has no entry point {symbol!r}")

    def delay(self, symbol, usec):
        """Every later call of `symbol` sleeps `usec` microseconds at its entry (outside the
        double's lock, before it reads its arguments); 0 ends it, reset() clears all."""
        if self.lib.fakecuda_delay(symbol.encode(), int(usec)) != 0:
            raise KeyError(f"the fake driver has no entry point {symbol!r}")

    def calls(self, symbol):
        n = self.lib.fakecuda_calls(symbol.encode())
        if n < 0:
            raise KeyError(f"the fake driver has no entry point {symbol!r}")
        return n

    def version_requested(self, symbol):
        return self.lib.fakecuda_version_requested(symbol.encode())

    def live(self, kind):
        n = self.lib.fakecuda_live(kind.encode())
        if n < 0:
            raise KeyError(f"unknown kind {kind!r}")
        return n

    def mem_used(self, dev=0):
        return self.lib.fakecuda_mem_used(dev)

    def launch_count(self):
        return self.lib.fakecuda_launch_count()

    def set_attribute(self, dev, attr, value):
        if self.lib.fakecuda_set_attribute(dev, int(attr), value) != 0:
            raise ValueError(f"bad device {dev} or attribute {attr}")

    def last_reason(self):
        """Why the fake last rejected a launch ("" if it did not since the reset)."""
        buf = ctypes.create_string_buffer(256)
        self.lib.fakecuda_last_reason(buf, 256)
        return buf.value.decode()

    def current_device(self):
        d = ctypes.c_int(-1)
        return d.value if self.lib.fakecuda_current_device(ctypes.byref(d)) else None

    def last_launch(self, back=0):
        name = ctypes.create_string_buffer(256)
        dims = (ctypes.c_uint * 6)()
        shared = ctypes.c_uint()
        stream = ctypes.c_void_p()
        n = self.lib.fakecuda_last_launch(back, name, 256, dims, ctypes.byref(shared), ctypes.byref(stream),
                                          None, 0)
        if n < 0:
            raise IndexError(f"no launch {back} back (launch count {self.launch_count()})")
        params = ctypes.create_string_buffer(max(n, 1))
        self.lib.fakecuda_last_launch(back, None, 0, None, None, None, params, n)
        kind, coop, prio, serial, nattrs, extra = (ctypes.c_int() for _ in range(6))
        cluster = (ctypes.c_uint * 3)()
        self.lib.fakecuda_last_launch_ex(back, ctypes.byref(kind), cluster, ctypes.byref(coop), ctypes.byref(prio),
                                         ctypes.byref(serial), ctypes.byref(nattrs), ctypes.byref(extra))
        return Launch(name=name.value.decode(), grid=tuple(dims[:3]), block=tuple(dims[3:]), shared=shared.value,
                      stream=stream.value or 0, params=params.raw[:n], kind=self.KINDS[kind.value],
                      cluster=tuple(cluster), cooperative=bool(coop.value), priority=prio.value,
                      programmatic_serialization=serial.value, num_attrs=nattrs.value, used_extra=bool(extra.value))


# ------------------------------------------------------------ child interpreters
def child_env(lib, **env_extra):
    """Environment for a fresh interpreter that opens `lib` as the driver.

    PYTHONPATH: this directory (for ``_helpers`` and ``fakecuda``), then the barecuda
    this session imported (installed wheel or in-place build), then the rest. This
    process's ``FAKECUDA_*``/``BARECUDA_*`` settings are dropped: a child sees only
    what the test passes in `env_extra`."""
    import barecuda
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(barecuda.__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKECUDA_", "BARECUDA_"))}
    first = [TESTS, pkg_parent]
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) not in first]
    env["PYTHONPATH"] = os.pathsep.join(first + rest)
    env["BARECUDA_LIBCUDA"] = lib
    env.update({k: str(v) for k, v in env_extra.items()})
    return env


def run_child(code, lib, *args, timeout=120, **env_extra):
    """Run `code` (dedented) in a fresh interpreter with the driver `lib` (see
    child_env), from this directory; assert it exits 0 and return its stdout."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=child_env(lib, **env_extra),
                          capture_output=True, text=True, timeout=timeout, cwd=TESTS)
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def result_of(stdout):
    """The JSON of the last ``RESULT <json>`` line a child printed."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"child printed no result:\n{stdout}"
    return json.loads(lines[-1][len("RESULT "):])


# ------------------------------------------------------------------------ fork
def in_fork(body):
    """Run ``body()`` in a forked child and return the str it returned.

    The child leaves with ``os._exit`` (no atexit handlers, as multiprocessing's
    children); an exception in it is printed and fails the parent's assertion."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(rfd)
            data = body().encode()
            while data:
                data = data[os.write(wfd, data):]
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(wfd)
    chunks = []
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"the forked child failed (status {status})"
    return b"".join(chunks).decode()


class DriverCalls:
    """Counts the driver double's calls of every entry point the ABI header names (to
    check that something calls no driver at all: a closed object, a forked child)."""

    def __init__(self, fake, abi_h=ABI_H):
        self.fake = fake if isinstance(fake, FakeCuda) else FakeCuda(fake)    # a FakeCuda or its path
        with open(abi_h) as f:
            found = sorted(set(re.findall(r"\b(cu[A-Z]\w+)", f.read())))
        self.names = [n.encode() for n in found if self.fake.lib.fakecuda_calls(n.encode()) >= 0]
        assert len(self.names) > 50, self.names

    def total(self):
        """Driver calls so far, all entry points together."""
        return sum(self.fake.lib.fakecuda_calls(n) for n in self.names)

    def refusals(self, calls):
        """Run each of `calls` ({name: callable}); return what went wrong: a call that
        did not raise ForkedProcessError naming ``spawn``, or that called the driver."""
        from barecuda import ForkedProcessError
        fails = []
        for name, call in calls.items():
            n0 = self.total()
            try:
                call()
            except ForkedProcessError as e:
                if "spawn" not in str(e):
                    fails.append(f"{name}: the message does not name spawn: {e}")
            except BaseException as e:
                fails.append(f"{name}: {type(e).__name__}: {e}")
            else:
                fails.append(f"{name}: returned normally")
            if self.total() != n0:
                fails.append(f"{name}: {self.total() - n0} driver call(s)")
        return fails

    def fork_refusals(self, make_calls, namespace, names, after=None):
        """The fork check, run in a forked child (in_fork): each of ``make_calls()``'s
        ``{name: callable}`` must raise ForkedProcessError naming ``spawn`` with no driver
        call (refusals); then ``after()`` (what must stay usable and call nothing: reprs,
        bookkeeping); then the objects ``names`` (space-separated) are dropped from
        ``namespace`` and collected with warnings as errors (destructors leak silently),
        and the child must have made no driver call in all. Returns what went wrong, a
        line each ("" when nothing). ``make_calls`` builds the dict in the child, so that
        nothing but ``namespace`` holds the objects when they are dropped."""
        import gc
        import warnings

        def child():
            before = self.total()
            fails = self.refusals(make_calls())
            if after is not None:
                after()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for n in names.split():
                    del namespace[n]
                gc.collect()
            if self.total() != before:
                fails.append(f"{self.total() - before} driver call(s) in the child in all")
            return "\n".join(fails)
        return in_fork(child)

def fresh(n, dtype, seed=None):
    """n random values of `dtype`; `seed` is a seed or a numpy Generator (drawn from as is).
    (numpy is imported here, not at module level: child interpreters import this module)."""
    import numpy as np
    g = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return g.standard_normal(n).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return g.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
    if dt.kind == "b":
        return g.integers(0, 2, size=n).astype(bool)
    raise AssertionError(dt)


def pending_model(fake):
    """The double's pending-work model (tests/fakecuda): which memory queued work still
    uses, and frees that came too early. Returns the double's library, typed."""
    lib = fake.lib
    lib.fakecuda_pending_mode.argtypes = [ctypes.c_int]
    lib.fakecuda_pending_mode.restype = ctypes.c_int
    lib.fakecuda_early_frees.argtypes = []
    lib.fakecuda_early_frees.restype = ctypes.c_longlong
    lib.fakecuda_pending_refs.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_int]
    lib.fakecuda_pending_refs.restype = ctypes.c_int
    lib.cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_size_t]
    lib.cuMemFreeAsync.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p]
    return lib


def live_mem_after_gc(fake):
    """Live device allocations in the double once garbage and the caching pools' spare
    blocks are gone."""
    import gc
    import barecuda
    gc.collect()
    barecuda.trim_memory()
    return fake.live("mem")


# ------------------------------------------------ imports of our memory, views to re-imports
class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


class ForeignArray:
    """Another library's float32 device array over an address (what CuPy's or PyTorch's
    wrapper of our buffer looks like to barecuda): its own DLPack capsule (legacy,
    no deleter) and CAI. It knows nothing of barecuda's ownership."""

    def __init__(self, ptr, n, offset=0):
        self.ptr, self.n, self.offset = ptr, n, offset
        self._shape = (ctypes.c_int64 * 1)(n)
        self._mt = _DLManagedTensor()
        t = self._mt.dl_tensor
        t.data, t.device_type, t.device_id, t.ndim = ptr, 2, 0, 1
        t.code, t.bits, t.lanes, t.shape, t.strides, t.byte_offset = 2, 32, 1, ctypes.addressof(self._shape), None, \
            offset

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _capsule_new(ctypes.addressof(self._mt), b"dltensor", None)

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr + self.offset, False), "shape": (self.n,), "typestr": "<f4", "version": 3,
                "stream": None}


_KEEP = []


def _kept(a):
    """A bare capsule keeps nothing alive (its deleter would): the test keeps the array."""
    _KEEP.append(a)
    return a


def _bc():
    import barecuda
    return barecuda


# How a user gets a second handle on our memory. "raw" is untracked by design
# (docs/errors.md): the test does what the contract asks of the caller.
def cai_dict(b):
    """An import of `b` through a CUDA array interface dict built by hand (by address)."""
    return _bc().as_device_buffer({"data": (b.ptr, False), "shape": (b.nbytes // 4,), "typestr": "<f4",
                                "version": 3})


IMPORTS = {
    "view": lambda b: b.view("float32"),
    "slice": lambda b: b[0:b.nbytes // 2],
    "dlpack_reimport": lambda b: _bc().as_device_buffer(b.__dlpack__(stream=-1)),
    "cai_reimport": lambda b: _bc().DeviceBuffer.from_cuda_array_interface(b),
    "cai_dict_by_hand": cai_dict,
    "foreign_dlpack": lambda b: _bc().DeviceBuffer.from_dlpack(ForeignArray(b.ptr, b.nbytes // 4)),
    "foreign_dlpack_capsule": lambda b: _bc().as_device_buffer(_kept(ForeignArray(b.ptr, b.nbytes // 4)).__dlpack__()),
    "foreign_cai": lambda b: _bc().as_device_buffer(ForeignArray(b.ptr, b.nbytes // 4)),
    "foreign_cai_interior": lambda b: _bc().as_device_buffer(ForeignArray(b.ptr, b.nbytes // 8, offset=b.nbytes // 2)),
}


# ------------------------------------------------------------------ graphs on the double
def graph_double(fake):
    """The double's graph control API (live counts, graph launches, conditionals), typed."""
    lib = fake.lib
    for name, res, args in [
        ("fakecuda_graph_live", ctypes.c_int, [ctypes.c_char_p]),
        ("fakecuda_graph_launches", ctypes.c_longlong, []),
        ("fakecuda_graph_set_conditional", ctypes.c_int, [ctypes.c_ulonglong, ctypes.c_uint]),
        ("fakecuda_graph_nodes", ctypes.c_int, [ctypes.c_void_p]),
        ("fakecuda_pending_mode", ctypes.c_int, [ctypes.c_int]),
        ("fakecuda_early_frees", ctypes.c_longlong, []),
        ("fakecuda_pending_refs", ctypes.c_int, [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_int]),
    ]:
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def graphs_live(fake):
    """Graphs alive in the double."""
    return graph_double(fake).fakecuda_graph_live(b"graph")


def execs_live(fake):
    """Executable graphs alive in the double."""
    return graph_double(fake).fakecuda_graph_live(b"exec")


def fake_read(buf, n=None):
    """The bytes of a buffer of the double (its device memory is host memory)."""
    return ctypes.string_at(buf.ptr, buf.nbytes if n is None else n)


def fake_write(buf, data):
    """Write bytes into a buffer of the double, behind barecuda's back."""
    ctypes.memmove(buf.ptr, data, len(data))


def vadd_block(out, a, b, n):
    """The parameter block of ``vadd(out, a, b, n)``, packed independently of barecuda."""
    return struct.pack("<QQQI", int(out), int(a), int(b), n)


def exchange_api_class(current, counts):
    """A tensor class that publishes DLPack's C exchange API (the capsule PyTorch 2.10+
    puts on torch.Tensor), its two functions barecuda calls written with ctypes: a
    non-owning DLTensor of the object, and the current stream (``current[0]``)."""
    import ctypes as C

    class DLTensor(C.Structure):
        _fields_ = [("data", C.c_void_p), ("device_type", C.c_int32), ("device_id", C.c_int32), ("ndim", C.c_int32),
                    ("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16), ("shape", C.c_void_p),
                    ("strides", C.c_void_p), ("byte_offset", C.c_uint64)]
    to_fn = C.CFUNCTYPE(C.c_int, C.py_object, C.POINTER(DLTensor))
    stream_fn = C.CFUNCTYPE(C.c_int, C.c_int32, C.c_int32, C.POINTER(C.c_void_p))

    class Api(C.Structure):
        _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32), ("prev", C.c_void_p), ("alloc", C.c_void_p),
                    ("from_py", C.c_void_p), ("to_py", C.c_void_p), ("dltensor", to_fn), ("stream", stream_fn)]
    shape = (C.c_int64 * 1)(16)

    def dltensor(obj, out):
        counts["dltensor"] += 1
        t = out.contents
        t.data, t.device_type, t.device_id, t.ndim = obj.ptr - 8, obj.kind, obj.dev, 1
        t.code, t.bits, t.lanes, t.shape, t.strides, t.byte_offset = 2, 32, 1, C.addressof(shape), None, 8
        return 0

    def stream(device_type, device_id, out):
        counts["stream"] += 1
        assert device_type == 2                       # kDLCUDA
        out[0] = current[0]
        return 0
    keep = [to_fn(dltensor), stream_fn(stream), shape, C.create_string_buffer(b"dlpack_exchange_api")]
    api = Api(1, 3, None, None, None, None, keep[0], keep[1])
    new = C.PYFUNCTYPE(C.py_object, C.c_void_p, C.c_void_p, C.c_void_p)(("PyCapsule_New", C.pythonapi))

    class Tensor:
        __dlpack_c_exchange_api__ = new(C.addressof(api), C.addressof(keep[3]), None)
        _keep = (api, keep)

        def __init__(self, ptr, device, kind=2):
            self.ptr, self.dev, self.kind = ptr, device, kind
    return Tensor


# ------------------------------------------------------------ reference packer (tests/launch/)
FMT = {"u8": "<B", "s8": "<b", "u16": "<H", "s16": "<h", "b16": "<H", "f16": "<e",
       "u32": "<I", "s32": "<i", "b32": "<I", "f32": "<f",
       "u64": "<Q", "s64": "<q", "b64": "<Q", "f64": "<d", "ptr": "<Q"}
# A PTX integer parameter has no signedness (nvcc declares C `int` as .u32), so
# every PTX integer type takes [-2**(n-1), 2**n - 1], stored as two's complement.
INT_RANGES = {t: (-2**(8 * n - 1), 2**(8 * n) - 1) for n, ts in
              ((1, ("u8", "s8")), (2, ("u16", "s16", "b16")), (4, ("u32", "s32", "b32")),
               (8, ("u64", "s64", "b64"))) for t in ts}
INT_RANGES["ptr"] = (0, 2**64 - 1)
# Explicit signature= entries stay strict.
STRICT_RANGES = {"u8": (0, 2**8 - 1), "s8": (-2**7, 2**7 - 1), "u16": (0, 2**16 - 1), "s16": (-2**15, 2**15 - 1),
                 "u32": (0, 2**32 - 1), "s32": (-2**31, 2**31 - 1), "u64": (0, 2**64 - 1),
                 "s64": (-2**63, 2**63 - 1), "ptr": (0, 2**64 - 1), "bool": (0, 1)}


def struct_type(t):
    """('b8[N]', N, align) parts of a struct type written 'b8[N]@A'."""
    body, _, align = t.partition("@")
    n = int(body[3:-1])
    return n, int(align or 1)


def ref_pack(types, values):
    """The CUDA parameter block: each parameter at the next multiple of its alignment."""
    buf = bytearray()
    for t, v in zip(types, values):
        if t.startswith("b8["):
            size, align = struct_type(t)
            data = bytes(v)
            assert len(data) == size
        else:
            fmt = FMT[t]
            size = align = struct.calcsize(fmt)
            if t in INT_RANGES and isinstance(v, int):
                v &= (1 << (8 * size)) - 1     # two's complement
                fmt = "<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[size]
            data = struct.pack(fmt, v)
        buf += b"\0" * (-len(buf) % align)
        buf += data
    return bytes(buf)


def no_launch(fake, fn, exc, *needles):
    """fn() raises exc (its message holding every needle) and launches nothing."""
    import pytest
    before = fake.calls("cuLaunchKernel") + fake.calls("cuLaunchKernelEx")
    with pytest.raises(exc) as info:
        fn()
    assert fake.calls("cuLaunchKernel") + fake.calls("cuLaunchKernelEx") == before
    for n in needles:
        assert n in str(info.value), (n, str(info.value))
    return info.value


_LOWERED_PTX = {}


def lowered_ptx_get(source, name, defines=(), device=None):
    """barecuda.kernels' ``_registry.get`` for the driver double: the specialization's PTX
    for compute_80 (real NVRTC, through Program's cache) with its ISA line lowered to what
    the double (CUDA 13.0) accepts; the double cannot load a cubin and only reads the entry
    points and their parameters. Memoized per process."""
    from barecuda._program import ObjectCode
    from barecuda.kernels import _registry
    key = (source, defines)
    if key not in _LOWERED_PTX:
        code = _registry.compile_code(source, defines, target="ptx", arch="compute_80", cache=True).code
        code = code.decode() if isinstance(code, bytes) else code
        _LOWERED_PTX[key] = re.sub(r"^\.version \d+\.\d+", ".version 8.0", code, count=1, flags=re.M)
    return ObjectCode.from_ptx(_LOWERED_PTX[key]).get_kernel(name)
