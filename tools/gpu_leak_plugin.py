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


def _holders(obj, depth=3):
    """A short description of the chain of Python objects that keeps obj alive."""
    out = []
    cur = obj
    seen = {id(obj)}
    frame = sys._getframe()
    for _ in range(depth):
        refs = [r for r in gc.get_referrers(cur)
                if id(r) not in seen and r is not frame and not isinstance(r, type(frame))
                and r is not out]
        if not refs:
            break
        r = refs[0]
        seen.add(id(r))
        if isinstance(r, dict):
            owner = next((m for m in list(sys.modules.values())
                          if getattr(m, "__dict__", None) is r), None)
            if owner is not None:
                key = next((k for k, v in r.items() if v is cur), "?")
                out.append(f"global {owner.__name__}.{key}")
                break
        out.append(type(r).__qualname__)
        cur = r
    return " <- ".join(out) or "nothing on the Python side"


def pytest_sessionfinish(session, exitstatus):
    try:
        import barecuda as bc
        from barecuda import _buffer, _pool
    except ImportError:
        return
    if not bc.is_available():
        return
    gc.collect()
    gc.collect()
    owners = _buffer._live_owners()
    if owners:
        total = sum(b.nbytes for b in owners)
        print(f"\ngpu_leak_plugin: {len(owners)} DeviceBuffers alive after the session "
              f"({total} bytes)")
        orphans = 0
        for b in owners:
            held = _holders(b)
            if held == "nothing on the Python side":
                orphans += 1
            if orphans or owners.index(b) < 20:
                print(f"  {b!r}: {held}")
        if orphans:
            print(f"gpu_leak_plugin: {orphans} DeviceBuffers that nothing refers to "
                  "(a reference leak)")
            session.exitstatus = 1
        for b in owners:
            try:
                b.close()
            except Exception as e:      # noqa: BLE001 -- a report, not a failure
                print(f"gpu_leak_plugin: close {b!r}: {e!r}")
        del b, owners
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
