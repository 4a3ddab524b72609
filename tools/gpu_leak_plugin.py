"""pytest plugin for compute-sanitizer's leak check (tools/gpu-check.sh loads it with
``-p gpu_leak_plugin`` under ``memcheck --leak-check full`` only).

At the end of the session it lets go of what barecuda keeps on purpose, so that the
sanitizer's "Leaked N bytes" reports only memory nothing freed: unreachable objects are
collected, every device's default caching pool is trimmed, the devices are synchronized
(stream-ordered frees done) and the staging pipeline's pinned chunks are released.
Anything still allocated after that is a leak, and the stage fails on it.
"""
import gc


def pytest_sessionfinish(session, exitstatus):
    try:
        import barecuda as bc
    except ImportError:
        return
    if not bc.is_available():
        return
    gc.collect()
    gc.collect()
    for d in range(bc.device_count()):
        try:
            bc.Device(d).synchronize()
            bc.trim_memory(d)
            bc.Device(d).synchronize()
        except Exception as e:          # noqa: BLE001 -- a report, not a failure of the session
            print(f"gpu_leak_plugin: device {d}: {e!r}")
    try:
        from barecuda import _staging
        _staging.release()
    except Exception as e:              # noqa: BLE001
        print(f"gpu_leak_plugin: staging: {e!r}")
