"""The driver loader, each case in a fresh interpreter (the driver loads once per process).

Every case runs against the fake driver (tests/fakecuda) or against no driver at all,
whatever --gpu says: the environment of the child process decides.
"""
import sys
import textwrap

import pytest

from _helpers import result_of, run_child

PRELUDE = """\
import json, os, sys
from _helpers import in_fork
def out(**kw):
    print("RESULT " + json.dumps(kw))
"""


def run_py(code, lib, **env_extra):
    """Run `code` in a fresh interpreter with BARECUDA_LIBCUDA=lib; return what it out()-ed."""
    return result_of(run_child(PRELUDE + textwrap.dedent(code), lib, **env_extra))


EXPECT_FAILURE = """
import barecuda
r = {"numpy_after_import": "numpy" in sys.modules, "available": barecuda.is_available()}
try:
    barecuda.driver_version()
    r["raised"] = None
except Exception as e:
    r.update(raised=type(e).__name__, msg=str(e), tried=list(getattr(e, "tried", ())),
             code=getattr(e, "code", None), call=getattr(e, "call", None),
             is_oserror=isinstance(e, OSError), is_barecuda=isinstance(e, barecuda.BarecudaError))
r["available_after"] = barecuda.is_available()
r["numpy_at_end"] = "numpy" in sys.modules
out(**r)
"""


def test_no_driver():
    r = run_py(EXPECT_FAILURE, "/nonexistent/libcuda.so.1")
    assert r["raised"] == "DriverNotFoundError"
    assert r["is_oserror"] and r["is_barecuda"]
    assert "/nonexistent/libcuda.so.1" in r["msg"]
    assert "BARECUDA_LIBCUDA" in r["msg"]
    assert len(r["tried"]) == 1 and r["tried"][0].startswith("/nonexistent/libcuda.so.1")
    assert r["available"] is False and r["available_after"] is False
    assert r["numpy_after_import"] is False and r["numpy_at_end"] is False


def test_import_touches_no_driver(fake_lib_path):
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/maps")
    r = run_py("""
        import barecuda
        name = os.path.basename(os.environ["BARECUDA_LIBCUDA"])
        before = name in open("/proc/self/maps").read()
        state = barecuda._loader._state()
        barecuda.driver_version()
        after = name in open("/proc/self/maps").read()
        out(before=before, after=after, loaded_before=state["loaded"], numpy="numpy" in sys.modules)
    """, fake_lib_path)
    assert r == {"before": False, "after": True, "loaded_before": False, "numpy": False}


def test_file_that_is_not_a_library(tmp_path):
    bogus = tmp_path / "libcuda.so.1"
    bogus.write_text("this is not an ELF shared object\n")
    r = run_py(EXPECT_FAILURE, str(bogus))
    assert r["raised"] == "DriverNotFoundError"
    assert str(bogus) in r["msg"] and "BARECUDA_LIBCUDA" in r["msg"]
    assert r["available_after"] is False


def test_missing_required_symbol(fake_lib_path):
    r = run_py(EXPECT_FAILURE, fake_lib_path, FAKECUDA_HIDE="cuLaunchKernel")
    assert r["is_barecuda"], r
    assert "cuLaunchKernel" in r["msg"]
    assert r["available_after"] is False


def test_missing_optional_symbol(fake_lib_path):
    r = run_py("""
        import barecuda
        v = barecuda.driver_version()
        syms = barecuda._loader.symbols()
        try:
            barecuda._loader.require_symbol("cuFuncGetParamInfo", "parameter introspection")
            err = None
        except barecuda.DriverVersionError as e:
            err = str(e)
        barecuda._loader.require_symbol("cuMemAlloc")          # resolved: no error
        try:
            barecuda._loader.require_symbol("cuNoSuchThing")
            unknown = None
        except KeyError as e:
            unknown = str(e)
        out(v=v, syms={k: list(t) for k, t in syms.items()}, err=err, available=barecuda.is_available(),
            unknown=unknown)
    """, fake_lib_path, FAKECUDA_HIDE="cuFuncGetParamInfo")
    syms = r["syms"]
    assert syms["cuFuncGetParamInfo"][2] is False
    assert all(t[2] for name, t in syms.items() if name != "cuFuncGetParamInfo")
    assert r["available"] is True
    # the version in the message is the one the ABI table asks for, not typed by hand
    need = syms["cuFuncGetParamInfo"][0]
    assert r["err"] and "cuFuncGetParamInfo" in r["err"] and "parameter introspection" in r["err"]
    assert f"CUDA {need // 1000}.{need % 1000 // 10} driver or newer" in r["err"]
    v = r["v"]
    assert f"the loaded driver is CUDA {v[0]}.{v[1]}" in r["err"]
    assert r["unknown"] and "cuNoSuchThing" in r["unknown"]


def test_older_driver_leaves_newer_optional_symbols_unresolved(fake_lib_path):
    # A 12.0 driver has no variant of the entry points our table asks for at 12.x > 12.0.
    r = run_py("""
        import barecuda
        out(v=barecuda.driver_version(), syms={k: list(t) for k, t in barecuda._loader.symbols().items()})
    """, fake_lib_path, FAKECUDA_DRIVER_VERSION=12000)
    assert r["v"] == [12, 0]
    newer = {name for name, (version, required, resolved) in r["syms"].items() if version > 12000}
    assert newer, "the table has entry points newer than 12.0; this test expects some"
    for name, (version, required, resolved) in r["syms"].items():
        assert resolved == (version <= 12000), name
        if version > 12000:
            assert not required, f"{name} is required but needs a driver newer than 12.0"


def test_no_cuGetProcAddress(fake_nogpa_path):
    r = run_py(EXPECT_FAILURE, fake_nogpa_path)
    assert r["raised"] == "DriverNotFoundError"
    assert "cuGetProcAddress_v2" in r["msg"]
    assert "12.0" in r["msg"] and "not an NVIDIA driver" in r["msg"]


def test_cuinit_failure(fake_lib_path):
    r = run_py(EXPECT_FAILURE, fake_lib_path, FAKECUDA_INIT_RESULT=999)
    assert r["raised"] == "CudaError"
    assert r["code"] == 999 and r["call"] == "cuInit"
    assert "CUDA_ERROR_UNKNOWN" in r["msg"] and fake_lib_path in r["msg"]
    assert r["available"] is False and r["available_after"] is False


def test_no_device(fake_lib_path):
    r = run_py(EXPECT_FAILURE, fake_lib_path, FAKECUDA_DEVICES=0)
    assert r["raised"] == "CudaNoDeviceError"
    assert r["code"] == 100 and r["call"] == "cuInit"
    assert r["available"] is False and r["available_after"] is False


@pytest.mark.parametrize("version, expected", [(None, [13, 0]), (12040, [12, 4]), (12090, [12, 9])])
def test_driver_version_and_path(fake_lib_path, version, expected):
    env = {} if version is None else {"FAKECUDA_DRIVER_VERSION": version}
    r = run_py("""
        import barecuda
        out(v=barecuda.driver_version(), path=barecuda.driver_path(), available=barecuda.is_available(),
            candidates=list(barecuda._loader.candidates()))
    """, fake_lib_path, **env)
    assert r["v"] == expected
    assert r["path"] == fake_lib_path
    assert r["candidates"] == [fake_lib_path]
    assert r["available"] is True


def test_each_symbol_requested_at_its_table_version(fake_lib_path):
    r = run_py("""
        import ctypes
        import barecuda
        syms = barecuda._loader.symbols()
        lib = ctypes.CDLL(barecuda.driver_path())
        lib.fakecuda_version_requested.restype = ctypes.c_int
        asked = {name: lib.fakecuda_version_requested(name.encode()) for name in syms}
        out(syms={k: list(t) for k, t in syms.items()}, asked=asked)
    """, fake_lib_path)
    assert len(r["syms"]) > 50
    for name, (version, required, resolved) in r["syms"].items():
        assert r["asked"][name] == version, name
        assert resolved, name


def test_thread_safe_lazy_load(fake_lib_path):
    r = run_py("""
        import ctypes, threading
        import barecuda
        n = 16
        barrier = threading.Barrier(n, timeout=30)
        results, errors = [], []
        def work():
            barrier.wait()
            try:
                results.append(barecuda.driver_version())
            except BaseException as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=work, daemon=True) for _ in range(n)]
        for t in threads: t.start()
        for t in threads: t.join(30)
        assert not any(t.is_alive() for t in threads), "a loading thread hung"
        lib = ctypes.CDLL(barecuda.driver_path())
        lib.fakecuda_calls.restype = ctypes.c_longlong
        out(results=results, errors=errors, inits=lib.fakecuda_calls(b"cuInit"),
            gpa=lib.fakecuda_calls(b"cuGetProcAddress_v2"), nsyms=len(barecuda._loader.symbols()))
    """, fake_lib_path)
    assert r["errors"] == []
    assert r["results"] == [[13, 0]] * 16
    assert r["inits"] == 1
    assert r["gpa"] == r["nsyms"]  # every symbol resolved exactly once


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="os.fork semantics tested on Linux")
def test_fork_after_load_raises_in_child(fake_lib_path):
    r = run_py("""
        import barecuda
        barecuda.driver_version()
        def child():
            res = {"forked": barecuda._loader._state()["forked"]}
            try:
                barecuda._loader.load()
                res["raised"] = None
            except Exception as e:
                res.update(raised=type(e).__name__, msg=str(e))
            return json.dumps(res)
        out(child=json.loads(in_fork(child)),
            parent_forked=barecuda._loader._state()["forked"], parent_v=barecuda.driver_version())
    """, fake_lib_path)
    child = r["child"]
    assert child["forked"] is True
    assert child["raised"] == "ForkedProcessError"
    assert "spawn" in child["msg"]
    assert r["parent_forked"] is False and r["parent_v"] == [13, 0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="os.fork semantics tested on Linux")
def test_fork_before_load_is_fine(fake_lib_path):
    r = run_py("""
        import barecuda
        def child():
            try:
                res = {"v": barecuda.driver_version(), "available": barecuda.is_available()}
            except Exception as e:
                res = {"raised": repr(e)}
            return json.dumps(res)
        out(child=json.loads(in_fork(child)))
    """, fake_lib_path)
    assert r["child"] == {"v": [13, 0], "available": True}


# Each feature that needs an optional entry point says which driver version it needs,
# and that version is the one the ABI table requests the symbol at (require()), never
# a number typed next to the feature.
_FEATURES = {
    "DriverMemoryPool": ("cuMemPoolCreate", "barecuda.DriverMemoryPool(0)"),
    "DeviceBuffer.prefetch": ("cuMemPrefetchAsync", "barecuda.managed_empty(64).prefetch(0)"),
    "DeviceBuffer.advise": ("cuMemAdvise", "barecuda.managed_empty(64).advise('read_mostly', 0)"),
}


@pytest.mark.parametrize("feature", sorted(_FEATURES))
@pytest.mark.parametrize("how", ["hidden", "old-driver"])
def test_version_messages_come_from_the_symbol_table(fake_lib_path, feature, how):
    symbol, call = _FEATURES[feature]
    r = run_py(f"""
        import barecuda
        need = barecuda._loader.symbols()[{symbol!r}][0]
        try:
            {call}
            err = None
        except barecuda.DriverVersionError as e:
            err = str(e)
        out(err=err, need=need, v=barecuda.driver_version())
    """, fake_lib_path, **({"FAKECUDA_HIDE": symbol} if how == "hidden" else {"FAKECUDA_DRIVER_VERSION": 12000}))
    need = r["need"]
    if how == "old-driver" and need <= 12000:
        assert r["err"] is None          # a 12.0 driver has it: nothing to refuse
        return
    assert r["err"], f"{feature} did not refuse without {symbol}"
    assert feature in r["err"] and symbol in r["err"]
    assert f"CUDA {need // 1000}.{need % 1000 // 10} driver or newer" in r["err"]
    v = r["v"]
    assert f"the loaded driver is CUDA {v[0]}.{v[1]}" in r["err"]
    if how == "hidden":                   # new enough, yet missing: not an upgrade problem
        assert "does not provide it" in r["err"]
