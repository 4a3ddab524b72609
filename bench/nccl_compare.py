"""barecuda's NCCL all-reduce beside torch.distributed's, in the same two-process job.

    torchrun --nproc_per_node 2 bench/nccl_compare.py [--quick] [--json out.json]
    python bench/nccl_compare.py [--quick]          # spawns the 2 ranks itself

Each rank joins torch.distributed (backend nccl) and a barecuda Communicator whose
unique id rank 0 makes and torch's store carries. For every size (1 MiB, 16 MiB,
256 MiB, 1 GiB, float32, in place) the two are timed alternately, round by round, on
one stream each (CUDA events around a batch of calls); the figure is the median per
call. Bus bandwidth follows nccl-tests: busbw = algbw * 2(n-1)/n. The 8-byte row is
latency. The other rows (the tensors-on-the-fast-path launch rows, IPC open cost, peer
copies) are measured after the collectives and printed first; rank 0's table (torch's rows beside ours) comes last.
NVLink multicast stays off: NCCL_NVLS_ENABLE=0 (and torch's / NVSHMEM's switches).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys

for _k, _v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(_k, _v)

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def _dist_rows():
    try:
        from barecuda.bench import dist_rows
        return dist_rows
    except ImportError:     # before the bench package exists: load the file itself
        path = os.path.join(HERE, os.pardir, "src", "barecuda", "bench", "dist_rows.py")
        spec = importlib.util.spec_from_file_location("barecuda_dist_rows", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


def rank_main(quick):
    import torch
    import torch.distributed as dist
    import barecuda as bc
    from barecuda import nccl
    dr = _dist_rows()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    if os.environ.get("BARECUDA_NCCL_COMPARE_STORE") == "client":
        # spawned by main(): the parent holds the store's server (and so its port) already
        from datetime import timedelta
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                              timeout=timedelta(seconds=600))
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world,
                                device_id=torch.device("cuda", local))
    else:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    obj = [nccl.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(obj, src=0)
    comm = nccl.Communicator(rank, world, obj[0], device=local)
    s = bc.Stream(local)
    ts = torch.cuda.Stream(local)
    rounds = 3 if quick else 7
    results = []
    for size in (8,) + dr.SIZES:
        iters = 200 if size == 8 else dr.iters_for(size)
        b = bc.alloc(size, device=local).view("float32")
        t = torch.empty(size // 4, dtype=torch.float32, device=f"cuda:{local}")
        ours, theirs = [], []
        with torch.cuda.stream(ts):
            for _ in range(5):
                dist.all_reduce(t)
        ts.synchronize()
        for _ in range(rounds):
            ours.append(dr.time_allreduce([comm], [b], [s], iters, warmup=2, rounds=1))
            with torch.cuda.stream(ts):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for _ in range(2):
                    dist.all_reduce(t)
                e0.record(ts)
                for _ in range(iters):
                    dist.all_reduce(t)
                e1.record(ts)
            ts.synchronize()
            theirs.append(e0.elapsed_time(e1) / 1e3 / iters)
        results.append((size, statistics.median(ours), statistics.median(theirs)))
        b.close()
        del t
    comm.close()
    out = None
    if rank == 0:
        out = {"world": world, "nccl_barecuda": ".".join(map(str, nccl.version())),
               "nccl_torch": ".".join(map(str, torch.cuda.nccl.version())),
               "nccl_path": nccl.library_path(), "torch": torch.__version__, "rows": []}
        for size, a, t in results:
            out["rows"].append({"bytes": size, "barecuda_s": a, "torch_s": t,
                                "barecuda_busbw": dr.busbw(size, a, world), "torch_busbw": dr.busbw(size, t, world)})
    dist.barrier()
    dist.destroy_process_group()
    return out


def print_table(out):
    """The torch-vs-barecuda table (rank 0's results)."""
    print(f"all-reduce, {out['world']} ranks (float32, in place); barecuda NCCL {out['nccl_barecuda']} "
          f"({out['nccl_path']}), torch {out['torch']} NCCL {out['nccl_torch']}")
    print(f"{'size':>10} | {'barecuda us':>11} {'busbw GB/s':>10} | {'torch us':>9} {'busbw GB/s':>10} | "
          f"{'bc/torch busbw':>14}")
    for r in out["rows"]:
        size, a, t, ba, bt = r["bytes"], r["barecuda_s"], r["torch_s"], r["barecuda_busbw"], r["torch_busbw"]
        label = "8 B" if size == 8 else f"{size // MiB} MiB"
        if ba is None or bt is None:    # one rank: no bus traffic to speak of
            print(f"{label:>10} | {a * 1e6:11.1f} {'n/a':>10} | {t * 1e6:9.1f} {'n/a':>10} | {'needs 2 GPUs':>14}")
        else:
            print(f"{label:>10} | {a * 1e6:11.1f} {ba:10.1f} | {t * 1e6:9.1f} {bt:10.1f} | {ba / bt:14.3f}")


def _spawned(rank, world, port, quick, q):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), BARECUDA_NCCL_COMPARE_STORE="client")
    q.put(rank_main(quick))


def _parent_store():
    """The store's server, made here before the ranks start, on a port the OS hands out
    (port 0) and keeps bound for the whole job: the ranks connect as clients. (Picking a
    free port, closing it and letting rank 0 bind it again raced: torch's TCPStore failed
    with EADDRINUSE on the 2x H200.)"""
    from datetime import timedelta
    import socket
    import torch.distributed as dist

    def make(port):
        return dist.TCPStore("127.0.0.1", port, None, is_master=True, timeout=timedelta(seconds=600),
                             wait_for_workers=False)
    try:
        return make(0)                  # the OS picks; store.port says which
    except (RuntimeError, TypeError, ValueError):
        pass
    for attempt in range(8):            # a torch whose store refuses port 0: pick one, retry if taken
        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            port = so.getsockname()[1]
        try:
            return make(port)
        except RuntimeError as e:
            if "in use" not in str(e).lower() and "eaddrinuse" not in str(e).lower():
                raise
    raise RuntimeError("nccl_compare: no free port for torch's TCPStore after 8 tries")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--no-extra", action="store_true", help="skip the tensor launch, IPC and peer-copy rows")
    a = ap.parse_args()
    if "RANK" in os.environ:            # under torchrun
        out = rank_main(a.quick)
        if out is None:
            return
    else:
        import multiprocessing as mp
        store = _parent_store()         # held (bound) until both ranks are done
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        ps = [ctx.Process(target=_spawned, args=(r, 2, store.port, a.quick, q)) for r in range(2)]
        for p in ps:
            p.start()
        outs = [q.get(timeout=1200) for _ in ps]
        for p in ps:
            p.join()
        del store
        out = next(o for o in outs if o is not None)
    if not a.no_extra:
        dr = _dist_rows()
        extra = (dr.tensor_launch_rows(6 if a.quick else 15) + [dr.ipc_open_row(50 if a.quick else 200)]
                 + dr.peer_copy_rows(rounds=3 if a.quick else 5))
        print(dr.format_rows(extra))
        out["extra"] = extra
    print_table(out)                    # last: the table is what the run is for
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
