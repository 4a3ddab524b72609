"""The kernel registry, the table, NVRTC builds of every kernel and the prebuilt files.

CPU: every (source, specialization) in the registry's table -- every family's KERNELS,
K1's, matvec's and attention's alike -- compiles with real NVRTC to cubins for sm_80 and
sm_90 with an empty log, and each declared entry point exists; the prebuilt PTX is
lowered to ISA 8.0 and loads; the lookup order (prebuilt -> cache -> NVRTC), the
no-NVRTC error and "a cache hit does not load NVRTC" on the driver double.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import barecuda as bc
from barecuda import _nvrtc
from barecuda.kernels import _registry as R
from barecuda.kernels import _prebuild as PB

needs_nvrtc = pytest.mark.skipif(not _nvrtc.nvrtc_available(), reason="NVRTC not installed")
TABLE = R.table()
K1_SOURCES = ("norms.cu", "softmax.cu", "rope.cu", "elementwise.cu", "sampling.cu")


def _id(spec):
    source, names, defines = spec
    return source + "".join(f"-{k}={v}" for k, v in defines)


def test_table_collects_every_family():
    sources = {s for s, _, _ in TABLE}
    assert set(K1_SOURCES) <= sources
    for source, names, defines in TABLE:
        assert os.path.exists(os.path.join(R.CSRC, source)), source
        assert names and len(set(names)) == len(names)
        assert isinstance(defines, tuple) and all(isinstance(d, tuple) and len(d) == 2 for d in defines)
    keys = [(s, d) for s, _, d in TABLE]
    assert len(keys) == len(set(keys))


def test_digest_depends_on_source_and_defines():
    a = R.digest("norms.cu")
    assert a == R.digest("norms.cu", ())
    assert a != R.digest("norms.cu", (("X", 1),))
    assert a != R.digest("softmax.cu")
    assert re.fullmatch(r"[0-9a-f]{64}", a)
    with pytest.raises(ValueError):
        R.digest("norms.cu", (("-bad", 1),))


ARCHS = ("sm_80", "sm_90")


@pytest.fixture(scope="module")
def compiled(request):
    """Every selected (specialization, arch) of the table compiled on all cores at once.

    NVRTC releases the GIL while it compiles, so a thread pool uses every core. The jobs of
    the test items pytest selected are submitted at once, in the items' order: each test
    waits for its own job while the pool runs ahead. A compile error is raised in its own
    test; the module's teardown cancels the jobs that have not started. Under pytest-xdist
    a worker runs only some of the items it collected: there each test compiles its own."""
    from concurrent.futures import ThreadPoolExecutor
    ex = ThreadPoolExecutor(os.cpu_count() or 1)
    jobs = {}

    def submit(i, arch):
        source, _, defines = TABLE[i]
        jobs[i, arch] = ex.submit(R.compile_code, source, defines, target="cubin", arch=arch, cache=True)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for item in request.session.items:
            if getattr(item, "originalname", None) == "test_every_kernel_compiles_without_warnings":
                submit(item.callspec.params["spec"], item.callspec.params["arch"])

    def result(i, arch):
        if (i, arch) not in jobs:
            submit(i, arch)
        return jobs[i, arch].result()
    yield result
    ex.shutdown(wait=True, cancel_futures=True)


@pytest.mark.kernel_sources
@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("spec", range(len(TABLE)), ids=[_id(s) for s in TABLE])
def test_every_kernel_compiles_without_warnings(compiled, spec, arch):
    source, names, defines = TABLE[spec]
    oc = compiled(spec, arch)
    assert oc.kind == "cubin" and oc.code[:4] == b"\x7fELF"
    assert not (oc.log or "").strip(), f"{source} {defines} {arch}: NVRTC said:\n{oc.log}"
    ptx = oc.ptx.decode() if isinstance(oc.ptx, bytes) else oc.ptx
    entries = set(re.findall(r"\.entry\s+(\w+)\s*\(", ptx))
    missing = set(names) - entries
    assert not missing, f"{source} {defines}: KERNELS names entries it does not define: {sorted(missing)}"


def test_lower_ptx_version():
    ptx = b"//\n.version 9.5\n.target sm_80\n.address_size 64\n"
    assert PB.lower_ptx_version(ptx).split(b"\n")[1] == b".version 8.0"
    old = b".version 7.8\n.target sm_80\n"
    assert PB.lower_ptx_version(old) == old
    with pytest.raises(ValueError):
        PB.lower_ptx_version(b".target sm_80\n")


# ------------------------------------------------------------------ the prebuilt folder, on the double
@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory):
    """K1's families prebuilt as PTX only (fast), into a temporary folder."""
    if not _nvrtc.nvrtc_available():
        pytest.skip("NVRTC not installed")
    out = str(tmp_path_factory.mktemp("prebuilt"))
    specs = [t for t in TABLE if t[0] in K1_SOURCES]
    PB.build(out, archs=(), ptx=True, specs=specs, progress=False, jobs=2)
    return out


@pytest.fixture
def registry(prebuilt, tmp_path, monkeypatch):
    monkeypatch.setenv("BARECUDA_CACHE_DIR", str(tmp_path / "cache"))
    R._reset(prebuilt)
    yield R
    R._reset(os.path.join(os.path.dirname(R.__file__), "prebuilt"))


def test_prebuilt_manifest_and_ptx_isa(prebuilt):
    with open(os.path.join(prebuilt, "manifest.json")) as f:
        m = json.load(f)
    assert m["ptx_isa"] == [8, 0] and m["ptx_arch"] == "compute_80"
    assert len(m["entries"]) == len(K1_SOURCES)
    for dg, ent in m["entries"].items():
        assert dg == R.digest(ent["source"], tuple(tuple(d) for d in ent["defines"]))
        with open(os.path.join(prebuilt, dg + ".ptx"), "rb") as f:
            ptx = f.read()
        assert _nvrtc.ptx_version_of(ptx) == (8, 0)
        assert b".target sm_80" in ptx
        for n in ent["names"]:
            assert f".entry {n}(".encode() in ptx


def test_prebuilt_is_loaded_first(fake, registry):
    k = registry.get("norms.cu", "rmsnorm_bf16_v2")
    assert isinstance(k, bc.Kernel) and k.name == "rmsnorm_bf16_v2"
    assert registry.origin("norms.cu") == "prebuilt-ptx"
    assert registry.get("norms.cu", "rmsnorm_bf16_v2") is k           # memo
    assert registry.get("norms.cu", "layernorm_f32_s8").name == "layernorm_f32_s8"
    with pytest.raises(ValueError, match="no entry"):
        registry.get("norms.cu", "no_such_kernel")


def test_stale_prebuilt_is_not_loaded(fake, registry, monkeypatch):
    # a digest that matches no manifest entry (an edited source): the prebuilt folder is skipped
    monkeypatch.setattr(registry, "digest", lambda s, d=(): "0" * 64)
    monkeypatch.setattr(_nvrtc, "nvrtc_available", lambda: False)
    with pytest.raises(bc.CompilerNotFoundError, match=r'pip install "\.\[nvrtc\]"'):
        registry.get("norms.cu", "rmsnorm_bf16_v2")


def test_missing_nvrtc_names_the_extra(fake, registry, monkeypatch):
    registry._reset(os.path.join(os.path.dirname(registry.CSRC), "no-such-folder"))
    monkeypatch.setattr(_nvrtc, "nvrtc_available", lambda: False)
    with pytest.raises(bc.CompilerNotFoundError) as ei:
        registry.get("softmax.cu", "softmax_f32_v4")
    msg = str(ei.value)
    assert 'pip install ".[nvrtc]"' in msg and "nvidia-cuda-nvrtc-cu12" in msg
    assert "softmax.cu" in msg and "sm_90" in msg


_CHILD = """
import json, sys
import barecuda as bc
from barecuda.kernels import _registry as R
R._reset(sys.argv[1])
k = R.get("softmax.cu", "softmax_bf16_v2")
maps = open("/proc/self/maps").read()
print("RESULT " + json.dumps({"origin": R.origin("softmax.cu"), "nvrtc": "libnvrtc" in maps,
                              "name": k.name}))
"""


@needs_nvrtc
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_cache_hit_does_not_load_nvrtc(fake_lib_path, tmp_path):
    from _helpers import result_of, run_child
    cache = str(tmp_path / "cache")
    empty = str(tmp_path / "no-prebuilt")
    env = dict(BARECUDA_CACHE_DIR=cache, FAKECUDA_DRIVER_VERSION="13050")
    first = result_of(run_child(_CHILD, fake_lib_path, empty, **env))
    assert first["origin"] == "nvrtc" and first["nvrtc"]
    second = result_of(run_child(_CHILD, fake_lib_path, empty, **env))
    assert second == {"origin": "cache", "nvrtc": False, "name": "softmax_bf16_v2"}


def test_prebuild_cli_help():
    out = subprocess.run([sys.executable, "-m", "barecuda.kernels._prebuild", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "--archs" in out.stdout


@pytest.mark.parametrize("jobs", [1, 3])
def test_warmup_loads_every_kernel(fake, registry, jobs):
    from barecuda.kernels import __main__ as M
    counts = M.warmup(0, quiet=True, sources=K1_SOURCES, jobs=jobs)
    assert counts == {"prebuilt-ptx": len(K1_SOURCES)}
    for source, names, defines in TABLE:
        if source in K1_SOURCES:
            for n in names:
                assert registry.get(source, n, defines).name == n


def test_builds_of_different_modules_overlap_and_one_module_builds_once(fake, registry, monkeypatch):
    """A module's build holds only its own lock: while one specialization compiles, another
    thread loads a different one (warmup's parallel compiles), and threads asking for the
    same one wait for the single build."""
    import threading
    real = R._module
    a_started, b_done = threading.Event(), threading.Event()
    calls = []

    def slow(source, defines, device, ordinal):
        calls.append((source, defines))
        if source == "softmax.cu":
            a_started.set()
            b_done.wait(60)
        return real(source, defines, device, ordinal)

    monkeypatch.setattr(R, "_module", slow)
    soft = [t for t in TABLE if t[0] == "softmax.cu"][0]
    norm = [t for t in TABLE if t[0] == "norms.cu"][0]
    got = {}

    def load_a(i):
        got[i] = registry.get(soft[0], soft[1][0], soft[2], 0)

    threads = [threading.Thread(target=load_a, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    assert a_started.wait(30)
    other = {}
    tb = threading.Thread(target=lambda: other.setdefault("k", registry.get(norm[0], norm[1][0], norm[2], 0)))
    tb.start()
    tb.join(20)
    finished = not tb.is_alive()
    b_done.set()
    tb.join(60)
    assert finished, "loading norms.cu waited for softmax.cu's build"
    assert other["k"].name == norm[1][0]
    for t in threads:
        t.join(60)
    assert len({id(k) for k in got.values()}) == 1 and len(got) == 3
    assert calls.count((soft[0], soft[2])) == 1


def test_cli_list():
    out = subprocess.run([sys.executable, "-m", "barecuda.kernels", "list"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "norms.cu" in out.stdout and "rmsnorm_bf16_v2" in out.stdout
    assert f"{len(TABLE)} specializations" in out.stdout


@pytest.mark.gpu
@needs_nvrtc
def test_prebuilt_cubin_and_lowered_ptx_run_on_the_gpu(tmp_path, monkeypatch):
    """The wheel's files on a real driver: the cubin for this GPU, and the PTX lowered to
    ISA 8.0 (JIT-compiled by the driver) both load and compute softmax right."""
    import numpy as np
    dev = bc.Device(0)
    cc = dev.compute_capability
    spec = [t for t in TABLE if t[0] == "softmax.cu"]
    x = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    import barecuda.kernels as K
    origins = []
    for archs, want in (((cc[0] * 10 + cc[1],), ("prebuilt-cubin", "prebuilt-ptx")), ((), ("prebuilt-ptx",))):
        out = str(tmp_path / f"pre{len(archs)}")
        PB.build(out, archs=archs, ptx=True, specs=spec, progress=False)
        monkeypatch.setenv("BARECUDA_CACHE_DIR", str(tmp_path / "cache"))
        R._reset(out)
        try:
            y = K.softmax(bc.to_device(x))
            np.testing.assert_allclose(y.to_numpy(), ref, rtol=1e-5, atol=1e-7)
            origins.append(R.origin("softmax.cu", (), dev))
            assert origins[-1] in want
        finally:
            R._reset(os.path.join(os.path.dirname(R.__file__), "prebuilt"))
    print("prebuilt origins on this GPU:", origins)
