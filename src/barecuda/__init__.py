"""barecuda: NVIDIA GPUs through the CUDA driver API alone.

This module only re-exports: each module below declares its own ``__all__``, and the
top level is those lists, in this order (docs/architecture.md says where each concern
lives). ``import barecuda`` loads no driver and no numpy.
"""
__version__ = "0.1.0"

from barecuda._errors import *  # noqa: F401,F403
from barecuda._loader import *  # noqa: F401,F403
from barecuda._device import *  # noqa: F401,F403
from barecuda._stream import *  # noqa: F401,F403
from barecuda._buffer import *  # noqa: F401,F403
from barecuda._allocators import *  # noqa: F401,F403
from barecuda._interop import *  # noqa: F401,F403
from barecuda._copy import *  # noqa: F401,F403
from barecuda._host import *  # noqa: F401,F403
from barecuda._managed import *  # noqa: F401,F403
from barecuda._staging import *  # noqa: F401,F403
from barecuda._pool import *  # noqa: F401,F403
from barecuda._driver_pool import *  # noqa: F401,F403
from barecuda._pinned_pool import *  # noqa: F401,F403
from barecuda._module import *  # noqa: F401,F403
from barecuda._launch import *  # noqa: F401,F403
from barecuda._plan import *  # noqa: F401,F403
from barecuda._launch_config import *  # noqa: F401,F403
from barecuda._program import *  # noqa: F401,F403
from barecuda._topology import *  # noqa: F401,F403
from barecuda import graph, ipc, nccl  # noqa: F401  (subpackage/modules: barecuda.graph, .ipc, .nccl)
from barecuda.graph import *  # noqa: F401,F403

# The public API, for `from barecuda import *` and for type checkers (with `mypy --strict`,
# no implicit re-export: only names listed here are visible as `bc.X`). A literal list,
# so that type checkers can read it: each block is its module's own __all__, and
# tests/packaging/test_public_surface.py checks the blocks are exactly those lists.
# A new public name goes in its module's __all__ (and its .pyi) and in that block here.
__all__ = ["__version__"]
__all__ += [  # _errors: errors
    "BarecudaError", "CudaError", "CudaWarning", "LibraryNotFoundError", "DriverNotFoundError",
    "DriverVersionError", "ForkedProcessError", "CudaOutOfMemoryError", "CudaInvalidValueError",
    "CudaNotReadyError", "CudaNotFoundError", "CudaNotSupportedError", "CudaInvalidHandleError",
    "CudaInvalidContextError", "CudaInvalidImageError", "CudaInvalidPtxError", "CudaNoDeviceError",
    "CudaInvalidDeviceError", "CudaNotInitializedError", "CudaLaunchError", "CudaStickyError",
    "CudaStreamCaptureError", "error_info", "error_class"
]
__all__ += [  # _loader: the driver
    "is_available", "driver_version", "driver_path"
]
__all__ += [  # _device: devices, streams, events
    "Device", "device_count"
]
__all__ += [  # _stream
    "Stream", "Event"
]
__all__ += [  # _buffer: memory
    "DeviceBuffer", "Allocator", "alloc", "empty", "zeros"
]
__all__ += [  # _allocators
    "get_allocator", "set_allocator"
]
__all__ += [  # _interop
    "as_device_buffer"
]
__all__ += [  # _copy
    "to_device", "copy_2d", "copy_3d"
]
__all__ += [  # _host
    "PinnedBuffer", "PinnedAllocator", "pinned_empty", "register_host", "HostRegistration"
]
__all__ += [  # _managed
    "managed_empty", "alloc_pitch"
]
__all__ += [  # _staging
    "configure_staging"
]
__all__ += [  # _pool: pools
    "MemoryPool", "memory_stats", "trim_memory"
]
__all__ += [  # _driver_pool
    "DriverAllocator", "DriverMemoryPool"
]
__all__ += [  # _pinned_pool
    "PinnedMemoryPool"
]
__all__ += [  # _module: modules and launch
    "Module", "Global"
]
__all__ += [  # _launch
    "Kernel", "set_launch_releases_gil", "launch_releases_gil"
]
__all__ += [  # _plan
    "LaunchPlan", "PlanList", "launch_all"
]
__all__ += [  # _launch_config
    "LaunchConfig"
]
__all__ += [  # _program: kernels from CUDA C++: NVRTC, the compile cache, linking, libraries
    "Program", "ObjectCode", "Library", "link", "compile_module", "cache_info", "clear_cache",
    "cache_dir", "CompileError", "LinkError", "CompilerNotFoundError", "nvrtc_version", "nvrtc_path",
    "nvjitlink_version"
]
__all__ += [  # _topology: several GPUs
    "devices", "topology", "topology_report", "p2p_attributes", "DevicePool"
]
__all__ += [  # barecuda.graph: the graph wing (its own modules' __all__, assembled there)
    "Graph", "ConditionalNode", "ConditionalHandle", "GraphNode", "KernelNode", "GraphExec", "ExecKernelNode",
    "ArgUpdate", "Capture", "capture", "is_capturing", "check_host_errors",
]
__all__ += ["graph", "ipc", "nccl"]

# Names that moved, kept for one release: ``barecuda.IpcAllocator`` still works, with a
# DeprecationWarning naming ``barecuda.ipc.IpcAllocator`` (one spelling per fact).
_MOVED_TO_IPC = ("IpcAllocator", "IpcMemoryPool", "IpcError", "IpcStaleHandleError", "IpcForeignHostError",
                 "IpcAlreadyOpenError")


def __getattr__(name):
    if name in _MOVED_TO_IPC:
        import warnings
        warnings.warn(f"barecuda.{name} is deprecated and goes in the next release; use barecuda.ipc.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(ipc, name)
    raise AttributeError(f"module 'barecuda' has no attribute {name!r}")
