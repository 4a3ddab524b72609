"""Split compute-sanitizer's leak reports (memcheck --leak-check full) into barecuda's and
the peers'.

A leaked allocation is ours when its saved host backtrace passes through one of barecuda's
extension modules or Python files; else it belongs to a peer that the tests also load
(torch's caching allocator and cuBLAS handle, CuPy's pools), which keep such memory for the
process's lifetime by design. tools/gpu-check.sh fails its memcheck stage only on ours.

    python tools/leak_report.py memcheck.log   ->  prints the counts; exit 1 when any is ours
"""
import re
import sys

OURS = re.compile(r"barecuda|/src/barecuda/|\b_(pool|buffer|copy|driver_pool|staging|launch|plan|graph|"
                  r"nodes|exec|capture|ipc|nccl|managed|host|interop|cublaslt)\.cpython")


def split(text):
    """(ours, peers): lists of (bytes, first frames) for each 'Leaked N bytes' report."""
    ours, peers = [], []
    blocks = re.split(r"^========= Leaked ", text, flags=re.M)[1:]
    for b in blocks:
        head, _, rest = b.partition("\n")
        n = int(head.split(" bytes")[0].replace(",", ""))
        frames = []
        for line in rest.splitlines():
            if not line.startswith("=========     ") or "Host Frame" not in line and "Saved host" not in line:
                break
            frames.append(line)
        (ours if any(OURS.search(f) for f in frames) else peers).append((n, frames[:4]))
    return ours, peers


def main(argv):
    text = open(argv[1], encoding="utf-8", errors="replace").read()
    ours, peers = split(text)
    print(f"leaks: barecuda {len(ours)} ({sum(n for n, _ in ours)} bytes), "
          f"peers {len(peers)} ({sum(n for n, _ in peers)} bytes)")
    for n, frames in ours[:10]:
        print(f"  ours: {n} bytes")
        for f in frames:
            print("   ", f.strip("= "))
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
