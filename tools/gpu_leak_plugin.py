"""pytest plugin for compute-sanitizer's leak check (tools/gpu-check.sh loads it with
``-p gpu_leak_plugin`` under ``memcheck --leak-check full`` only).

At the end of the session it lets go of what barecuda keeps on purpose, so that the
sanitizer's "Leaked N bytes" reports only memory nothing freed: unreachable objects are
collected, every live MemoryPool is trimmed (not only the devices' defaults: tests make
their own), the devices are synchronized (stream-ordered frees done) and the staging
pipeline's pinned chunks are released.

DeviceBuffers still alive at that point are listed with what holds them (a test module's
global, a cache). One that nothing on the Python side refers to is a reference leak in
barecuda itself: the session fails on it. The others are closed, so that what the
sanitizer then reports is memory that no DeviceBuffer accounts for.
"""
import gc
import sys


def _global_name(r):
    """'module.name' when a module's global is r (or r is a module's __dict__), else None."""
    for m in list(sys.modules.values()):
        d = getattr(m, "__dict__", None)
        if not isinstance(d, dict):
            continue
        if d is r:
            return m.__name__
        for k, v in list(d.items()):
            if v is r:
                return f"{m.__name__}.{k}"
    return None


def _holders(obj, skip):
    """What refers to obj directly (a module global named as such), leaving out the
    objects in skip (this plugin's own lists) and frames."""
    ignore = {id(x) for x in skip}
    f = sys._getframe()
    while f is not None:                    # this plugin's own frames (and pytest's above them)
        ignore.add(id(f))
        f = f.f_back
    out = []
    for r in gc.get_referrers(obj):
        if id(r) in ignore or type(r).__name__ == "list_iterator":
            continue
        if type(r).__name__ == "frame":     # a frame kept alive (by a stored traceback)
            out.append(f"frame {r.f_code.co_name} ({r.f_code.co_filename}:{r.f_lineno})")
            continue
        g = _global_name(r)
        out.append(f"{type(r).__qualname__} (global {g})" if g else type(r).__qualname__)
    return ", ".join(out) or "nothing on the Python side"


def _explain(obj, skip, depth=8):
    """Print one chain of referrers up from obj (what keeps a buffer alive, step by step)."""
    ignore = {id(x) for x in skip}
    f = sys._getframe()
    while f is not None:
        ignore.add(id(f))
        f = f.f_back
    cur, seen = obj, {id(obj)}
    for level in range(depth):
        refs = [r for r in gc.get_referrers(cur) if id(r) not in ignore and id(r) not in seen
                and type(r).__name__ != "list_iterator"]
        if not refs:
            print(f"gpu_leak_plugin: chain {level}: nothing refers to {type(cur).__name__}")
            return
        desc = []
        for r in refs[:6]:
            d = type(r).__qualname__
            if d == "frame":
                d += f" {r.f_code.co_name}:{r.f_lineno}"
            elif isinstance(r, BaseException):
                d += f" {r!r:.80}"
            g = _global_name(r)
            desc.append(d + (f" (global {g})" if g else ""))
        print(f"gpu_leak_plugin: chain {level}: {type(cur).__qualname__} <- {'; '.join(desc)}")
        cur = refs[0]
        seen.add(id(cur))


def pytest_sessionfinish(session, exitstatus):
    try:
        import barecuda as bc
        from barecuda import _buffer, _pool
    except ImportError:
        return
    if not bc.is_available():
        return
    gc.collect()
    # Wait for the GPU first: under the sanitizer the work runs far slower, and what is
    # released once the GPU has passed it must not be counted as alive.
    for d in range(bc.device_count()):
        try:
            bc.Device(d).synchronize()
        except Exception as e:          # noqa: BLE001
            print(f"gpu_leak_plugin: device {d}: {e!r}")
    # compute-sanitizer keeps the Python frames of its saved host backtraces alive (one per
    # allocation, for its reports): their locals -- our buffers, CuPy arrays, torch tensors --
    # would outlive the session although the program dropped them (a run without the
    # sanitizer leaves none of them). Finished frames are cleared, the running stack kept.
    running = set()
    f = sys._getframe()
    while f is not None:
        running.add(id(f))
        f = f.f_back
    cleared = 0
    for o in gc.get_objects():
        if type(o).__name__ == "frame" and id(o) not in running:
            try:
                o.clear()
                cleared += 1
            except RuntimeError:        # a frame still executing (a generator, another thread)
                pass
    if cleared:
        print(f"gpu_leak_plugin: cleared the locals of {cleared} finished frames")
    # What the kernels wing keeps on purpose: cuBLASLt's workspace per (device, stream).
    mm = sys.modules.get("barecuda.kernels._matmul")
    if mm is not None and isinstance(getattr(mm, "_lt_ws", None), dict):
        mm._lt_ws.clear()
    gc.collect()
    gc.collect()
    owners = _buffer._live_owners()
    if owners:
        total = sum(b.nbytes for b in owners)
        print(f"\ngpu_leak_plugin: {len(owners)} DeviceBuffers alive after the session "
              f"({total} bytes)")
        _explain(owners[0], (owners,))
        orphans = 0
        for b in owners:
            held = _holders(b, (owners,))
            if held == "nothing on the Python side":
                orphans += 1
            if orphans or owners.index(b) < 20:
                print(f"  {b!r}: {held}")
        if orphans:
            print(f"gpu_leak_plugin: {orphans} DeviceBuffers that nothing refers to "
                  "(a reference leak)")
            session.exitstatus = 1
        # Views first: an open view pins its owner, whose close() then defers the free.
        name = "is_closed" if hasattr(bc.DeviceBuffer, "is_closed") else "closed"
        views = [o for o in gc.get_objects()
                 if type(o) is bc.DeviceBuffer and o.is_view and not getattr(o, name)]
        for b in views + owners:
            try:
                b.close()
            except Exception as e:      # noqa: BLE001 -- a report, not a failure
                print(f"gpu_leak_plugin: close {b!r}: {e!r}")
        del b, owners, views
    # Open DeviceBuffers that the owners' table does not list (views keep their root
    # listed; anything else here is a buffer the table lost).
    gc.collect()
    name = "is_closed" if hasattr(bc.DeviceBuffer, "is_closed") else "closed"
    stray = [o for o in gc.get_objects() if type(o) is bc.DeviceBuffer and not getattr(o, name)]
    lost = [o for o in stray if not o.is_view]
    if lost:
        print(f"gpu_leak_plugin: {len(lost)} open DeviceBuffers missing from the owners' table")
        for b in lost[:20]:
            print(f"  {b!r}: {_holders(b, (stray, lost))}")
        session.exitstatus = 1
    del stray, lost
    # The peers' own caches (CuPy's and torch's pools hold what the tests freed).
    if "cupy" in sys.modules:
        try:
            cp = sys.modules["cupy"]
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
        except Exception as e:          # noqa: BLE001
            print(f"gpu_leak_plugin: cupy pools: {e!r}")
    if "torch" in sys.modules:
        try:
            torch = sys.modules["torch"]
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        except Exception as e:          # noqa: BLE001
            print(f"gpu_leak_plugin: torch cache: {e!r}")
    for d in range(bc.device_count()):
        try:
            bc.Device(d).synchronize()
        except Exception as e:          # noqa: BLE001
            print(f"gpu_leak_plugin: device {d}: {e!r}")
    for pool in _pool._pools():
        try:
            before = pool.stats()
            pool.trim()
            after = pool.stats()
            if after["in_use"]:
                # Every buffer is closed or gone: bytes still in use are a free that never
                # ran (a use count never released, or a reference the table lost).
                print(f"gpu_leak_plugin: {pool!r}: {after['in_use']} bytes still in use after "
                      "every DeviceBuffer was closed")
                session.exitstatus = 1
            if before["reserved"] or after["reserved"]:
                print(f"gpu_leak_plugin: {pool!r}: reserved {before['reserved']} -> "
                      f"{after['reserved']} bytes, in use {after['in_use']}, driver "
                      f"allocations {after['driver_allocations']}, frees {after['driver_frees']}")
        except Exception as e:          # noqa: BLE001
            print(f"gpu_leak_plugin: trim {pool!r}: {e!r}")
    for d in range(bc.device_count()):
        try:
            bc.Device(d).synchronize()
        except Exception as e:          # noqa: BLE001
            print(f"gpu_leak_plugin: device {d}: {e!r}")
    try:
        from barecuda import _staging
        _staging.release()
    except Exception as e:              # noqa: BLE001
        print(f"gpu_leak_plugin: staging: {e!r}")
