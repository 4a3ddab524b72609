"""CPU tests of barecuda._nccl: the loader, argument checks, error mapping, and the
collectives' plumbing against the NCCL double (tests/fakenccl/fakenccl.c) on the
driver double. GPU correctness is judged in tests/distributed/test_nccl_gpu.py."""
import ctypes
import os
import pickle
import shutil
import subprocess
import sys

import pytest

import barecuda as bc
from barecuda import nccl
from _helpers import REPO, TESTS

FAKENCCL_SRC = os.path.join(TESTS, "fakenccl", "fakenccl.c")
FAKENCCL_LIB = os.path.join(TESTS, "fakenccl", "build", "libfakenccl.so")


def _build_fakenccl():
    deps = (FAKENCCL_SRC, os.path.join(REPO, "include", "barecuda", "nccl_abi.h"))
    if os.path.exists(FAKENCCL_LIB) and all(os.path.getmtime(d) <= os.path.getmtime(FAKENCCL_LIB) for d in deps):
        return FAKENCCL_LIB
    cc = (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "").split()
    if not cc:
        pytest.skip("no C compiler to build the NCCL double")
    os.makedirs(os.path.dirname(FAKENCCL_LIB), exist_ok=True)
    tmp = FAKENCCL_LIB + f".{os.getpid()}.tmp"
    cmd = cc + ["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-std=gnu11", "-pthread",
                "-I", os.path.join(REPO, "include"), FAKENCCL_SRC, "-o", tmp, "-lm"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    os.replace(tmp, FAKENCCL_LIB)
    return FAKENCCL_LIB


@pytest.fixture(scope="module")
def fakenccl_path():
    return _build_fakenccl()


class FakeNccl:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.fakenccl_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        self.lib.fakenccl_calls.argtypes = [ctypes.c_char_p]
        self.lib.fakenccl_calls.restype = ctypes.c_longlong

    def fail(self, name, result, message=""):
        self.lib.fakenccl_fail(name.encode(), result, message.encode())

    def calls(self, name):
        return self.lib.fakenccl_calls(name.encode())

    def __getattr__(self, name):
        return getattr(self.lib, "fakenccl_" + name)


@pytest.fixture
def fnccl(fake, fakenccl_path, monkeypatch):
    """NCCL is the double (loaded once per process); yields its control API."""
    monkeypatch.setenv("BARECUDA_NCCL", fakenccl_path)
    path = nccl.load()
    if os.path.realpath(path) != os.path.realpath(fakenccl_path):
        pytest.skip(f"this process already loaded another NCCL ({path})")
    return FakeNccl(path)


def _pair():
    uid = nccl.get_unique_id()
    return [nccl.Communicator(r, 2, uid, 0) for r in range(2)]


def _run(code, **env):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    for k in [k for k, v in env.items() if v is None]:
        e.pop(k)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- loader
def test_import_does_not_load_nccl():
    p = _run("import barecuda.nccl, sys; print(any('libnccl' in l or 'fakenccl' in l for l in open('/proc/self/maps')))",
             BARECUDA_NCCL="/nonexistent/libnccl.so.2")
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stderr


def test_env_variable_file_and_folder(tmp_path, fakenccl_path, monkeypatch):
    monkeypatch.setenv("BARECUDA_NCCL", fakenccl_path)
    assert nccl.candidates() == [fakenccl_path]
    monkeypatch.setenv("BARECUDA_NCCL", str(tmp_path))
    assert nccl.candidates() == [str(tmp_path / "libnccl.so.2")]


def test_wheel_folders_come_first(tmp_path, monkeypatch, fakenccl_path):
    monkeypatch.delenv("BARECUDA_NCCL", raising=False)
    # the order of barecuda's own search: cuda-pathfinder, which is asked first where it is
    # installed (the GPU machine has it), would answer with that machine's wheel
    from barecuda import _libfind
    monkeypatch.setattr(_libfind, "pathfinder_path", lambda spec: None)
    for sub in ("nccl", "cu13"):
        d = tmp_path / f"site{sub}" / "nvidia" / sub / "lib"
        d.mkdir(parents=True)
        shutil.copy(fakenccl_path, d / "libnccl.so.2")
        monkeypatch.syspath_prepend(str(tmp_path / f"site{sub}"))
    c = nccl.candidates()
    assert c[0].endswith(os.path.join("nvidia", "cu13", "lib", "libnccl.so.2"))
    assert c[1].endswith(os.path.join("nvidia", "nccl", "lib", "libnccl.so.2"))
    assert "libnccl.so.2" in c


def test_not_found_is_clear(tmp_path, fake_lib_path):
    p = _run("import barecuda.nccl as n\ntry:\n    n.load()\nexcept n.NcclNotFoundError as e:\n    print('NF', e)\n",
             BARECUDA_NCCL=str(tmp_path / "nope.so"), BARECUDA_LIBCUDA=fake_lib_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("NF") and "nope.so" in p.stdout and ".[nccl]" in p.stdout
    p = _run("import barecuda.nccl as n; print(n.is_available())",
             BARECUDA_NCCL=str(tmp_path / "nope.so"), BARECUDA_LIBCUDA=fake_lib_path)
    assert p.stdout.strip() == "False"


def test_library_lacking_symbols_refused(tmp_path, fake_lib_path):
    # the driver double is a shared library without NCCL's entry points
    p = _run("import barecuda.nccl as n\ntry:\n    n.load()\nexcept n.NcclNotFoundError as e:\n    print(e)\n",
             BARECUDA_NCCL=fake_lib_path, BARECUDA_LIBCUDA=fake_lib_path)
    assert "lacks ncclGetVersion" in p.stdout, p.stdout + p.stderr


def test_version_and_path(fnccl, fakenccl_path):
    assert nccl.version() == (2, 28, 5)
    assert os.path.realpath(nccl.library_path()) == os.path.realpath(fakenccl_path)


NVLS = r"""
import os, barecuda as bc, barecuda.nccl as n
before = os.environ.get("NCCL_NVLS_ENABLE")
c = n.Communicator.for_devices([0])
print(before, os.environ.get("NCCL_NVLS_ENABLE"))
"""


def test_nccl_settings_are_left_to_the_user(fakenccl_path, fake_lib_path):
    """barecuda never writes NCCL_NVLS_ENABLE (docs/multi-gpu.md: the user's setting)."""
    p = _run(NVLS, BARECUDA_NCCL=fakenccl_path, BARECUDA_LIBCUDA=fake_lib_path, NCCL_NVLS_ENABLE=None)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["None", "None"]
    p = _run(NVLS, BARECUDA_NCCL=fakenccl_path, BARECUDA_LIBCUDA=fake_lib_path, NCCL_NVLS_ENABLE="1")
    assert p.stdout.split() == ["1", "1"]


# ---------------------------------------------------------------- unique id
def test_unique_id(fnccl):
    uid = nccl.get_unique_id()
    raw = bytes(uid)
    assert len(raw) == 128
    assert pickle.loads(pickle.dumps(uid)) == uid
    assert nccl.UniqueId(raw) == uid and nccl.get_unique_id() != uid
    with pytest.raises(ValueError, match="128 bytes"):
        nccl.UniqueId(b"short")


# ---------------------------------------------------------------- arguments
def test_constructor_checks(fnccl):
    uid = nccl.get_unique_id()
    with pytest.raises(ValueError, match="outside"):
        nccl.Communicator(2, 2, uid)
    with pytest.raises(ValueError, match="nranks"):
        nccl.Communicator(0, 0, uid)
    with pytest.raises(ValueError, match="128"):
        nccl.Communicator(0, 1, b"x" * 5)
    with pytest.raises(ValueError, match="twice"):
        nccl.Communicator.for_devices([0, 0])


def test_operation_checks(fnccl):
    a, b = _pair()
    x = bc.empty(16, "float32")
    n0 = fnccl.calls("ncclAllReduce")
    with pytest.raises(ValueError, match="unknown reduction op"):
        a.all_reduce(x, op="mean")
    with pytest.raises(TypeError, match="no data type"):
        a.all_reduce(x, dtype="complex64")
    with pytest.raises(ValueError, match="recvbuf has"):
        a.all_reduce(x, bc.empty(8, "float32"))
    with pytest.raises(ValueError, match="whole number"):
        a.all_reduce(bc.alloc(6), dtype="float32")
    with pytest.raises(ValueError, match="nranks x sendbuf"):
        a.all_gather(x, bc.empty(16, "float32"))
    with pytest.raises(ValueError, match="nranks x recvbuf"):
        a.reduce_scatter(x, x)
    with pytest.raises(ValueError, match="root"):
        a.broadcast(x, root=2)
    with pytest.raises(ValueError, match="peer"):
        a.send(x, 5)
    with pytest.raises(TypeError, match="DeviceBuffer or a device array"):
        a.all_reduce(object())
    assert fnccl.calls("ncclAllReduce") == n0      # nothing reached NCCL
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.all_reduce(x)
    b.close()


def test_wrong_device_names_both(fakenccl_path, fake_lib_path):
    code = ("import barecuda as bc, barecuda.nccl as n\n"
            "c0, c1 = n.Communicator.for_devices([0, 1])\n"
            "try:\n    c0.all_reduce(bc.alloc(64, device=1))\nexcept ValueError as e:\n    print(e)\n")
    p = _run(code, BARECUDA_NCCL=fakenccl_path, BARECUDA_LIBCUDA=fake_lib_path, FAKECUDA_DEVICES="2")
    assert "on device 1" in p.stdout and "uses device 0" in p.stdout, p.stdout + p.stderr


# ---------------------------------------------------------------- errors
def test_error_maps_to_class_with_nccls_message(fnccl):
    a, b = _pair()
    x = bc.empty(4, "float32")
    fnccl.fail("ncclAllReduce", 5, "rank 0 called ncclAllReduce twice")
    with pytest.raises(nccl.NcclInvalidUsage) as ei:
        a.all_reduce(x)
    e = ei.value
    assert e.result == 5 and e.name == "ncclInvalidUsage" and e.call == "ncclAllReduce"
    assert "rank 0 called ncclAllReduce twice" in str(e) and "invalid usage" in str(e)
    assert a.is_closed and fnccl.aborts() >= 1          # aborted on error
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is nccl.NcclInvalidUsage and e2.result == 5
    b.abort()


def test_error_classes():
    assert nccl.nccl_error_class(4) is nccl.NcclInvalidArgument
    assert issubclass(nccl.NcclInvalidArgument, ValueError)
    assert issubclass(nccl.NcclError, bc.BarecudaError)
    assert nccl.nccl_error_class(99) is nccl.NcclError


def test_no_abort_when_disabled(fnccl):
    uid = nccl.get_unique_id()
    a = nccl.Communicator(0, 1, uid, 0, abort_on_error=False)
    fnccl.fail("ncclBroadcast", 2, "socket closed")
    with pytest.raises(nccl.NcclSystemError, match="socket closed"):
        a.broadcast(bc.empty(4, "int32"))
    assert not a.is_closed
    a.close()


def test_async_error(fnccl):
    a, b = _pair()
    a.check_async_error()
    fnccl.set_async_error(6)
    with pytest.raises(nccl.NcclRemoteError):
        a.check_async_error()
    assert a.is_closed
    b.close()


def test_init_failure(fnccl):
    fnccl.fail("ncclCommInitRank", 4, "bad id")
    with pytest.raises(nccl.NcclInvalidArgument, match="bad id"):
        nccl.Communicator(0, 1, nccl.get_unique_id())


# ---------------------------------------------------------------- plumbing / results on the double
def test_queries(fnccl):
    comms = nccl.Communicator.for_devices([0])
    c = comms[0]
    assert (c.count(), c.user_rank(), c.cu_device(), c.size, c.rank) == (1, 0, 0, 1, 0)
    live = fnccl.live_comms()
    c.close()
    assert fnccl.live_comms() == live - 1
    c.close()                                      # idempotent


DT = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", DT)
@pytest.mark.parametrize("op", nccl.OPS)
def test_all_reduce_every_dtype_and_op(fnccl, dtype, op):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng()
    xs = [(rng.integers(1, 5, 33) if dtype[0] in "iu" else rng.random(33) + 0.5).astype(dtype) for _ in range(2)]
    a, b = _pair()
    bufs = [bc.to_device(x) for x in xs]
    with nccl.group():
        a.all_reduce(bufs[0], op=op)
        b.all_reduce(bufs[1], op=op)
    wide = [x.astype(np.float64) if dtype[0] == "f" else x.astype(np.int64) for x in xs]
    want = {"sum": wide[0] + wide[1], "prod": wide[0] * wide[1], "max": np.maximum(*wide),
            "min": np.minimum(*wide), "avg": (wide[0] + wide[1]) / 2 if dtype[0] == "f" else (wide[0] + wide[1]) // 2}[op]
    for buf in bufs:
        got = buf.to_numpy()
        if dtype[0] == "f":
            np.testing.assert_allclose(got, want.astype(dtype), rtol=1e-3)
        else:
            np.testing.assert_array_equal(got, want.astype(dtype))
    a.close()
    b.close()


@pytest.mark.parametrize("dtype", ["float64", "float32", "int32"])
def test_one_rank_avg_writes_every_element(fnccl, dtype):
    # The double, like NCCL before 2.29.7, drops the tail of a one-rank avg (issue 1950):
    # the communicator must send one-rank avg as sum (the same values) to get them all.
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng()
    x = (rng.random(4099) * 100).astype(dtype)
    c = nccl.Communicator(0, 1, nccl.get_unique_id(), 0)
    src = bc.to_device(x)
    outs = [bc.to_device(np.zeros_like(x)) for _ in range(3)]
    c.all_reduce(src, outs[0], op="avg")
    c.reduce(src, outs[1], op="avg", root=0)
    c.reduce_scatter(src, outs[2], op="avg")
    for o in outs:
        np.testing.assert_array_equal(o.to_numpy(), x)
    c.close()


def test_other_collectives(fnccl):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng()
    a, b = _pair()
    xs = [rng.random(8).astype(np.float32) for _ in range(2)]
    send = [bc.to_device(x) for x in xs]
    gathered = [bc.empty(16, "float32") for _ in range(2)]
    with nccl.group():
        for c, s, g in zip((a, b), send, gathered):
            c.all_gather(s, g)
    for g in gathered:
        np.testing.assert_array_equal(g.to_numpy(), np.concatenate(xs))
    scattered = [bc.empty(4, "float32") for _ in range(2)]
    with nccl.group():
        for c, s, r in zip((a, b), send, scattered):
            c.reduce_scatter(s, r, op="max")
    m = np.maximum(*xs)
    np.testing.assert_array_equal(scattered[0].to_numpy(), m[:4])
    np.testing.assert_array_equal(scattered[1].to_numpy(), m[4:])
    out = [bc.empty(8, "float32") for _ in range(2)]
    with nccl.group():
        a.broadcast(send[1], out[0], root=1)
        b.broadcast(send[1], out[1], root=1)
    for o in out:
        np.testing.assert_array_equal(o.to_numpy(), xs[1])
    red = bc.empty(8, "float32")
    with nccl.group():
        a.reduce(send[0], red, op="sum", root=0)
        b.reduce(send[1], None, op="sum", root=0)
    np.testing.assert_allclose(red.to_numpy(), xs[0] + xs[1], rtol=1e-6)
    got = bc.empty(8, "float32")
    with nccl.group():
        a.send(send[0], 1)
        b.recv(got, 0)
    np.testing.assert_array_equal(got.to_numpy(), xs[0])
    assert fnccl.group_depth() == 0
    a.close()
    b.close()


def test_group_end_error_and_nesting(fnccl):
    with nccl.group():
        with nccl.group():
            assert fnccl.group_depth() == 2
    assert fnccl.group_depth() == 0
    with pytest.raises(nccl.NcclInvalidUsage, match="without ncclGroupStart"):
        nccl.group_end()


def test_context_manager_closes(fnccl):
    live = fnccl.live_comms()
    with nccl.Communicator.for_devices([0])[0] as c:
        assert fnccl.live_comms() == live + 1
    assert c.is_closed and fnccl.live_comms() == live


def test_bfloat16_by_name(fnccl):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng()
    # small integers are exact in bfloat16: its bits are the top half of float32's
    xs = [rng.integers(-20, 20, 64).astype(np.float32) for _ in range(2)]
    bits = [(x.view(np.uint32) >> 16).astype(np.uint16) for x in xs]
    a, b = _pair()
    bufs = [bc.to_device(v) for v in bits]
    with nccl.group():
        a.all_reduce(bufs[0], dtype="bfloat16")
        b.all_reduce(bufs[1], dtype="bfloat16")
    for buf in bufs:
        got = (buf.to_numpy().astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(got, xs[0] + xs[1])
    a.close()
    b.close()


@pytest.mark.parametrize("name, np_name", [("float", "float64"), ("int", "int64"), ("double", "float64"),
                                           ("<f4", "float32"), ("half", "float16")])
def test_dtype_names_mean_what_they_mean_everywhere(fnccl, name, np_name):
    """dtype= takes barecuda's dtype table's spellings, with numpy's meanings ("float"
    is float64, "int" is int64), checked by the sums NCCL computes on those bytes."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng()
    xs = [rng.integers(-20, 20, 32).astype(np_name) for _ in range(2)]
    a, b = _pair()
    bufs = [bc.to_device(x.view(np.uint8)) for x in xs]     # untyped bytes: dtype= decides
    with nccl.group():
        a.all_reduce(bufs[0], dtype=name)
        b.all_reduce(bufs[1], dtype=name)
    for buf in bufs:
        np.testing.assert_array_equal(buf.to_numpy().view(np_name), xs[0] + xs[1])
    a.close()
    b.close()


def test_fp8_reaches_nccl_with_its_code(fnccl):
    # the double does not simulate fp8 and says so: the call got there with code 10/11
    a = nccl.Communicator.for_devices([0], abort_on_error=False)[0]
    for name in ("float8_e4m3fn", "float8_e5m2"):
        with pytest.raises(nccl.NcclInvalidArgument, match="fp8"):
            a.all_reduce(bc.alloc(16), dtype=name)
    a.close()


def test_bench_rows_with_one_gpu_give_no_bandwidth(fnccl):
    from barecuda.bench import dist_rows
    assert dist_rows.busbw(1 << 20, 1e-3, 1) is None
    assert dist_rows.busbw(1 << 20, 1e-3, 2) == pytest.approx((1 << 20) / 1e-3 / 1e9)
    if bc.device_count() != 1:
        pytest.skip("the double shows more than one device")
    rows = dist_rows.allreduce_rows(sizes=(1 << 20,), rounds=1)
    assert [(r["value"], r["note"]) for r in rows[:-1]] == [(None, "needs 2 GPUs")]
    assert rows[-1]["unit"] == "us" and rows[-1]["value"] >= 0     # the 8-byte latency stays


# ---------------------------------------------------------------- buffers: count, type, stream, reader
# ncclDataType_t as nccl.h numbers it (the reference the derived codes are checked against)
NCCL_TYPE = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6,
             "float32": 7, "float64": 8, "bfloat16": 9}


def _last_call(fnccl):
    out = (ctypes.c_ulonglong * 3)()
    fnccl.lib.fakenccl_last_call(out)
    return tuple(out)


class Cai:
    """A foreign device array (CAI v3) over a DeviceBuffer's memory, of any type/layout."""

    def __init__(self, buf, typestr, shape, strides=None, readonly=False, stream=None):
        self.buf = buf
        self.__cuda_array_interface__ = {"data": (buf.ptr, readonly), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3, "stream": stream}


@pytest.mark.parametrize("dtype", sorted(NCCL_TYPE))
def test_count_and_type_come_from_the_buffers(fnccl, dtype):
    np = pytest.importorskip("numpy")
    a, b = _pair()
    s = bc.Stream()
    n = int(np.random.default_rng().integers(2, 40)) * 2
    isz = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    x = [bc.empty(n, dtype) for _ in range(2)]
    big = [bc.empty(2 * n, dtype) for _ in range(2)]
    half = [bc.empty(n // 2, dtype) for _ in range(2)]
    cases = [  # (issue both ranks, expected count)
        (lambda c, i: c.all_reduce(x[i], stream=s), n),
        (lambda c, i: c.broadcast(x[i], root=1, stream=s), n),
        (lambda c, i: c.reduce(x[i], root=0, stream=s), n),
        (lambda c, i: c.all_gather(x[i], big[i], stream=s), n),
        (lambda c, i: c.reduce_scatter(x[i], half[i], stream=s), n // 2),
    ]
    for issue, count in cases:
        with nccl.group():
            issue(a, 0)
            issue(b, 1)
        assert _last_call(fnccl) == (count, NCCL_TYPE[dtype], s.handle_int)
    # a foreign array (CAI): count and type from its typestr and shape, not from bytes
    if dtype != "bfloat16":                       # (no CAI typestr for bfloat16)
        typestr = np.dtype(dtype).str
        with nccl.group():
            a.all_reduce(Cai(x[0], typestr, (n,)))
            b.all_reduce(Cai(x[1], typestr, (n,)))
        assert _last_call(fnccl)[:2] == (n, NCCL_TYPE[dtype])
    assert x[0].nbytes == n * isz
    a.close()
    b.close()


def test_send_recv_count_and_return_values(fnccl):
    np = pytest.importorskip("numpy")
    a, b = _pair()
    xs = np.random.default_rng().random(12)
    src, dst = bc.to_device(xs), bc.empty(12, "float64")
    with nccl.group():
        assert a.send(src, 1) is None
        got = b.recv(dst, 0)
    assert got is dst and _last_call(fnccl)[:2] == (12, NCCL_TYPE["float64"])
    np.testing.assert_array_equal(dst.to_numpy(), xs)
    foreign = Cai(dst, "<f8", (12,))
    with nccl.group():                              # results come back as the object given
        assert a.all_reduce(src) is src
        assert b.all_reduce(dst, foreign) is foreign
    a.close()
    b.close()


def test_bad_buffers_are_refused_before_nccl(fnccl):
    a, b = _pair()
    calls = fnccl.calls("ncclAllReduce") + fnccl.calls("ncclRecv")
    f32, i32 = bc.empty(16, "float32"), bc.empty(16, "int32")
    with pytest.raises(TypeError, match="sendbuf is float32 but recvbuf is int32"):
        a.all_reduce(f32, i32)
    with pytest.raises(ValueError, match="read-only"):
        a.all_reduce(f32, Cai(f32, "<f4", (16,), readonly=True))
    with pytest.raises(ValueError, match="not contiguous"):
        a.all_reduce(Cai(f32, "<f4", (8,), strides=(8,)))
    with pytest.raises(ValueError, match="not contiguous"):
        a.recv(Cai(f32, "<f4", (4, 2), strides=(4, 8)), 1)
    with pytest.raises(ValueError, match="needs recvbuf"):
        a.all_gather(f32, None)
    assert fnccl.calls("ncclAllReduce") + fnccl.calls("ncclRecv") == calls
    assert not a.is_closed                      # argument errors never abort the communicator
    a.close()
    b.close()


def test_producer_stream_is_waited_on_then_nccl_runs(fnccl, fake):
    """A CAI producer's stream: the NCCL stream waits for it through an event (docs/interop.md)."""
    a = nccl.Communicator.for_devices([0])[0]
    s, producer = bc.Stream(), bc.Stream()
    buf = bc.empty(8, "float32")
    waits = fake.calls("cuStreamWaitEvent")
    a.all_reduce(Cai(buf, "<f4", (8,), stream=producer.handle_int), stream=s)
    assert fake.calls("cuStreamWaitEvent") == waits + 1 and _last_call(fnccl)[2] == s.handle_int
    a.all_reduce(Cai(buf, "<f4", (8,), stream=s.handle_int), stream=s)      # same stream: no wait
    assert fake.calls("cuStreamWaitEvent") == waits + 1
    a.close()


def test_torch_cpu_tensor_is_refused_before_nccl(fnccl):
    torch = pytest.importorskip("torch")
    a = nccl.Communicator.for_devices([0])[0]
    n = fnccl.calls("ncclAllReduce")
    with pytest.raises(ValueError, match="on the CPU"):
        a.all_reduce(torch.ones(4))
    with pytest.raises(ValueError, match="on the CPU"):
        a.all_reduce(bc.empty(4, "float32"), torch.ones(4))
    assert fnccl.calls("ncclAllReduce") == n and not a.is_closed
    a.close()


def test_torch_dtype_names_are_ncclS():
    """The reader names a tensor's type by torch's own spelling (str(dtype) after the
    dot): every torch type NCCL has must arrive under a name nccl accepts."""
    torch = pytest.importorskip("torch")
    for name in ("int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                 "float8_e4m3fn", "float8_e5m2", "uint32", "uint64"):
        d = getattr(torch, name, None)
        if d is None:
            continue
        assert str(d).rpartition(".")[2] in nccl.DTYPES, d
    for d in (torch.bool, torch.complex64, torch.int16):
        assert str(d).rpartition(".")[2] not in nccl.DTYPES


def test_nvlink_multicast_is_never_called():
    """Issue #12: NVLink multicast stays off on shared machines. barecuda reaches driver
    entry points only by name, so no tracked source may name a cuMulticast* function
    except to say that it is never called."""
    root = REPO
    files = []
    for top in ("include", "src"):
        for d, _, names in os.walk(os.path.join(root, top)):
            # hand-written sources only: Cython's generated .c files repeat the .pyx docstrings
            files += [os.path.join(d, n) for n in names if n.endswith((".h", ".pyx", ".pxd", ".py", ".pyi"))
                      or (n.endswith(".c") and not os.path.exists(os.path.join(d, n[:-2] + ".pyx")))]
    assert any(f.endswith("cuda_abi.h") for f in files)
    named = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            named += [(f, i) for i, line in enumerate(fh, 1) if "cuMulticast" in line and "never" not in line]
    assert named == []
