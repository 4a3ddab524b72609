"""pytest-benchmark suite over the rows of ``python -m barecuda.bench``.

    pytest bench/ --benchmark-only

Everything is skipped without a usable CUDA driver and device; a peer that is not
installed skips its rows. These tests measure: they assert nothing about speed.
The rows (statements, kernels, raw C loops) are the ones the rows modules of
``barecuda.bench`` build (launch_rows.py, memory_rows.py),
so both tools measure the same thing; ``python -m barecuda.bench`` alternates the
rows and reports ratios to raw C, which pytest-benchmark cannot do.

A launch row's unit is one batch of ``BATCH`` (100) launches, with the stream
synchronized before each round (not timed); per-launch time = figure / 100.
"""
import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if importlib.util.find_spec("barecuda") is None:
    sys.path.insert(0, os.path.join(REPO, "src"))

try:
    import pytest_benchmark  # noqa: F401
    HAVE_PYTEST_BENCHMARK = True
except ImportError:
    HAVE_PYTEST_BENCHMARK = False

    @pytest.fixture
    def benchmark():
        pytest.skip("pytest-benchmark is not installed (pip install pytest-benchmark)")


def _gpu_or_skip():
    import barecuda
    if not barecuda.is_available():
        try:
            barecuda._loader.load()
            why = "no CUDA device visible"
        except Exception as e:  # noqa: BLE001 -- the reason is what we report
            why = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        pytest.skip(f"no usable CUDA driver/GPU: {why}")


@pytest.fixture(scope="session")
def setup():
    """The benchmark context (kernels, buffers and streams, raw and barecuda), built once."""
    _gpu_or_skip()
    from barecuda import bench
    ctx = bench.Context()
    yield ctx
    ctx.close()


@pytest.fixture(scope="session")
def launch_rows(setup):
    from barecuda import bench
    from barecuda.bench.launch_rows import build_launch_rows
    rows = build_launch_rows(setup, peers=True)
    for r in rows:
        bench.check_once(r, setup.B.ctx_sync)     # warm-up; a row that fails becomes n/a
    return {r.key: r for r in rows}

