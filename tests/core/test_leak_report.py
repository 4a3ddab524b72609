"""tools/leak_report.py: compute-sanitizer's leak reports split into barecuda's and the peers'."""
import os
import subprocess
import sys

from _helpers import REPO

TOOL = os.path.join(REPO, "tools", "leak_report.py")

OURS = """========= Leaked 1,536 bytes at 0x48eb4f2000
=========     Saved host backtrace up to driver entry point at allocation time
=========         Host Frame:  [0x11e79] in _pool.cpython-312-x86_64-linux-gnu.so
=========         Host Frame:  [0x17154] in _buffer.cpython-312-x86_64-linux-gnu.so
========= 
"""
PEER = """========= Leaked 33,554,432 bytes at 0x7f0ee8000000
=========     Saved host backtrace up to driver entry point at allocation time
=========         Host Frame: cudaMalloc [0x50c56] in libcudart.so.13
=========         Host Frame: c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*) [0x42727] in libc10_cuda.so
========= 
"""


def _run(tmp_path, text):
    p = tmp_path / "memcheck.log"
    p.write_text("========= COMPUTE-SANITIZER\n" + text + "========= LEAK SUMMARY: 1 bytes\n")
    return subprocess.run([sys.executable, TOOL, str(p)], capture_output=True, text=True, timeout=60)


def test_peer_leaks_alone_pass(tmp_path):
    r = _run(tmp_path, PEER + PEER)
    assert r.returncode == 0, r.stdout
    assert "barecuda 0 (0 bytes), peers 2 (67108864 bytes)" in r.stdout


def test_a_leak_of_ours_fails_and_is_shown(tmp_path):
    r = _run(tmp_path, PEER + OURS)
    assert r.returncode == 1
    assert "barecuda 1 (1536 bytes), peers 1 (33554432 bytes)" in r.stdout
    assert "_pool.cpython" in r.stdout
