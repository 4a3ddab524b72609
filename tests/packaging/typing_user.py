"""A user's program, type-checked by CI with ``mypy --strict`` (not a pytest module).

Every name is reached as ``bc.X``: with --strict (no implicit re-export) that works
only for names in ``barecuda.__all__``, and the calls below must match the stubs.
"""
from typing import Any, Dict, Optional

import barecuda as bc


def compile_cache() -> int:
    folder: Optional[str] = bc.cache_dir()
    info: Dict[str, Any] = bc.cache_info()
    removed: int = bc.clear_cache(memory=True, disk=False)
    print(folder, info.get("entries"))
    return removed


def main() -> float:
    print(bc.__version__, bc.is_available(), compile_cache())
    if not bc.is_available():
        return 0.0
    dev: bc.Device = bc.Device(0)
    name: str = dev.name
    major, minor = dev.compute_capability
    print(name, major, minor, bc.device_count(), dev.context_handle())
    with dev:
        s: bc.Stream = bc.Stream(priority=0, non_blocking=True)
        start: bc.Event = s.record()
        buf: bc.DeviceBuffer = bc.empty(1024, "float32", stream=s)
        end: bc.Event = bc.Event().record(s)
        end.synchronize(timeout=10.0)
        s.synchronize(timeout=None)
        ms: float = end.elapsed_ms(start)
        ms2: float = end - start
        buf.close()
        s.close()
    try:
        bc.Stream().synchronize(timeout=0.5)
    except (TimeoutError, bc.CudaError, bc.ForkedProcessError) as e:
        print(type(e).__name__)
    return ms + ms2


if __name__ == "__main__":
    main()
