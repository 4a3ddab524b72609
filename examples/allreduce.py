"""All-reduce across every local GPU with barecuda and NCCL, checked against numpy.

    python examples/allreduce.py            # one process drives every GPU (ncclCommInitAll)
    python examples/allreduce.py --spawn    # one process per GPU, sharing a unique id

Under torchrun, each process joins with the rank it was given and the unique id travels
through torch.distributed's store: see docs/multi-gpu.md and bench/nccl_compare.py.
"""
import multiprocessing as mp
import os
import sys

import numpy as np

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")     # NVLink multicast stays off on shared machines

import barecuda as bc  # noqa: E402
from barecuda import nccl  # noqa: E402

N = 1 << 20


def one_process():
    comms = nccl.Communicator.for_devices()          # every visible GPU
    rng = np.random.default_rng()
    xs = [rng.standard_normal(N).astype(np.float32) for _ in comms]
    bufs = [bc.to_device(x, device=c.device) for x, c in zip(xs, comms)]
    streams = [bc.Stream(c.device) for c in comms]
    with nccl.group():                               # one thread, several ranks: a group call
        for c, b, s in zip(comms, bufs, streams):
            c.all_reduce(b, op="sum", stream=s)      # in place
    for s in streams:
        s.synchronize()
    want = np.sum(np.stack(xs).astype(np.float64), axis=0)
    for b in bufs:
        np.testing.assert_allclose(b.to_numpy(), want, rtol=1e-5, atol=1e-5)
    for c in comms:
        c.close()
    print(f"all-reduce matches numpy on {len(comms)} GPU(s), NCCL {'.'.join(map(str, nccl.version()))}")


def _rank(rank, nranks, uid, xs, q):
    c = nccl.Communicator(rank, nranks, uid, device=rank)
    b = bc.to_device(xs[rank], device=rank)
    c.all_reduce(b)
    q.put((rank, b.to_numpy()))
    c.close()


def spawned():
    n = bc.device_count()
    rng = np.random.default_rng()
    xs = [rng.standard_normal(N).astype(np.float32) for _ in range(n)]
    uid = nccl.get_unique_id()                       # made once, pickled to every rank
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_rank, args=(r, n, uid, xs, q)) for r in range(n)]
    for p in ps:
        p.start()
    want = np.sum(np.stack(xs).astype(np.float64), axis=0)
    for _ in range(n):
        _, got = q.get(timeout=300)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for p in ps:
        p.join()
    print(f"all-reduce matches numpy in {n} processes")


if __name__ == "__main__":
    spawned() if "--spawn" in sys.argv else one_process()
