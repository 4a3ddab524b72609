"""The README runs as written: its python blocks, in order, in one fresh interpreter on
the real driver (GPU), and its index names every docs page and example (CPU)."""
import glob
import os
import re
import subprocess
import sys

import pytest

from _helpers import REPO  # noqa: E402  (the repository root)
README = os.path.join(REPO, "README.md")


def _readme():
    if not os.path.exists(README):
        pytest.skip("README.md is not beside the tests")
    with open(README, encoding="utf-8") as f:
        return f.read()


def python_blocks(text):
    """The README's ```python blocks, in order."""
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def test_blocks_are_python():
    blocks = python_blocks(_readme())
    assert len(blocks) >= 4
    for i, b in enumerate(blocks):
        compile(b, f"README.md block {i + 1}", "exec")


def test_index_names_every_docs_page_and_example():
    text = _readme()
    pages = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
    examples = sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "examples", "*.py")))
    assert pages and examples
    missing = [p for p in pages + examples if f"]({p})" not in text]
    assert not missing, f"README.md's index lacks {missing}"


def test_readme_commands_are_the_ci_ones():
    text = _readme()
    cmd = 'pip install ".[test]" && python -m pytest tests'
    assert cmd in text
    ci = os.path.join(REPO, ".ci", "run")
    if os.path.exists(ci):
        with open(ci) as f:
            assert cmd in f.read(), ".ci/run must run the README's test command verbatim"


RUNNER = r"""
import sys, traceback
blocks = {blocks!r}
ns = {{"__name__": "__readme__"}}
for i, b in enumerate(blocks, 1):
    try:
        exec(compile(b, f"README.md block {{i}}", "exec"), ns)
    except Exception:
        traceback.print_exc()
        print(f"README block {{i}} failed", file=sys.stderr)
        sys.exit(1)
    print(f"README block {{i}} ok", flush=True)
"""


def _nccl_installed():
    """Whether a libnccl file is there, found without loading it: the blocks run in a child
    process, and loading NCCL here would only cost time (under compute-sanitizer its
    kernels are instrumented on load, which took more than 5 minutes on the H200)."""
    import ctypes.util
    from barecuda import _libfind
    return (any(os.path.isabs(p) and os.path.exists(p) for p in _libfind.candidates(_libfind.NCCL))
            or ctypes.util.find_library("nccl") is not None)


@pytest.mark.gpu
def test_readme_python_runs_as_written(tmp_path):
    if os.environ.get("BARECUDA_UNDER_SANITIZER"):
        # gpu-check's memcheck runs with --target-processes application-only: the blocks'
        # child process is not followed, so the sanitizer would check nothing here (and at
        # 19:51 on 2026-11-26 the test did not finish beside seven other sanitized processes)
        pytest.skip("the README's blocks run in a child process that compute-sanitizer does not follow")
    pytest.importorskip("numpy")
    pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not _nccl_installed():
        pytest.skip("NCCL is not installed here (pip install \".[nccl]\"): the README's NCCL block needs it")
    blocks = python_blocks(_readme())
    env = dict(os.environ, BARECUDA_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", RUNNER.format(blocks=blocks)], capture_output=True, text=True,
                       env=env, timeout=600, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(" ok") == len(blocks), r.stdout
