"""Run the staging parameter sweep: ``python tools/staging_sweep.py [--mib 256] [--reps 7] [--quick] [--idle]``.

The sweep lives in the benchmark wing, src/barecuda/bench/staging_sweep.py (also
``python -m barecuda.bench.staging_sweep``); this entry point is kept for the
commands quoted in docs/measurements.md and in the staging sources' comments.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
from barecuda.bench.staging_sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
