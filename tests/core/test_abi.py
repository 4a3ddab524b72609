"""Our hand-written driver ABI (include/barecuda/cuda_abi.h) against NVIDIA's headers.

The comparisons with cuda.h / cudaTypedefs.h run only where a CUDA toolkit header is
installed ($CUDA_HOME/include or /usr/local/cuda/include) and are skipped elsewhere
(CI). The fake driver's tests at the end run everywhere: the double is compiled
against our header, and its parameter-buffer layouts are checked against layouts
written out by hand.
"""
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
from _helpers import REPO

INCLUDE = os.path.join(REPO, "include")
OUR_ABI = os.path.join(INCLUDE, "barecuda", "cuda_abi.h")
OUR_ERRORS = os.path.join(INCLUDE, "barecuda", "cuda_errors.h")


def _cuda_include():
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and os.path.exists(os.path.join(base, "include", "cuda.h")):
            return os.path.join(base, "include")
    return None


CUDA_INCLUDE = _cuda_include()
needs_cuda_h = pytest.mark.skipif(CUDA_INCLUDE is None, reason="no cuda.h ($CUDA_HOME/include or /usr/local/cuda)")


def _compiler():
    cc = os.environ.get("CC")
    if cc:
        return cc.split()
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    pytest.skip("no C compiler")


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


# ------------------------------------------------------------------ parsing
def _eval_c_int(expr, known):
    expr = expr.strip()
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr)
    names = re.findall(r"\b[A-Za-z_]\w*", expr)
    if any(n not in known for n in names):
        return None
    if not re.fullmatch(r"[\w\s()+\-*<>|&~]+", expr):
        return None
    try:
        return int(eval(expr, {"__builtins__": {}}, dict(known)))  # noqa: S307 - digits, names, operators only
    except Exception:  # noqa: BLE001
        return None


def _preprocessed(path):
    """`path` after the C preprocessor (our header writes some enums as X-macros)."""
    cc = (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"))
    if not cc:
        pytest.skip("no C compiler to expand the ABI header's X-macros")
    proc = subprocess.run(cc.split() + ["-E", "-P", "-dD", "-I", INCLUDE, path], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # keep the object-like #defines (-dD), drop function-like ones and #undef: only the
    # expansions matter
    return "\n".join(line for line in proc.stdout.splitlines()
                     if not re.match(r"\s*#\s*(undef\b|define\s+\w+\()", line))


def parse_enums(path, preprocess=False):
    """{NAME: value} for every enumerator (implicit values included) and integer #define.

    With `preprocess`, the file is expanded by the C preprocessor first and barecuda's
    own helper names (BC_*) are left out.
    """
    if preprocess:
        text = _strip_comments(_preprocessed(path))
        return {k: v for k, v in parse_enums_text(text).items() if not k.startswith("BC_")}
    return parse_enums_text(_strip_comments(open(path, encoding="utf-8", errors="replace").read()))


def parse_enums_text(text):
    values = {}
    for body in re.findall(r"\benum\s*\w*\s*\{(.*?)\}", text, flags=re.S):
        nxt = 0
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            m = re.fullmatch(r"([A-Za-z_]\w*)\s*(?:=\s*(.+))?", item, flags=re.S)
            if not m:
                continue
            name, expr = m.group(1), m.group(2)
            v = nxt if expr is None else _eval_c_int(expr, values)
            if v is None:
                continue
            values[name] = v
            nxt = v + 1
    for name, val in re.findall(r"^\s*#\s*define\s+(CU[A-Z_]*_[A-Z0-9_]+)\s+\(?\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\s*\)?\s*$",
                                text, flags=re.M):
        values.setdefault(name, int(val, 0))
    return values


def split_params(params):
    params = params.strip()
    if params in ("", "void"):
        return []
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def parse_our_symbols():
    """[(name, version, required, param_text)] from BC_DRIVER_SYMBOLS."""
    text = open(OUR_ABI, encoding="utf-8").read()
    block = text[text.index("#define BC_DRIVER_SYMBOLS(X)"):]
    block = block[:block.index("\n\n")]
    syms = re.findall(r"X\((\w+),\s*(\d+),\s*([01]),\s*\((.*?)\)\)\s*\\?\s*$", block, flags=re.M)
    return [(n, int(v), int(r), p) for n, v, r, p in syms]


OUR_SYMBOLS = parse_our_symbols()


def parse_typedefs(path):
    """{'PFN_name_vN': param_text} from cudaTypedefs.h."""
    text = _strip_comments(open(path, encoding="utf-8", errors="replace").read())
    out = {}
    for m in re.finditer(r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*(PFN_\w+)\s*\)\s*\(", text):
        i, depth = m.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out[m.group(1)] = " ".join(text[m.end():i - 1].split())
    return out


def test_our_symbol_table_parsed():
    names = [s[0] for s in OUR_SYMBOLS]
    assert len(names) > 50 and len(set(names)) == len(names)
    assert "cuLaunchKernel" in names and "cuInit" in names
    text = open(OUR_ABI, encoding="utf-8").read()
    assert len(names) == text[text.index("#define BC_DRIVER_SYMBOLS(X)"):].split("\n\n")[0].count("    X(")


def test_pxd_driver_table_matches_the_header():
    """_abi.pxd's bc_driver_t has one slot per BC_DRIVER_SYMBOLS row, in the same order
    (the C struct is generated from the header; Cython must name the same fields)."""
    pxd = open(os.path.join(REPO, "src", "barecuda", "_abi.pxd"), encoding="utf-8").read()
    block = pxd[pxd.index("ctypedef struct bc_driver_t:"):]
    block = block[:block.index("\n\n")]
    slots = re.findall(r"\(\*(cu\w+)\)", block)
    assert slots == [s[0] for s in OUR_SYMBOLS]


def test_pxd_driver_table_is_generated_from_the_header():
    """_abi.pxd's bc_driver_t, and _nvrtc.pyx's bc_nvrtc_t and bc_nvjitlink_t, are what
    tools/gen_abi.py writes from BC_DRIVER_SYMBOLS, BC_NVRTC_SYMBOLS and BC_NVJITLINK_SYMBOLS
    (names, order and parameter lists: each table is written once, in its header)."""
    proc = subprocess.run([sys.executable, os.path.join(REPO, "tools", "gen_abi.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------- vs cuda.h
@needs_cuda_h
def test_enum_values_match_cuda_h():
    ours = parse_enums(OUR_ABI, preprocess=True)
    theirs = parse_enums(os.path.join(CUDA_INCLUDE, "cuda.h"))
    assert len(ours) > 200 and len(theirs) > 500
    missing = sorted(n for n in ours if n not in theirs)
    assert not missing, f"names in cuda_abi.h that cuda.h does not define: {missing}"
    wrong = {n: (ours[n], theirs[n]) for n in ours if ours[n] != theirs[n]}
    assert not wrong, f"(ours, cuda.h) values differ: {wrong}"


@needs_cuda_h
def test_error_codes_match_cuda_h():
    text = open(OUR_ERRORS, encoding="utf-8").read()
    ours = {name: int(code) for code, name in re.findall(r'X\(\s*(-?\d+)\s*,\s*(CUDA_\w+)\s*,', text)}
    theirs = {n: v for n, v in parse_enums(os.path.join(CUDA_INCLUDE, "cuda.h")).items()
              if n == "CUDA_SUCCESS" or n.startswith("CUDA_ERROR_")}
    assert len(ours) > 90
    wrong = {n: (v, theirs.get(n)) for n, v in ours.items() if theirs.get(n) != v}
    assert not wrong, f"(ours, cuda.h) differ or unknown to cuda.h: {wrong}"
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"CUresult values in cuda.h that cuda_errors.h lacks: {missing}"


STRUCT_FIELDS = {
    "CUuuid": ["bytes"],
    "CUmemLocation": ["type", "id"],
    "CUDA_MEMCPY2D": ["srcXInBytes", "srcY", "srcMemoryType", "srcHost", "srcDevice", "srcArray", "srcPitch",
                      "dstXInBytes", "dstY", "dstMemoryType", "dstHost", "dstDevice", "dstArray", "dstPitch",
                      "WidthInBytes", "Height"],
    "CUDA_MEMCPY3D": ["srcXInBytes", "srcY", "srcZ", "srcLOD", "srcMemoryType", "srcHost", "srcDevice", "srcArray",
                      "reserved0", "srcPitch", "srcHeight", "dstXInBytes", "dstY", "dstZ", "dstLOD", "dstMemoryType",
                      "dstHost", "dstDevice", "dstArray", "reserved1", "dstPitch", "dstHeight", "WidthInBytes",
                      "Height", "Depth"],
    "CUmemPoolProps": ["allocType", "handleTypes", "location", "win32SecurityAttributes", "maxSize", "usage",
                       "reserved"],
    "CUlaunchAttributeValue": ["pad", "cooperative", "clusterDim", "clusterSchedulingPolicyPreference",
                               "programmaticStreamSerializationAllowed", "programmaticEvent", "priority"],
    "CUlaunchAttribute": ["id", "value"],
    "CUlaunchConfig": ["gridDimX", "gridDimY", "gridDimZ", "blockDimX", "blockDimY", "blockDimZ", "sharedMemBytes",
                       "hStream", "attrs", "numAttrs"],
}


def _layout_program(include_line):
    lines = ["#include <stdio.h>", "#include <stddef.h>", include_line,
             "#define F(T, f) printf(#T \".\" #f \" %zu %zu\\n\", offsetof(T, f), sizeof(((T *)0)->f))",
             "int main(void) {"]
    for t, fields in STRUCT_FIELDS.items():
        lines.append(f'    printf("{t} %zu %zu\\n", sizeof({t}), _Alignof({t}));')
        lines += [f"    F({t}, {f});" for f in fields]
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def _compile_and_run(tmp_path, name, source, include_dirs):
    src = tmp_path / f"{name}.c"
    exe = tmp_path / name
    src.write_text(source)
    cmd = _compiler() + ["-std=gnu11", "-o", str(exe), str(src)] + [f"-I{d}" for d in include_dirs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in run.stdout.splitlines())


@needs_cuda_h
def test_struct_layouts_match_cuda_h(tmp_path):
    ours = _compile_and_run(tmp_path, "ours", _layout_program('#include "barecuda/cuda_abi.h"'), [INCLUDE])
    theirs = _compile_and_run(tmp_path, "theirs", _layout_program("#include <cuda.h>"), [CUDA_INCLUDE])
    assert len(ours) == sum(len(f) + 1 for f in STRUCT_FIELDS.values())
    diff = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
    assert not diff, f"(ours, cuda.h) 'offset size' differ: {diff}"


def _typedefs():
    path = os.path.join(CUDA_INCLUDE, "cudaTypedefs.h")
    if not os.path.exists(path):
        pytest.skip("no cudaTypedefs.h")
    return parse_typedefs(path)


@needs_cuda_h
@pytest.mark.parametrize("name, version, required, params", OUR_SYMBOLS, ids=[s[0] for s in OUR_SYMBOLS])
def test_symbol_version_names_a_real_abi_variant(name, version, required, params):
    typedefs = _typedefs()
    key = f"PFN_{name}_v{version}"
    variants = sorted(k for k in typedefs if re.fullmatch(rf"PFN_{name}_v\d+", k))
    assert key in typedefs, f"{key} not in cudaTypedefs.h; variants there: {variants}"
    assert len(split_params(typedefs[key])) == len(split_params(params)), (typedefs[key], params)


@needs_cuda_h
def test_symbol_signatures_compile_against_nvidia_typedefs(tmp_path):
    """Our parameter lists, compiled against cuda.h's types, must be assignable to PFN_<name>_v<version>."""
    _typedefs()
    lines = ["#include <cuda.h>", "#include <cudaTypedefs.h>"]
    for name, version, _, params in OUR_SYMBOLS:
        lines.append(f"static CUresult CUDAAPI bc_{name} ({params}) {{ return CUDA_SUCCESS; }}")
        lines.append(f"PFN_{name}_v{version} bc_check_{name} = bc_{name};")
    src = tmp_path / "sigs.c"
    src.write_text("\n".join(lines) + "\n")
    cmd = _compiler() + ["-std=gnu11", "-c", "-Werror=incompatible-pointer-types", "-Wno-unused-parameter",
                         f"-I{CUDA_INCLUDE}", str(src), "-o", str(tmp_path / "sigs.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------ the fake driver
def test_fake_driver_compiles_cleanly_against_our_header(tmp_path):
    srcs = sorted(glob.glob(os.path.join(REPO, "tests", "fakecuda", "*.c")))
    assert len(srcs) > 1
    for extra in ([], ["-DFAKECUDA_NO_GPA"]):
        cmd = _compiler() + ["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-pthread",
                             f"-I{INCLUDE}", *extra, *srcs, "-o", str(tmp_path / "libfake.so")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_fake_driver_exports_every_symbol(fake_lib_path, fake_nogpa_path):
    lib = ctypes.CDLL(fake_lib_path)
    for name, _, _, _ in OUR_SYMBOLS:
        assert hasattr(lib, name), name
    assert hasattr(lib, "cuGetProcAddress_v2")
    nogpa = ctypes.CDLL(fake_nogpa_path)
    assert not hasattr(nogpa, "cuGetProcAddress_v2")
    assert hasattr(nogpa, "cuLaunchKernel")


class _Ctx:
    """Make the fake's primary context current on this thread through ctypes, and undo it."""

    def __init__(self, lib):
        self.lib = lib

    def __enter__(self):
        self.prev = ctypes.c_void_p()
        assert self.lib.cuCtxGetCurrent(ctypes.byref(self.prev)) == 0
        ctx = ctypes.c_void_p()
        assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert self.lib.cuCtxSetCurrent(ctx) == 0
        return self

    def __exit__(self, *exc):
        self.lib.cuCtxSetCurrent(self.prev)
        assert self.lib.cuDevicePrimaryCtxRelease(0) == 0


def _load(lib, image, n_opts=0, opts=None, vals=None):
    mod = ctypes.c_void_p()
    rc = lib.cuModuleLoadDataEx(ctypes.byref(mod), ctypes.c_char_p(image), n_opts, opts, vals)
    return rc, mod


def _layout(lib, func):
    out, i = [], 0
    while True:
        off, size = ctypes.c_size_t(), ctypes.c_size_t()
        rc = lib.cuFuncGetParamInfo(func, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size))
        if rc != 0:
            assert rc == 1  # CUDA_ERROR_INVALID_VALUE past the last parameter
            return out
        out.append((off.value, size.value))
        i += 1


@pytest.mark.parametrize("source_name", ["VADD", "ALL_SCALARS", "MIXED", "STRUCT_PARAM", "SIXTEEN_PARAMS",
                                         "NO_PARAMS", "WITH_GLOBALS"])
@pytest.mark.parametrize("wrap", ["ptx", "cubin", "fatbin"])
def test_fake_param_layouts(fake, ptx, source_name, wrap):
    lib = fake.lib
    text = getattr(ptx, source_name)
    image = {"ptx": lambda t: t.encode(), "cubin": ptx.fake_cubin, "fatbin": ptx.fake_fatbin}[wrap](text)
    names = re.findall(r"\.entry\s+(\w+)", text)
    assert names
    with _Ctx(lib):
        rc, mod = _load(lib, image)
        assert rc == 0
        assert fake.live("module") >= 1
        try:
            for name in names:
                f = ctypes.c_void_p()
                assert lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
                assert _layout(lib, f) == ptx.LAYOUTS[name], name
            f = ctypes.c_void_p()
            assert lib.cuModuleGetFunction(ctypes.byref(f), mod, b"no_such_kernel") == 500
        finally:
            assert lib.cuModuleUnload(mod) == 0


def test_fake_records_launch_bytes(fake, ptx):
    import struct
    lib = fake.lib
    with _Ctx(lib):
        rc, mod = _load(lib, ptx.MIXED.encode())
        assert rc == 0
        try:
            f = ctypes.c_void_p()
            assert lib.cuModuleGetFunction(ctypes.byref(f), mod, b"mixed") == 0
            vals = [ctypes.c_uint8(0xAB), ctypes.c_double(2.5), ctypes.c_int8(-3), ctypes.c_float(1.25),
                    ctypes.c_int16(-2), ctypes.c_int64(-(2**40)), ctypes.c_uint64(0xDEADBEEF00)]
            kp = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
            before = fake.launch_count()
            assert lib.cuLaunchKernel(f, 3, 2, 1, 64, 2, 1, 128, None, kp, None) == 0
            assert fake.launch_count() == before + 1
            rec = fake.last_launch()
            expected = bytearray(ptx.PARAM_BYTES["mixed"])
            for (off, _), fmt, v in zip(ptx.LAYOUTS["mixed"], "<B <d <b <f <h <q <Q".split(), vals):
                struct.pack_into(fmt, expected, off, v.value)
            assert rec.params == bytes(expected)
            assert (rec.name, rec.grid, rec.block, rec.shared, rec.kind) == ("mixed", (3, 2, 1), (64, 2, 1), 128,
                                                                              "kernel")
            # the same bytes through `extra`
            buf = ctypes.create_string_buffer(bytes(expected), len(expected))
            size = ctypes.c_size_t(len(expected))
            extra = (ctypes.c_void_p * 5)(1, ctypes.cast(buf, ctypes.c_void_p), 2,
                                          ctypes.cast(ctypes.byref(size), ctypes.c_void_p), 0)
            assert lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, extra) == 0
            assert fake.last_launch().params == bytes(expected) and fake.last_launch().used_extra
            assert fake.last_launch(1).name == "mixed" and not fake.last_launch(1).used_extra
            # limits
            assert lib.cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, None, kp, None) == 1
            assert lib.cuLaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, None, kp, None) == 1
            assert lib.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 49153, None, kp, None) == 1
            assert fake.launch_count() == before + 2
        finally:
            assert lib.cuModuleUnload(mod) == 0


def test_fake_invalid_ptx_writes_logs(fake, ptx):
    lib = fake.lib
    err = ctypes.create_string_buffer(64)
    info = ctypes.create_string_buffer(256)
    opts = (ctypes.c_int * 4)(5, 6, 3, 4)  # ERROR_LOG_BUFFER, its size, INFO_LOG_BUFFER, its size
    vals = (ctypes.c_void_p * 4)(ctypes.cast(err, ctypes.c_void_p).value, 64,
                                 ctypes.cast(info, ctypes.c_void_p).value, 256)
    with _Ctx(lib):
        modules = fake.live("module")
        rc, _ = _load(lib, ptx.INVALID.encode(), 4, opts, vals)
        assert rc == 218
        assert fake.live("module") == modules
    assert b"FAKECUDA: invalid" in err.value or b"fakecuda" in err.value
    assert vals[1] == len(err.value) <= 63  # written length comes back through the size slot
    assert info.value and vals[3] == len(info.value)
    with _Ctx(lib):
        assert _load(lib, b"\x7fELF\x02\x01\x01")[0] == 200
        assert _load(lib, b"hello world")[0] == 200


def test_fake_fault_injection_and_counters(fake):
    lib = fake.lib
    with _Ctx(lib):
        fake.fail("cuMemAlloc", 2, after=1, times=2)
        ptrs, codes = [], []
        for _ in range(4):
            p = ctypes.c_uint64()
            codes.append(lib.cuMemAlloc(ctypes.byref(p), ctypes.c_size_t(1000)))
            if codes[-1] == 0:
                ptrs.append(p.value)
        assert codes == [0, 2, 2, 0]
        assert fake.calls("cuMemAlloc") == 4
        assert fake.live("mem") >= 2
        data = bytes(range(200)) * 5
        assert lib.cuMemcpyHtoD(ctypes.c_uint64(ptrs[0]), data, ctypes.c_size_t(1000)) == 0
        assert ctypes.string_at(ptrs[0], 1000) == data  # device memory is host RAM
        assert lib.cuMemcpyHtoD(ctypes.c_uint64(ptrs[0]), data, ctypes.c_size_t(1001)) == 1  # out of range
        for p in ptrs:
            assert lib.cuMemFree(ctypes.c_uint64(p)) == 0
        assert lib.cuMemFree(ctypes.c_uint64(ptrs[0])) == 1  # double free
    with pytest.raises(KeyError):
        fake.fail("cuNoSuchThing", 1)


# ------------------------------------------------------------ the real driver
@pytest.mark.gpu
@pytest.mark.parametrize("source_name", ["VADD", "ALL_SCALARS", "MIXED", "STRUCT_PARAM", "SIXTEEN_PARAMS",
                                         "NO_PARAMS", "WITH_GLOBALS"])
def test_real_driver_param_layouts_match_hand_written(ptx, source_name):
    """The hand-written layouts in tests/fakecuda/ptx.py are what a real driver reports."""
    import barecuda
    barecuda._loader.load()
    if not barecuda._loader.symbols()["cuFuncGetParamInfo"][2]:
        pytest.skip("driver has no cuFuncGetParamInfo (needs 12.4)")
    lib = ctypes.CDLL(barecuda.driver_path())
    text = getattr(ptx, source_name)
    prev, ctx = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.cuCtxGetCurrent(ctypes.byref(prev)) == 0
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    try:
        assert lib.cuCtxSetCurrent(ctx) == 0
        err = ctypes.create_string_buffer(4096)
        opts = (ctypes.c_int * 2)(5, 6)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(err, ctypes.c_void_p).value, 4096)
        rc, mod = _load(lib, text.encode(), 2, opts, vals)
        assert rc == 0, err.value.decode(errors="replace")
        try:
            for name in re.findall(r"\.entry\s+(\w+)", text):
                f = ctypes.c_void_p()
                assert lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()) == 0
                assert _layout(lib, f) == ptx.LAYOUTS[name], name
            for gname, size in (ptx.GLOBALS.items() if source_name == "WITH_GLOBALS" else ()):
                nbytes = ctypes.c_size_t()
                assert lib.cuModuleGetGlobal_v2(None, ctypes.byref(nbytes), mod, gname.encode()) == 0
                assert nbytes.value == size
        finally:
            assert lib.cuModuleUnload(mod) == 0
    finally:
        lib.cuCtxSetCurrent(prev)
        assert lib.cuDevicePrimaryCtxRelease_v2(0) == 0


def test_fake_says_why_a_launch_was_rejected(fake, ptx):
    lib = fake.lib
    with _Ctx(lib):
        rc, mod = _load(lib, ptx.NO_PARAMS.encode())
        assert rc == 0
        try:
            f = ctypes.c_void_p()
            assert lib.cuModuleGetFunction(ctypes.byref(f), mod, b"noargs") == 0
            assert fake.last_reason() == ""
            assert lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, None, None, None) == 1
            assert "block dim 2" in fake.last_reason()
            assert lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
            assert fake.last_launch().params == b""
        finally:
            assert lib.cuModuleUnload(mod) == 0


def test_attribute_name_tables_are_the_enums():
    """The name tables the package builds its attribute dicts from are the ABI enums."""
    import barecuda
    dev, fn = barecuda._loader._attribute_tables()
    enums = parse_enums(OUR_ABI, preprocess=True)
    assert dev == {k[len("CU_DEVICE_ATTRIBUTE_"):].lower(): v for k, v in enums.items()
                   if k.startswith("CU_DEVICE_ATTRIBUTE_") and k != "CU_DEVICE_ATTRIBUTE_MAX"}
    assert fn == {k[len("CU_FUNC_ATTRIBUTE_"):].lower(): v for k, v in enums.items()
                  if k.startswith("CU_FUNC_ATTRIBUTE_") and k != "CU_FUNC_ATTRIBUTE_MAX"}
    assert dev["multiprocessor_count"] == 16 and fn["num_regs"] == 4
    # the public tables (Device.attribute, Kernel.attribute names) are these tables
    assert barecuda._device.ATTRIBUTES == dev
    assert barecuda._launch.FUNC_ATTRIBUTES == fn
