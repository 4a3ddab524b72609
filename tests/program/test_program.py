"""barecuda.Program and friends on any machine: real NVRTC/nvJitLink (pip wheels), the fake driver.

NVRTC and nvJitLink run without a GPU, so these tests compile and link real programs.
They are skipped when NVRTC cannot be found (`pip install nvidia-cuda-nvrtc`).
"""
import multiprocessing
import os
import random
import struct
import subprocess
import sys
import textwrap

import pytest

import barecuda as bc
from barecuda import _compile_cache, _libfind, _program
from _helpers import REPO
import ptx

HAVE_NVRTC = _program.nvrtc_available()
HAVE_NVJITLINK = _program.nvjitlink_available()
needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC not found (pip install nvidia-cuda-nvrtc)")
needs_nvjitlink = pytest.mark.skipif(not (HAVE_NVRTC and HAVE_NVJITLINK),
                                     reason="NVRTC/nvJitLink not found (pip install nvidia-nvjitlink)")

TEMPLATES = r"""
template <typename T>
__global__ void scale(T *a, T s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= s;
}
namespace ns {
template <int N, typename T>
__global__ void fill(T *a, T v) { a[threadIdx.x % N] = v; }
}
extern "C" __global__ void put(int *o, int a, short b, signed char c, long long d, double e) {
    o[0] = a + b + c + (int)d + (int)e;
}
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(d))
    bc.clear_cache(disk=False)
    yield d / "nvrtc"
    bc.clear_cache(disk=False)


def _env(**extra):
    env = dict(os.environ)   # conftest put the barecuda under test first on PYTHONPATH
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=_env(**env), timeout=240)


# ------------------------------------------------------------------ finding the libraries
def test_import_opens_no_compiler_and_no_numpy():
    r = _run("""
        import sys, barecuda
        maps = open('/proc/self/maps').read() if sys.platform.startswith('linux') else ''
        print('numpy' in sys.modules, 'libnvrtc' in maps, 'libnvJitLink' in maps)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False"]


def test_env_override_is_exclusive(monkeypatch):
    monkeypatch.setenv("BARECUDA_NVRTC", os.pathsep.join(["/a/libnvrtc.so.13", "/b/libnvrtc.so.12"]))
    assert _libfind.candidates(_libfind.NVRTC) == ["/a/libnvrtc.so.13", "/b/libnvrtc.so.12"]


def test_wheel_and_toolkit_folders_are_searched(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    cu13 = site / "nvidia" / "cu13" / "lib"
    cu12 = site / "nvidia" / "cuda_nvrtc" / "lib"
    home = tmp_path / "cuda" / "lib64"
    for d, n in ((cu13, "libnvrtc.so.13"), (cu12, "libnvrtc.so.12"), (home, "libnvrtc.so.13")):
        d.mkdir(parents=True)
        (d / n).write_bytes(b"")
    monkeypatch.delenv("BARECUDA_NVRTC", raising=False)
    monkeypatch.setattr(_libfind, "site_dirs", lambda: [str(site)])
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    c = _libfind.candidates(_libfind.NVRTC)
    assert c.index(str(cu13 / "libnvrtc.so.13")) < c.index(str(cu12 / "libnvrtc.so.12"))
    assert c.index(str(cu12 / "libnvrtc.so.12")) < c.index(str(home / "libnvrtc.so.13"))
    assert c[-1] == "libnvrtc.so"          # then the system loader's own search


def test_not_found_names_the_pip_package():
    r = _run("""
        import barecuda as bc
        try:
            bc.Program('__global__ void k(){}').compile('ptx', arch=90)
        except bc.CompilerNotFoundError as e:
            print('RAISED'); print(e); print(len(e.tried))
    """, BARECUDA_NVRTC="/nonexistent/libnvrtc.so.13")
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout
    assert "pip install nvidia-cuda-nvrtc" in r.stdout
    assert "/nonexistent/libnvrtc.so.13" in r.stdout
    assert r.stdout.split()[-1] == "1"


# ------------------------------------------------------------------ version skew (pure)
@pytest.mark.parametrize("want,nv,drv,cc,archs,expect", [
    ("auto", (13, 0), (13, 0), 90, (75, 80, 90, 100), ("cubin", "sm_90")),
    ("auto", (13, 5), (13, 0), 90, (75, 80, 90, 100), ("cubin", "sm_90")),      # newer minor: SASS loads
    ("auto", 13050, 13000, (9, 0), (), ("cubin", "sm_90")),
    ("auto", (12, 8), (13, 0), 120, (75, 80, 90, 100), ("ptx", "compute_100")),  # unknown arch: PTX, driver newer
    ("auto", (12, 4), None, 90, (), ("ptx", "compute_90")),                      # no driver known: offline PTX
    ("ptx", (13, 5), (13, 0), 90, (), ("ptx", "compute_90")),                   # asked for; load() checks it
    ("cubin", (13, 0), (13, 0), "sm_90a", (90,), ("cubin", "sm_90a")),
    ("ltoir", (13, 0), (13, 0), 80, (80, 90), ("ltoir", "sm_80")),
])
def test_select_target(want, nv, drv, cc, archs, expect):
    assert _program.select_target(want, nv, drv, cc, archs) == expect


def test_select_target_refuses_what_the_driver_cannot_load():
    with pytest.raises(bc.DriverVersionError, match="NVRTC 14.0 is newer than the driver"):
        _program.select_target("auto", (14, 0), (13, 0), 90, (90,))
    # NVRTC newer, and it cannot make SASS for the device: its PTX would be refused too
    with pytest.raises(bc.DriverVersionError, match="ISA 9.5"):
        _program.select_target("auto", (13, 5), (13, 0), 130, (90, 100))
    with pytest.raises(bc.CompileError, match="cannot compile for sm_130"):
        _program.select_target("cubin", (13, 0), (13, 0), 130, (90, 100))
    with pytest.raises(ValueError):
        _program.select_target("sass", (13, 0), (13, 0), 90, ())


def test_ptx_isa_table():
    assert _program.ptx_isa_for((12, 0)) == (8, 0)
    assert _program.ptx_isa_for(12040) == (8, 4)
    assert _program.ptx_isa_for((12, 7)) == (8, 5)       # never released: as 12.6
    assert _program.ptx_isa_for((13, 0)) == (9, 0)
    assert _program.ptx_isa_for((13, 5)) == (9, 5)
    assert _program.ptx_version_of("// c\n.version 8.4\n.target sm_90\n") == (8, 4)
    assert _program.ptx_version_of(b".target sm_90\n") is None


# ------------------------------------------------------------------ compiling
@needs_nvrtc
def test_templates_name_expressions_and_ptx_signatures(cache_dir):
    p = bc.Program(TEMPLATES)
    oc = p.compile("ptx", arch="sm_90", name_expressions=["scale<float>", "scale<double>", "ns::fill<4, short>"])
    names = oc.lowered_names
    assert set(names) == {"scale<float>", "scale<double>", "ns::fill<4, short>"}
    assert all(n.startswith("_Z") for n in names.values())
    assert len(set(names.values())) == 3
    sigs = oc.signatures()
    # NVRTC declares C int/short/signed char/long long as .u32/.u16/.u8/.u64
    assert sigs["put"] == [("ptr", 8, 8) if sigs["put"][0][0] == "ptr" else ("u64", 8, 8),
                           ("u32", 4, 4), ("u16", 2, 2), ("u8", 1, 1), ("u64", 8, 8), ("f64", 8, 8)]
    assert [t for t, _, _ in sigs[names["scale<float>"]]][1:] == ["f32", "u32"]
    assert [t for t, _, _ in sigs[names["scale<double>"]]][1:] == ["f64", "u32"]
    assert [t for t, _, _ in sigs[names["ns::fill<4, short>"]]][1:] == ["u16"]
    assert oc.lowered_name("scale<float>") == names["scale<float>"]
    assert oc.lowered_name("put") == "put"
    assert oc.kind == "ptx" and oc.arch == "compute_90"
    assert _program.ptx_version_of(oc.code) == _program.ptx_isa_for(bc.nvrtc_version())


@needs_nvrtc
def test_cubin_keeps_the_ptx_signature(cache_dir):
    oc = bc.Program(TEMPLATES).compile("cubin", arch=90, name_expressions=["scale<float>"])
    assert oc.code[:4] == b"\x7fELF"
    assert oc.arch == "sm_90"
    low = oc.lowered_name("scale<float>")
    assert low.encode() in oc.code                    # the ELF has the kernel's symbol
    assert [t for t, _, _ in oc.signatures()[low]][1:] == ["f32", "u32"]


@needs_nvrtc
def test_ltoir_has_signatures_too(cache_dir):
    oc = bc.Program(TEMPLATES, rdc=True).compile("ltoir", arch=90, name_expressions=["scale<double>"])
    assert oc.kind == "ltoir" and len(oc.code) > 0 and oc.code[:4] != b"\x7fELF"
    assert [t for t, _, _ in oc.signatures()[oc.lowered_name("scale<double>")]][1:] == ["f64", "u32"]


@needs_nvrtc
def test_compile_error_carries_the_log(cache_dir):
    src = "__global__ void k(float *a) {\n    a[0] = not_declared_anywhere + 1;\n}\n"
    with pytest.raises(bc.CompileError) as ei:
        bc.Program(src, name="broken.cu").compile("ptx", arch=90)
    e = ei.value
    assert "not_declared_anywhere" in e.log and "broken.cu(2)" in e.log
    assert "not_declared_anywhere" in str(e)
    assert e.code == 6                               # NVRTC_ERROR_COMPILATION
    assert bc.cache_info()["entries"] == 0           # failures are not cached


@needs_nvrtc
def test_bad_option_is_a_compile_error(cache_dir):
    with pytest.raises(bc.CompileError, match="--no-such-option"):
        bc.Program("__global__ void k(){}", options=["--no-such-option"]).compile("ptx", arch=90)
    with pytest.raises(ValueError, match="arch"):
        bc.Program("__global__ void k(){}", options=["-arch=sm_90"])


@needs_nvrtc
def test_headers_defines_and_options_reach_the_compiler(cache_dir):
    src = '#include "consts.h"\nextern "C" __global__ void k(int *o) { o[0] = MAGIC + EXTRA; }\n'

    def ptx(magic, extra, **kw):
        return bc.Program(src, headers={"consts.h": f"#define MAGIC {magic}\n"}, defines={"EXTRA": extra},
                          **kw).compile("ptx", arch=90).ptx

    assert str(123000 + 456) in ptx(123000, 456)
    assert str(777000 + 1) in ptx(777000, 1)        # header content is part of the key, not just its name
    assert ", debug" in ptx(1, 2, debug=True)        # -G
    assert ".loc" in ptx(1, 2, lineinfo=True)
    with pytest.raises(bc.CompileError, match="consts.h"):
        bc.Program(src).compile("ptx", arch=90)


# ------------------------------------------------------------------ the cache
@needs_nvrtc
def test_memory_and_disk_hits(cache_dir):
    p = bc.Program(TEMPLATES)
    a = p.compile("ptx", arch=90)
    info = bc.cache_info()
    assert (info["misses"], info["entries"]) == (info["misses"], 1)
    assert p.compile("ptx", arch=90) is a                         # memo on the program
    assert bc.Program(TEMPLATES).compile("ptx", arch=90) is a     # process memo
    bc.clear_cache(disk=False)
    h0 = bc.cache_info()["disk_hits"]
    b = bc.Program(TEMPLATES).compile("ptx", arch=90)
    assert b is not a and b.code == a.code and bc.cache_info()["disk_hits"] == h0 + 1
    # anything that changes the output is a different entry
    m0 = bc.cache_info()["misses"]
    bc.Program(TEMPLATES).compile("ptx", arch=80)
    bc.Program(TEMPLATES, fast_math=True).compile("ptx", arch=90)
    bc.Program(TEMPLATES).compile("ptx", arch=90, name_expressions=["scale<int>"])
    bc.Program(TEMPLATES).compile("cubin", arch=90)
    assert bc.cache_info()["misses"] == m0 + 4
    assert bc.cache_info()["entries"] == 5
    assert bc.clear_cache() == 5 and bc.cache_info()["entries"] == 0


@needs_nvrtc
def test_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("BARECUDA_CACHE_DIR", "")
    assert bc.cache_dir() is None
    bc.Program("__global__ void k(){}").compile("ptx", arch=90)
    monkeypatch.delenv("BARECUDA_CACHE_DIR")
    monkeypatch.setenv("BARECUDA_CACHE", "0")
    assert bc.cache_dir() is None
    monkeypatch.setenv("BARECUDA_CACHE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform != "win32":
        assert bc.cache_dir() == str(tmp_path / "xdg" / "barecuda" / "nvrtc")


@needs_nvrtc
@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_entries_are_never_loaded(cache_dir, damage):
    good = bc.Program(TEMPLATES).compile("ptx", arch=90)
    (entry,) = [p for p in cache_dir.iterdir() if p.suffix == ".bin"]
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        i = len(data) - 100                           # inside the PTX payload
        entry.write_bytes(data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(b"BCNVRTC2" + os.urandom(200))
    bc.clear_cache(disk=False)
    c0 = bc.cache_info()["corrupt"]
    again = bc.Program(TEMPLATES).compile("ptx", arch=90)
    assert again.code == good.code                    # recompiled, not the damaged bytes
    assert bc.cache_info()["corrupt"] == c0 + 1
    replaced = _compile_cache.unpack_entry(entry.read_bytes())     # a valid entry again
    assert replaced is not None and replaced[0] == good.code


@needs_nvrtc
def test_lru_eviction(cache_dir, monkeypatch):
    progs = [bc.Program(f'extern "C" __global__ void k{i}(int *o) {{ o[0] = {i}; }}') for i in range(3)]
    progs[0].compile("ptx", arch=90)
    progs[1].compile("ptx", arch=90)
    ents = sorted(cache_dir.glob("*.bin"))
    size = max(p.stat().st_size for p in ents)
    os.utime(ents[0], (1000, 1000))                   # make one entry clearly the oldest
    os.utime(ents[1], (2000, 2000))
    oldest = ents[0]
    monkeypatch.setenv("BARECUDA_CACHE_MAX_BYTES", str(2 * size + size // 2))
    progs[2].compile("ptx", arch=90)
    left = set(cache_dir.glob("*.bin"))
    assert len(left) == 2 and oldest not in left
    assert bc.cache_info()["evictions"] >= 1


def _compile_in_child(args):
    cache, q = args
    os.environ["BARECUDA_CACHE_DIR"] = cache
    import barecuda
    oc = barecuda.Program(TEMPLATES, defines={"CHILD": 1}).compile("ptx", arch=90, name_expressions=["scale<float>"])
    return oc.code, oc.lowered_names


@needs_nvrtc
def test_several_processes_compiling_at_once(tmp_path):
    cache = str(tmp_path / "shared")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_compile_in_child, [(cache, i) for i in range(8)])
    codes = {r[0] for r in results}
    assert len(codes) == 1 and all(r[1] == results[0][1] for r in results)
    d = os.path.join(cache, "nvrtc")
    files = os.listdir(d)
    assert [f for f in files if f.endswith(".bin")] and not [f for f in files if f.endswith(".part")]
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            record = _compile_cache.unpack_entry(fh.read())
        assert record is not None and record[0] in codes


# ------------------------------------------------------------------ the driver double
@needs_nvrtc
def test_driver_double_loads_compiled_ptx(fake, cache_dir):
    oc = bc.Program(TEMPLATES).compile("ptx", name_expressions=["scale<float>"])
    drv = bc.driver_version()
    before = fake.calls("cuModuleLoadDataEx")
    if _program.ptx_version_of(oc.code) > _program.ptx_isa_for(drv):
        # NVRTC newer than the (fake) driver: refused before the driver sees it
        with pytest.raises(bc.DriverVersionError, match="newer than the CUDA"):
            oc.load()
        assert fake.calls("cuModuleLoadDataEx") == before
        # and 'auto' chooses SASS for this situation
        assert bc.Program(TEMPLATES).compile(name_expressions=["scale<float>"]).kind == "cubin"
        return
    k = oc.get_kernel("scale<float>")
    assert k.name == oc.lowered_name("scale<float>")


@needs_nvrtc
def test_driver_double_launches_a_compiled_template(fake, tmp_path):
    # `fake`: a driver-double test (skipped under --gpu; BARECUDA_LIBCUDA names the double).
    # A driver new enough for this NVRTC's PTX, so the double JITs (parses) it and records launches.
    nv = _program.nvrtc_version()
    r = _run("""
        import struct, ctypes, barecuda as bc
        src = '''
        template <typename T> __global__ void scale(T *a, T s, int n) { if (threadIdx.x < n) a[threadIdx.x] *= s; }
        '''
        oc = bc.Program(src).compile('ptx', name_expressions=['scale<float>', 'scale<double>'])
        k = oc.get_kernel('scale<float>')
        kd = oc.get_kernel('scale<double>')
        buf = bc.alloc(64)
        k.launch(1, 32, buf, 2.5, 7)
        kd.launch(1, 32, buf, 0.125, 9)
        lib = ctypes.CDLL(__import__('os').environ['BARECUDA_LIBCUDA'])
        name = ctypes.create_string_buffer(256); dims = (ctypes.c_uint * 6)(); sh = ctypes.c_uint()
        st = ctypes.c_void_p(); params = (ctypes.c_ubyte * 64)()
        for back in (1, 0):
            n = lib.fakecuda_last_launch(back, name, 256, dims, ctypes.byref(sh), ctypes.byref(st), params, 64)
            print(name.value.decode(), bytes(params[:n]).hex())
        print(buf.ptr)
    """, FAKECUDA_DRIVER_VERSION=nv[0] * 1000 + nv[1] * 10, BARECUDA_CACHE_DIR=str(tmp_path),
         BARECUDA_LIBCUDA=os.environ["BARECUDA_LIBCUDA"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    ptr = int(lines[2])
    n1, p1 = lines[0].split()
    n2, p2 = lines[1].split()
    assert n1.startswith("_Z5scaleIf") and n2.startswith("_Z5scaleId")
    assert bytes.fromhex(p1) == struct.pack("<Qfi", ptr, 2.5, 7)
    assert bytes.fromhex(p2)[:20] == struct.pack("<Qdi", ptr, 0.125, 9)




def test_library_api_needs_the_symbols(fake):
    # A driver without cuLibrary*: the feature says which driver it needs (the version
    # comes from the symbol table) before any driver call.
    r = _run("""
        import barecuda as bc
        try:
            bc.Library.load(bc.ObjectCode.from_ptx('.version 8.0\\n.target sm_90\\n.address_size 64\\n'
                                                   '.visible .entry k() { ret; }\\n'))
        except bc.DriverVersionError as e:
            print(e)
    """, FAKECUDA_HIDE="cuLibraryLoadData,cuLibraryGetKernel,cuKernelGetFunction,cuLibraryUnload",
         BARECUDA_LIBCUDA=os.environ["BARECUDA_LIBCUDA"])
    assert r.returncode == 0, r.stderr
    assert "Library needs cuLibraryLoadData" in r.stdout and "CUDA 12.0 driver" in r.stdout, r.stdout


def test_library_loads_and_launches_on_the_double(fake):
    dev = bc.Device(0)
    dev.synchronize()                                              # the double loads libraries in a live context
    with bc.Library.load(bc.ObjectCode.from_ptx(ptx.LIB_PUT)) as lib:
        assert not lib.is_closed and lib.code.kind == "ptx"
        k = lib.get_kernel("put", device=dev)
        assert lib.get_kernel("put", device=dev) is k           # one kernel per (name, device)
        buf = bc.alloc(64)
        v, d = random.randrange(1 << 32), random.random()
        k.launch(1, 1, buf, v, d)
        dev.synchronize()
        got = fake.last_launch()
        assert got.name == "put" and got.params == struct.pack("<QI4xd", buf.ptr, v, d)   # f64 aligned to 8
        with pytest.raises(bc.CudaError, match="no kernel named 'nope'"):
            lib.get_kernel("nope", device=dev)
        assert fake.live("module") >= 1
    assert lib.is_closed
    with pytest.raises(Exception):
        k.launch(1, 1, buf, v, d)                                  # the library is gone
    assert fake.calls("cuLibraryUnload") == 1


def test_driver_linker_missing_is_a_clear_error(fake):
    # The double has no linker (cuLinkCreate: CUDA_ERROR_NOT_SUPPORTED): the error names the call.
    oc = bc.ObjectCode.from_ptx(ptx.LIB_PUT)
    with pytest.raises(bc.CudaError, match="cuLinkCreate"):
        bc.link([oc], arch=90, use_nvjitlink=False)


# ------------------------------------------------------------------ linking (nvJitLink runs without a GPU)
LIB_SRC = r"""
__device__ float twice(float x) { return 2.0f * x; }
"""
MAIN_SRC = r"""
extern __device__ float twice(float x);
extern "C" __global__ void apply(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = twice(a[i]);
}
template <typename T> __global__ void tapply(T *a) { a[threadIdx.x] = (T)twice((float)a[threadIdx.x]); }
"""


@needs_nvjitlink
def test_link_two_programs_with_lto(cache_dir):
    lib = bc.Program(LIB_SRC, rdc=True).compile("ltoir", arch=90)
    main = bc.Program(MAIN_SRC, rdc=True).compile("ltoir", arch=90, name_expressions=["tapply<int>"])
    out = bc.link([lib, main], arch=90)
    assert out.kind == "cubin" and out.code[:4] == b"\x7fELF" and out.arch == "sm_90"
    assert b"apply" in out.code and out.lowered_name("tapply<int>").encode() in out.code
    assert [t for t, _, _ in out.signatures()["apply"]][1:] == ["u32"]


@needs_nvjitlink
def test_link_error_has_the_log(cache_dir):
    main = bc.Program(MAIN_SRC, rdc=True).compile("ltoir", arch=90)
    with pytest.raises(bc.LinkError) as ei:
        bc.link([main], arch=90)
    assert "twice" in ei.value.log


@needs_nvjitlink
def test_link_cubin_inputs(cache_dir):
    lib = bc.Program(LIB_SRC, rdc=True).compile("cubin", arch=90)
    main = bc.Program(MAIN_SRC, rdc=True).compile("cubin", arch=90)
    out = bc.link([lib, main], arch=90)
    assert out.code[:4] == b"\x7fELF" and b"apply" in out.code


# ------------------------------------------------------------------ a real .cu through nvcc (when installed)
def _nvcc():
    import shutil
    for c in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if c and os.path.exists(c):
            return c
    return None


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed")
def test_nvcc_example_source_signature(tmp_path):
    # examples/cuda/layernorm.cu as nvcc compiles it: a mangled C++ entry whose PTX
    # parameters are 6 pointers, two .u32 (int) and one .f32.
    src = os.path.join(REPO, "examples", "cuda",
                       "layernorm.cu")
    out = tmp_path / "ln.ptx"
    r = subprocess.run([_nvcc(), "-ptx", "-arch=compute_90", "-o", str(out), src], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    sigs = bc.ObjectCode.from_ptx(out.read_bytes()).signatures()
    (name,) = sigs
    assert name.startswith("_Z17layernorm_forward")
    types = [t for t, _, _ in sigs[name]]
    assert types[6:] == ["u32", "u32", "f32"] and len(types) == 9
