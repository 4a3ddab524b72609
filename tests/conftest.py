"""Test configuration: the fake driver, the ``--gpu`` switch and the ``fake`` fixture.

Without ``--gpu`` (CI, any machine): the test double of the driver in
``tests/fakecuda/`` is compiled once (skipped when up to date) and barecuda is pointed
at it through ``BARECUDA_LIBCUDA`` before anything loads the driver; tests marked
``gpu`` are skipped.

With ``--gpu``: the real driver is used, tests that need the ``fake`` fixture are
skipped, and everything is skipped when ``barecuda.is_available()`` is False.
"""
import ctypes
import gc
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
FAKE_DIR = os.path.join(TESTS, "fakecuda")
FAKE_BUILD = os.path.join(FAKE_DIR, "build")
FAKE_LIB = os.path.join(FAKE_BUILD, "libfakecuda.so")
FAKE_LIB_NOGPA = os.path.join(FAKE_BUILD, "libfakecuda_nogpa.so")
# The double is every .c file in tests/fakecuda/ (split by concern behind
# fake_internal.h; a new file there is picked up without touching this list).
FAKE_SRCS = sorted(glob.glob(os.path.join(FAKE_DIR, "*.c")))
FAKE_DEPS = (*FAKE_SRCS, *glob.glob(os.path.join(FAKE_DIR, "*.h")),
             os.path.join(REPO, "include", "barecuda", "cuda_abi.h"),
             os.path.join(REPO, "include", "barecuda", "cuda_graph_abi.h"),
             os.path.join(REPO, "include", "barecuda", "cuda_errors.h"))
CFLAGS = ["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-std=gnu11", "-pthread"]

if TESTS not in sys.path:  # for `import ptx` and `from _helpers import ...`
    sys.path.insert(0, TESTS)

from _helpers import FakeCuda  # noqa: E402  (shared helpers live in tests/_helpers.py)

# Prefer the installed / in-place package; fall back to the source tree.
if importlib.util.find_spec("barecuda") is None:
    sys.path.insert(0, os.path.join(REPO, "src"))


def _compiler():
    cc = os.environ.get("CC")
    if cc:
        return cc.split()
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    return None


def _up_to_date(target):
    if not os.path.exists(target):
        return False
    t = os.path.getmtime(target)
    return all(os.path.getmtime(d) <= t for d in FAKE_DEPS if os.path.exists(d))


def _build(target, extra=()):
    """Compile the double into `target` unless it is newer than its sources.

    Writes to a temporary name and renames, so concurrent sessions never see a
    half-written library. Returns None on success, else the compiler's complaint.
    """
    if _up_to_date(target):
        return None
    cc = _compiler()
    if cc is None:
        return "no C compiler found (set CC)"
    os.makedirs(FAKE_BUILD, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=FAKE_BUILD)
    os.close(fd)
    cmd = cc + CFLAGS + ["-I", os.path.join(REPO, "include"), *extra, *FAKE_SRCS, "-o", tmp]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        return f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    os.replace(tmp, target)
    return None


_BUILD_ERROR = _build(FAKE_LIB) or _build(FAKE_LIB_NOGPA, ["-DFAKECUDA_NO_GPA"])


def pytest_addoption(parser):
    parser.addoption("--gpu", action="store_true", default=False,
                     help="run against the real NVIDIA driver (GPU tests on, fake-driver tests off)")


def _children_import_our_barecuda():
    """Put the directory holding the barecuda this session imported first on PYTHONPATH.

    Subprocess tests start fresh interpreters; with the package built in place and
    not installed they would otherwise not find it (or find another copy).
    """
    import barecuda
    root = os.path.dirname(os.path.dirname(os.path.abspath(barecuda.__file__)))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not parts or os.path.abspath(parts[0]) != root:
        rest = [p for p in parts if os.path.abspath(p) != root]
        os.environ["PYTHONPATH"] = os.pathsep.join([root] + rest)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a real NVIDIA GPU and driver (run with --gpu)")
    # Destructor failures surface as CudaWarning; in the suite they are errors. Added
    # here (not in pyproject) because barecuda is importable only once the path is set.
    config.addinivalue_line("filterwarnings", "error::barecuda.CudaWarning")
    _children_import_our_barecuda()
    if not config.getoption("--gpu"):
        if _BUILD_ERROR:
            raise pytest.UsageError(f"could not build the fake CUDA driver:\n{_BUILD_ERROR}")
        # The loader is lazy: nothing has opened a driver yet, so this decides which one.
        os.environ["BARECUDA_LIBCUDA"] = FAKE_LIB


def pytest_collection_modifyitems(config, items):
    if config.getoption("--gpu"):
        import barecuda
        if not barecuda.is_available():
            try:
                barecuda._loader.load()
                why = "no CUDA device visible"
            except Exception as e:  # noqa: BLE001 - the reason is what we report
                why = f"{type(e).__name__}: {e}"
            skip_all = pytest.mark.skip(reason=f"--gpu given but no usable CUDA driver/GPU: {why}")
            for item in items:
                item.add_marker(skip_all)
            return
        skip_fake = pytest.mark.skip(reason="uses the fake driver; not with --gpu")
        for item in items:
            if "fake" in getattr(item, "fixturenames", ()):
                item.add_marker(skip_fake)
    else:
        skip_gpu = pytest.mark.skip(reason="needs a real GPU: run with --gpu")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


# --------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def fake_lib_path():
    """Path of the fake driver library (built at session start)."""
    if _BUILD_ERROR:
        pytest.fail(f"could not build the fake CUDA driver:\n{_BUILD_ERROR}")
    return FAKE_LIB


@pytest.fixture(scope="session")
def fake_nogpa_path():
    """Path of the fake driver variant that exports no cuGetProcAddress_v2."""
    if _BUILD_ERROR:
        pytest.fail(f"could not build the fake CUDA driver:\n{_BUILD_ERROR}")
    return FAKE_LIB_NOGPA


@pytest.fixture(scope="session")
def _fake_session(fake_lib_path):
    import barecuda
    barecuda._loader.load()  # barecuda opens the driver first: the path it chose is the one to share
    path = barecuda.driver_path()
    if os.path.realpath(path) != os.path.realpath(fake_lib_path):
        pytest.fail(f"barecuda loaded {path}, not the fake driver {fake_lib_path} "
                    "(was the driver loaded before conftest set BARECUDA_LIBCUDA?)")
    return FakeCuda(path)


@pytest.fixture
def fake(_fake_session):
    """The fake driver's control API, reset before and after the test."""
    _fake_session.reset()
    yield _fake_session
    _fake_session.reset()


@pytest.fixture
def pending(fake):
    """The double's pending-work model, on for the test: fails the test if memory was
    freed while queued work still used it (see _helpers.pending_model)."""
    from _helpers import pending_model
    lib = pending_model(fake)
    lib.fakecuda_pending_mode(0)
    gc.collect()
    lib.fakecuda_pending_mode(1)
    early0 = lib.fakecuda_early_frees()
    yield lib
    assert lib.fakecuda_early_frees() == early0, "memory freed while queued work used it"
    lib.fakecuda_pending_mode(0)


@pytest.fixture
def vadd(fake, ptx):
    """The kernel ``vadd(out, a, b, n)`` loaded in the driver double."""
    import barecuda
    return barecuda.Module.from_ptx(ptx.VADD).get_kernel("vadd")


@pytest.fixture
def stream(fake):
    """A new Stream on the driver double."""
    import barecuda
    return barecuda.Stream()


@pytest.fixture(scope="session")
def ptx():
    """PTX texts for CPU tests (see tests/ptx/__init__.py)."""
    import ptx as mod
    return mod


# ------------------------------------------------------------------ leak check
# Every kind of handle the double counts that a test could leave behind. Kinds the
# double does not know (fakecuda_live returns -1; e.g. graphs before the double
# counts them) are skipped. Not checked: ctx_retain (Device caches its primary
# context for the process, by design) and global (module globals live and die with
# their module, which is counted).
LEAK_KINDS = ("mem", "managed", "host_mem", "host_register", "stream", "event", "module", "pool")
# Kinds counted by other parts of the double, when present: kind -> (function, argument).
EXTRA_KINDS = {"graph": ("fakecuda_graph_live", b"graph"), "graph_exec": ("fakecuda_graph_live", b"exec"),
               "ipc_open": ("fakecuda_ipc_live", None)}
# The entry points that end a handle of each kind. A handle whose destroy failed
# (a test injected the failure with fake.fail) stays alive in the double: barecuda
# warns and lets go of it, by design (destructors never raise). The leak check
# allows exactly one live handle per such injected failure that fired.
DESTROYERS = {"mem": ("cuMemFree", "cuMemFreeAsync"), "managed": (), "host_mem": ("cuMemFreeHost",),
              "host_register": ("cuMemHostUnregister",), "stream": ("cuStreamDestroy",),
              "event": ("cuEventDestroy",), "module": ("cuModuleUnload",), "pool": ("cuMemPoolDestroy",),
              "graph": ("cuGraphDestroy",), "graph_exec": ("cuGraphExecDestroy",),
              "ipc_open": ("cuIpcCloseMemHandle",)}
_live_lib = None


def _lib():
    global _live_lib
    if _live_lib is None:
        _live_lib = ctypes.CDLL(FAKE_LIB)   # the same instance barecuda opens (same path)
        _live_lib.fakecuda_live.restype = ctypes.c_int
        _live_lib.fakecuda_live.argtypes = [ctypes.c_char_p]
        _live_lib.fakecuda_faults_fired.restype = ctypes.c_longlong
        _live_lib.fakecuda_faults_fired.argtypes = [ctypes.c_char_p]
    return _live_lib


def _live_counts():
    """{kind: live handles} in the double, for every kind the double counts."""
    out = {}
    for kind in LEAK_KINDS:
        n = _lib().fakecuda_live(kind.encode())
        if n >= 0:
            out[kind] = n
    for kind, (fname, arg) in EXTRA_KINDS.items():
        fn = getattr(_lib(), fname, None)
        if fn is None:
            continue
        fn.restype = ctypes.c_int
        n = fn(arg) if arg is not None else fn()
        if n >= 0:
            out[kind] = n
    return out


def _failed_destroys():
    """{kind: injected destroy/free failures that fired so far}."""
    out = {}
    for kind, names in DESTROYERS.items():
        fired = [_lib().fakecuda_faults_fired(n.encode()) for n in names]
        out[kind] = sum(f for f in fired if f > 0)
    return out


def _settle():
    """Drop what only garbage or caches still hold: collect, then trim every cache."""
    gc.collect()
    import barecuda
    if not barecuda._loader._state()["loaded"] or barecuda._loader._state()["forked"]:
        return
    try:
        for dev in range(barecuda.device_count()):
            barecuda.trim_memory(dev)
    except barecuda.CudaError:
        pass   # a test that left the (fake) device in an error state: counts will tell
    barecuda._staging.release()
    gc.collect()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item._barecuda_call_failed = rep.failed or hasattr(rep, "wasxfail")   # xfail: failed on purpose


@pytest.fixture(autouse=True)
def _no_leaked_handles(request):
    """After every test on the driver double, no handle of any kind is left alive.

    Runs after the test's own function-scoped fixtures are torn down (it is set up
    first, so it is torn down last) and after garbage collection and trimming of the
    allocator caches and staging buffers. Objects held by module- or session-scoped
    fixtures exist before it takes its baseline (pytest sets up wider scopes first),
    so they count as the starting value, not as a leak. A handle whose destroy the
    test made fail on purpose (fake.fail on a destroyer, see DESTROYERS) is allowed.
    Skipped with --gpu, and for a test that already failed (its traceback keeps its
    objects alive).
    """
    if request.config.getoption("--gpu") or _BUILD_ERROR:
        yield
        return
    before = _live_counts()
    if any(before.values()):   # caches or wider-scoped fixtures hold handles: settle first
        _settle()
        before = _live_counts()
    failed_before = _failed_destroys()
    yield
    if getattr(request.node, "_barecuda_call_failed", False):
        return
    # The test's fixture values stay referenced from the item until pytest clears
    # them after teardown; this fixture is the last function-scoped one torn down,
    # so drop them now (wider-scoped fixtures keep their own reference).
    if isinstance(getattr(request.node, "funcargs", None), dict):
        request.node.funcargs.clear()
    allowed = {k: n - failed_before[k] for k, n in _failed_destroys().items()}
    after = _live_counts()
    if any(after[k] - before[k] > allowed.get(k, 0) for k in before):
        _settle()
        after = _live_counts()
    leaked = {k: after[k] - before[k] for k in before if after[k] - before[k] > allowed.get(k, 0)}
    if leaked:
        pytest.fail(f"{request.node.nodeid} left driver handles alive (kind: change in live count): "
                    f"{leaked}", pytrace=False)
