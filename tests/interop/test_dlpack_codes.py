"""DLPack 1.1 dtype codes (fp8, fp6, fp4) both ways, against the numbers of the DLPack
specification (dlpack.h, DLDataTypeCode), written out here independently of the code."""
import ctypes

import pytest

import barecuda as bc
from barecuda import _dtype

# DLPack 1.1 DLDataTypeCode values and the (bits, lanes) barecuda uses for each dtype.
SPEC = {
    "float8_e3m4": (7, 8, 1), "float8_e4m3": (8, 8, 1), "float8_e4m3b11fnuz": (9, 8, 1),
    "float8_e4m3fn": (10, 8, 1), "float8_e4m3fnuz": (11, 8, 1), "float8_e5m2": (12, 8, 1),
    "float8_e5m2fnuz": (13, 8, 1), "float8_e8m0fnu": (14, 8, 1),
    "float6_e2m3fn": (15, 6, 1), "float6_e3m2fn": (16, 6, 1),
    "float4_e2m1fn_x2": (17, 4, 2),
    "bfloat16": (4, 16, 1), "float32": (2, 32, 1), "bool": (6, 8, 1), "complex64": (5, 64, 1),
}
PADDED = 1 << 2            # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

_get = ctypes.pythonapi.PyCapsule_GetPointer
_get.restype = ctypes.c_void_p
_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _fields(cap, versioned):
    """(code, bits, lanes, flags) read from the capsule's C struct."""
    p = _get(cap, b"dltensor_versioned" if versioned else b"dltensor")
    t = p + (32 if versioned else 0)            # DLManagedTensorVersioned: version, ctx, deleter, flags
    dtype = t + 8 + 8 + 4                       # data, device, ndim
    code, bits = ctypes.c_uint8.from_address(dtype).value, ctypes.c_uint8.from_address(dtype + 1).value
    lanes = ctypes.c_uint16.from_address(dtype + 2).value
    flags = ctypes.c_uint64.from_address(p + 24).value if versioned else None
    return code, bits, lanes, flags


def test_table_matches_the_specification():
    table = _dtype._dlpack_table()
    for name, want in SPEC.items():
        assert table[name] == want, name


@pytest.mark.parametrize("name", sorted(SPEC))
def test_export_and_import_round_trip(fake, name):
    b = bc.empty(8, name)
    code, bits, lanes = SPEC[name]
    cap = b.__dlpack__(max_version=(1, 1))
    got = _fields(cap, True)
    assert got[:3] == (code, bits, lanes)
    assert bool(got[3] & PADDED) == (bits == 6)
    v = bc.as_device_buffer(cap)
    assert v.ptr == b.ptr and v.nbytes == b.nbytes and v.shape == (8,)
    assert str(v.dtype) == name


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"])
def test_legacy_capsules_carry_the_codes_too(fake, name):
    cap = bc.empty(4, name).__dlpack__()
    assert _fields(cap, False)[:3] == SPEC[name]


def test_padded_6_bit_needs_a_versioned_capsule(fake):
    b = bc.empty(4, "float6_e2m3fn")
    with pytest.raises(BufferError, match="versioned"):
        b.__dlpack__()


def test_packed_6_bit_import_is_refused(fake):
    cap = bc.empty(4, "float6_e3m2fn").__dlpack__(max_version=(1, 1))
    p = _get(cap, b"dltensor_versioned")
    flags = ctypes.c_uint64.from_address(p + 24)
    flags.value &= ~PADDED                       # as a producer of packed data would send it
    with pytest.raises(BufferError, match="packed 6-bit"):
        bc.as_device_buffer(cap)
