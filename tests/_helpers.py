"""Helpers shared by the test modules: import them from here, never from ``conftest``.

(``pytest tests bench`` loads two conftest modules, and the name ``conftest`` then
means only one of them.) Nothing here imports barecuda, numpy or pytest at import
time: child interpreters started by the tests import this module too.

- ``join_all``: join threads with a deadline instead of hanging the suite.
- ``FakeCuda`` (and ``Launch``): the ctypes view of the driver double's control API.
- ``child_env``, ``run_child``, ``result_of``: run code in a fresh interpreter against
  a given driver library (the barecuda under test, the tests directory importable).
- ``in_fork``: run code in a forked child; ``DriverCalls``: count every driver call
  (for "calls no driver": closed objects, objects made before a fork).
"""
import ctypes
import json
import os
import re
import subprocess
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
