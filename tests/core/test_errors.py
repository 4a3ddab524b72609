"""The CUresult table and the exception tree.

The reference is include/barecuda/cuda_errors.h parsed here with a regular expression,
independently of the Cython code that compiles the same table.
"""
import gc
import os
import pickle
import re
import subprocess
import sys

import pytest

import barecuda
from barecuda import _errors
from _helpers import REPO

HEADER = os.path.join(REPO,
                      "include", "barecuda", "cuda_errors.h")

_STR = r'"(?:[^"\\]|\\.)*"'
# One row of the X-macro: X(code, NAME, "description", "hint" or NULL, sticky), lines
# continued with backslashes.
_ENTRY = re.compile(
    r"X\(\s*(-?\d+)\s*,\s*(\w+)\s*,[\s\\]*((?:" + _STR + r"\s*)+),[\s\\]*(NULL|(?:" + _STR + r"\s*)+),"
    r"\s*([01])\s*\)", re.S)


def _c_string(literals):
    """Value of one or more adjacent C string literals."""
    parts = re.findall(_STR, literals)
    return "".join(bytes(p[1:-1], "ascii").decode("unicode_escape") for p in parts)


def _parse_header():
    text = open(HEADER, encoding="utf-8").read()
    start = text.index("#define BC_CUDA_ERRORS(X)")
    body = text[start:text.index("\n\n", start)]
    out = {}
    for m in _ENTRY.finditer(body):
        code = int(m.group(1))
        hint = None if m.group(4) == "NULL" else _c_string(m.group(4))
        out[code] = (m.group(2), _c_string(m.group(3)), hint, m.group(5) == "1")
    # every 'X(<number>,' that opens an entry must have parsed
    assert len(out) == len(re.findall(r"^\s*X\(\s*-?\d+\s*,", body, re.M)), "unparsed entries in cuda_errors.h"
    return out


REFERENCE = _parse_header()
CODES = sorted(REFERENCE)
ERROR_CODES = [c for c in CODES if c != 0]

# Codes that must map to a specific class (written from the driver documentation).
EXPECTED_CLASS = {
    1: barecuda.CudaInvalidValueError,
    2: barecuda.CudaOutOfMemoryError,
    3: barecuda.CudaNotInitializedError,
    100: barecuda.CudaNoDeviceError,
    101: barecuda.CudaInvalidDeviceError,
    200: barecuda.CudaInvalidImageError,
    201: barecuda.CudaInvalidContextError,
    218: barecuda.CudaInvalidPtxError,
    400: barecuda.CudaInvalidHandleError,
    500: barecuda.CudaNotFoundError,
    600: barecuda.CudaNotReadyError,
    700: barecuda.CudaStickyError,       # CUDA_ERROR_ILLEGAL_ADDRESS
    719: barecuda.CudaStickyError,       # CUDA_ERROR_LAUNCH_FAILED
    801: barecuda.CudaNotSupportedError,
}
# Sticky codes deliberately mapped to a class outside CudaStickyError (none today).
STICKY_EXCEPTIONS = set()


def test_reference_parsed_sensibly():
    assert len(REFERENCE) > 90
    assert REFERENCE[0][0] == "CUDA_SUCCESS"
    assert REFERENCE[1][0] == "CUDA_ERROR_INVALID_VALUE"
    assert REFERENCE[700][0] == "CUDA_ERROR_ILLEGAL_ADDRESS" and REFERENCE[700][3]
    assert REFERENCE[999][0] == "CUDA_ERROR_UNKNOWN"
    assert any(h and '"' in h for _, _, h, _ in REFERENCE.values()), "escaped quotes were not decoded"


def test_generated_names_are_up_to_date():
    """_errors.pxd / _errors.pyi carry the names generated from the header (tools/gen_errors.py)."""
    tool = os.path.join(os.path.dirname(HEADER), "..", "..", "tools", "gen_errors.py")
    proc = subprocess.run([sys.executable, tool, "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_cython_names_cover_the_table():
    """Every name of the header is cimportable from barecuda._errors, and nothing else is listed."""
    # The .pxd files are in the source tree, not in the wheel (they need headers it does not carry).
    path = os.path.join(os.path.dirname(HEADER), "..", "..", "src", "barecuda", "_errors.pxd")
    pxd = open(path, encoding="utf-8").read()
    block = pxd[pxd.index("BEGIN GENERATED"):pxd.index("END GENERATED")]
    listed = re.findall(r"^\s+(CUDA_\w+)$", block, re.M)
    assert sorted(listed) == sorted(v[0] for v in REFERENCE.values())


def test_curesult_enum_is_the_table():
    assert {m.name: int(m) for m in _errors.CUresult} == {v[0]: c for c, v in REFERENCE.items()}
    assert _errors.CUresult.CUDA_ERROR_NOT_READY == 600
    assert _errors.CUresult(700).name == "CUDA_ERROR_ILLEGAL_ADDRESS"


def test_all_error_codes_is_the_header_table():
    codes = _errors.all_error_codes()
    assert codes == sorted(codes)
    assert len(codes) == len(set(codes))
    assert codes == CODES


def test_names_unique_and_well_formed():
    names = [REFERENCE[c][0] for c in CODES]
    assert len(set(names)) == len(names)
    for c in ERROR_CODES:
        assert re.fullmatch(r"CUDA_ERROR_[A-Z0-9_]+", REFERENCE[c][0]), c


@pytest.mark.parametrize("code", CODES)
def test_error_info_matches_header(code):
    assert _errors.error_info(code) == REFERENCE[code]
    assert barecuda.error_info(code) == REFERENCE[code]


@pytest.mark.parametrize("code", ERROR_CODES)
def test_exception_for_code(code):
    name, description, hint, sticky = REFERENCE[code]
    cls = barecuda.error_class(code)
    assert isinstance(cls, type) and issubclass(cls, barecuda.CudaError)
    assert issubclass(cls, barecuda.BarecudaError)
    if code in EXPECTED_CLASS:
        assert cls is EXPECTED_CLASS[code]
    if sticky and code not in STICKY_EXCEPTIONS:
        assert issubclass(cls, barecuda.CudaStickyError), (code, name, cls)
    if not sticky:
        assert not issubclass(cls, barecuda.CudaStickyError), (code, name, cls)

    e = _errors.make_error(code, "cuSomething", "more detail")
    assert type(e) is cls
    assert (e.code, e.name, e.description, e.hint, e.sticky, e.call) == (
        code, name, description, hint, sticky, "cuSomething")
    msg = str(e)
    assert "cuSomething" in msg and name in msg and str(code) in msg and "more detail" in msg
    if hint:
        assert hint in msg
    if sticky:
        assert "restart" in msg.lower()


@pytest.mark.parametrize("code", ERROR_CODES)
def test_pickle_round_trip(code):
    e = _errors.make_error(code, "cuMemAlloc", "detail text")
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is type(e)
    assert (e2.code, e2.call, e2.name, e2.sticky, e2.detail) == (e.code, e.call, e.name, e.sticky, e.detail)
    assert str(e2) == str(e)
    assert e2.args == e.args


def test_builtin_bases():
    oom = _errors.make_error(2, "cuMemAlloc")
    assert isinstance(oom, MemoryError) and isinstance(oom, barecuda.CudaOutOfMemoryError)
    inval = _errors.make_error(1, "cuMemsetD8Async")
    assert isinstance(inval, ValueError) and isinstance(inval, barecuda.CudaInvalidValueError)
    with pytest.raises(MemoryError):
        raise oom
    with pytest.raises(ValueError):
        raise inval
    assert issubclass(barecuda.CudaInvalidPtxError, barecuda.CudaInvalidImageError)
    assert issubclass(barecuda.CudaError, RuntimeError)
    assert issubclass(barecuda.DriverNotFoundError, OSError)


def test_every_exported_exception_is_in_the_tree():
    for name in dir(barecuda):
        obj = getattr(barecuda, name)
        if isinstance(obj, type) and issubclass(obj, BaseException) and name.startswith("Cuda") \
                and not issubclass(obj, Warning):
            assert issubclass(obj, barecuda.CudaError), name


@pytest.mark.parametrize("code", [-1, 9, 12345, 2**31 - 1])
def test_unknown_code_gets_generic_entry(code):
    name, description, hint, sticky = _errors.error_info(code)
    assert name.startswith("CUDA_ERROR_") and str(code) in name
    assert name not in {v[0] for v in REFERENCE.values()}
    assert description and sticky is False
    assert barecuda.error_class(code) is barecuda.CudaError
    e = _errors.make_error(code, "cuFoo")
    assert type(e) is barecuda.CudaError and e.code == code and e.call == "cuFoo"
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is barecuda.CudaError and e2.code == code and str(e2) == str(e)


def test_driver_not_found_pickles_with_tried():
    e = barecuda.DriverNotFoundError("no driver", ["a: nope", "b: nope"])
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is barecuda.DriverNotFoundError
    assert str(e2) == "no driver" and e2.tried == ("a: nope", "b: nope")


# ----------------------------------------------------------- through the driver
def _device_api():
    if not hasattr(barecuda, "Device"):
        pytest.skip("barecuda.Device not written yet")
    return barecuda.Device


def _query(obj, name):
    """Read `name` whether the package made it a property or a method."""
    v = getattr(obj, name)
    return v() if callable(v) else v


def test_sticky_error_from_a_real_call_path(fake):
    Device = _device_api()
    dev = Device(0)
    dev.synchronize()  # works before the fault
    fake.fail("cuCtxSynchronize", 700)
    with pytest.raises(barecuda.CudaStickyError) as ei:
        dev.synchronize()
    e = ei.value
    assert e.code == 700 and e.name == "CUDA_ERROR_ILLEGAL_ADDRESS" and e.call == "cuCtxSynchronize"
    assert e.sticky and "restart" in str(e)
    assert fake.calls("cuCtxSynchronize") == 2


def test_invalid_value_from_a_real_call_path(fake):
    Device = _device_api()
    dev = Device(0)
    fake.fail("cuDeviceGetAttribute", 1)
    with pytest.raises(ValueError) as ei:
        dev.attribute("multiprocessor_count")
    assert isinstance(ei.value, barecuda.CudaInvalidValueError)
    assert ei.value.call == "cuDeviceGetAttribute" and ei.value.code == 1
    assert dev.attribute("multiprocessor_count") > 0  # one failure only


def test_identity_properties_ask_the_driver_once(fake):
    """name / uuid / pci_bus_id / total_memory / compute_capability never change for an
    ordinal: after the first read they cost no driver call (and cannot fail)."""
    Device = _device_api()
    dev = Device(0)
    first = (dev.name, dev.uuid, dev.pci_bus_id, dev.total_memory, dev.compute_capability)
    calls = {c: fake.calls(c) for c in ("cuDeviceGetName", "cuDeviceGetUuid", "cuDeviceGetPCIBusId",
                                         "cuDeviceTotalMem", "cuDeviceGetAttribute")}
    for c in calls:
        fake.fail(c, 1)
    again = Device(0)
    assert (again.name, again.uuid, again.pci_bus_id, again.total_memory, again.compute_capability) == first
    assert {c: fake.calls(c) for c in calls} == calls
    assert first[0] == "FakeCUDA Device 0" and first[1].startswith("GPU-") and first[3] > 0


def test_out_of_memory_from_a_real_call_path(fake):
    Device = _device_api()
    fake.fail("cuMemGetInfo", 2)
    with pytest.raises(MemoryError) as ei:
        Device(0).mem_info()
    assert isinstance(ei.value, barecuda.CudaOutOfMemoryError) and ei.value.call == "cuMemGetInfo"


# Destructors never raise (docs/errors.md): a failed destroy call becomes a CudaWarning
# naming the call, the object's destructor and the driver's error.
@pytest.mark.parametrize("call, make", [
    ("cuMemHostUnregister", lambda: barecuda.register_host(bytearray(4096))),
    ("cuMemPoolDestroy", lambda: barecuda.DriverMemoryPool(0)),
    ("cuEventDestroy", lambda: barecuda.Event()),
    ("cuGraphDestroy", lambda: barecuda.Graph()),
])
def test_destructor_failure_warns_with_the_call_the_object_and_the_error(fake, call, make):
    obj = make()
    owner = type(obj).__name__
    fake.fail(call, 400)                       # CUDA_ERROR_INVALID_HANDLE
    with pytest.warns(barecuda.CudaWarning) as rec:
        del obj
        gc.collect()
    msgs = [str(w.message) for w in rec]
    assert any(m.startswith(f"{call} in {owner}.__dealloc__: ") and "CUDA_ERROR_INVALID_HANDLE" in m
               for m in msgs), msgs
