"""barecuda: NVIDIA GPUs through the CUDA driver API alone.

This module only re-exports; see docs/architecture.md for where each concern lives.
"""
__version__ = "0.1.0"

from barecuda._errors import (
    BarecudaError, CudaError, CudaWarning, DriverNotFoundError, DriverVersionError,
    ForkedProcessError, CudaOutOfMemoryError, CudaInvalidValueError, CudaNotReadyError,
    CudaNotFoundError, CudaNotSupportedError, CudaInvalidHandleError, CudaInvalidContextError,
    CudaInvalidImageError, CudaInvalidPtxError, CudaNoDeviceError, CudaInvalidDeviceError,
    CudaNotInitializedError, CudaLaunchError, CudaStickyError, CudaStreamCaptureError,
    error_info, error_class,
)
from barecuda._loader import is_available, driver_version, driver_path

from barecuda._device import Device, device_count
from barecuda._stream import Stream, Event
from barecuda._buffer import DeviceBuffer, Allocator, alloc, empty, zeros
from barecuda._allocators import get_allocator, set_allocator
from barecuda._interop import as_device_buffer
from barecuda._copy import to_device, copy_2d, copy_3d
from barecuda._host import PinnedBuffer, PinnedAllocator, pinned_empty, register_host, HostRegistration
from barecuda._managed import managed_empty, alloc_pitch
from barecuda._module import Module, Global
from barecuda._launch import Kernel, LaunchPlan, PlanList, launch_all
from barecuda._launch_config import LaunchConfig
from barecuda._pool import MemoryPool, memory_stats, trim_memory
from barecuda._driver_pool import DriverAllocator, DriverMemoryPool
from barecuda._pinned_pool import PinnedMemoryPool


# The public API, for `from barecuda import *` and for type checkers: with
# `mypy --strict` (no implicit re-export) only names listed here are visible as `bc.X`.
# A feature that adds re-exports adds its names in its own block next to its import:
#     __all__ += ["Name", ...]
# (a literal list, so that type checkers can read it).
__all__ = [
    "__version__",
    # errors
    "BarecudaError", "CudaError", "CudaWarning", "DriverNotFoundError", "DriverVersionError",
    "ForkedProcessError", "CudaOutOfMemoryError", "CudaInvalidValueError", "CudaNotReadyError",
    "CudaNotFoundError", "CudaNotSupportedError", "CudaInvalidHandleError", "CudaInvalidContextError",
    "CudaInvalidImageError", "CudaInvalidPtxError", "CudaNoDeviceError", "CudaInvalidDeviceError",
    "CudaNotInitializedError", "CudaLaunchError", "CudaStickyError", "CudaStreamCaptureError",
    "error_info", "error_class",
    # driver
    "is_available", "driver_version", "driver_path",
    # devices, streams, events
    "Device", "device_count", "Stream", "Event",
    # memory
    "DeviceBuffer", "PinnedBuffer", "Allocator", "DriverAllocator", "alloc", "empty", "zeros", "to_device",
    "as_device_buffer", "pinned_empty", "get_allocator", "set_allocator", "managed_empty", "alloc_pitch",
    "copy_2d", "copy_3d", "register_host", "HostRegistration", "PinnedAllocator",
    # modules and launch
    "Module", "Global", "Kernel", "LaunchConfig", "LaunchPlan", "PlanList", "launch_all",
    # pools
    "MemoryPool", "DriverMemoryPool", "PinnedMemoryPool", "memory_stats", "trim_memory",
]

# -- dist: IPC, several GPUs, NCCL (docs/multi-gpu.md)
# (IPC names live in barecuda.ipc only; the old top-level spellings: __getattr__ below)
from barecuda._topology import devices, topology, topology_report, p2p_attributes, DevicePool
from barecuda import ipc, nccl
__all__ += ["devices", "topology", "topology_report", "p2p_attributes", "DevicePool", "ipc", "nccl"]

# CUDA graphs: the graph wing (barecuda.graph, each module with its own __all__)
from barecuda.graph import (
    Graph, GraphNode, KernelNode, ConditionalNode, ConditionalHandle, GraphExec, ExecKernelNode, ArgUpdate,
    Capture, capture, is_capturing, check_host_errors,
)
from barecuda import graph
__all__ += ["Graph", "GraphNode", "KernelNode", "ConditionalNode", "ConditionalHandle", "GraphExec", "ExecKernelNode", "ArgUpdate",
            "Capture", "capture", "is_capturing", "check_host_errors", "graph"]

# staging settings (core)
from barecuda._staging import configure_staging
__all__ += ["configure_staging"]

# --- nvrtc: kernels from CUDA C++ source (NVRTC, compile cache, linking, library API)
from barecuda._program import (
    Program, ObjectCode, Library, link, compile_module, cache_info, clear_cache, cache_dir,
    CompileError, LinkError, CompilerNotFoundError, nvrtc_version, nvrtc_path, nvjitlink_version,
)
__all__ += [
    "Program", "ObjectCode", "Library", "link", "compile_module", "cache_info", "clear_cache", "cache_dir",
    "CompileError", "LinkError", "CompilerNotFoundError", "nvrtc_version", "nvrtc_path", "nvjitlink_version",
]

# launch: public settings
from barecuda._launch import set_launch_releases_gil, launch_releases_gil
__all__ += ["set_launch_releases_gil", "launch_releases_gil"]

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
