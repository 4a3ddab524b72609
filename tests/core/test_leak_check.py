"""The leak check of tests/conftest.py can fail, and names the test that leaked.

Runs a small test file through pytest in a subprocess, with this directory's
conftest, against the driver double.
"""
import os
import subprocess
import sys
import textwrap

from _helpers import TESTS

CONFTEST = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("barecuda_tests_conftest", {os.path.join(TESTS, "conftest.py")!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
for name in ("pytest_addoption", "pytest_configure", "pytest_collection_modifyitems",
             "pytest_runtest_makereport", "_no_leaked_handles", "fake", "_fake_session", "fake_lib_path"):
    globals()[name] = getattr(mod, name)
"""

TESTFILE = """
import barecuda as bc

KEEP = []


def test_keeps_a_stream():
    KEEP.append(bc.Stream())


def test_keeps_device_memory():
    KEEP.append(bc.alloc(4096))


def test_cleans_up():
    s = bc.Stream()
    b = bc.alloc(4096)
    b.close()
    s.close()


def test_destroy_failure_is_allowed(fake):
    s = bc.Stream()
    fake.fail("cuStreamDestroy", 1)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        del s
"""


def test_leak_check_fails_by_name(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_leaky.py").write_text(textwrap.dedent(TESTFILE))
    env = dict(os.environ)
    # conftest already put the barecuda under test (installed or in place) first on PYTHONPATH
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rE",
                           str(tmp_path / "test_leaky.py")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_keeps_a_stream left driver handles alive" in out and "{'stream': 1}" in out, out
    assert "test_keeps_device_memory left driver handles alive" in out, out
    assert "test_cleans_up left" not in out and "test_destroy_failure_is_allowed left" not in out, out
    assert "4 passed, 2 errors" in out, out
