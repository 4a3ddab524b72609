"""NCCL collectives on barecuda buffers and streams (libnccl.so.2 loaded at run time).

See docs/multi-gpu.md. Everything here lives in barecuda._nccl; this module is its
public name (``import barecuda.nccl`` or ``barecuda.nccl``). Importing it does not
load NCCL; the first communicator (or ``load()``) does.
"""
from barecuda._nccl import (  # noqa: F401
    Communicator, UniqueId, get_unique_id, group, group_start, group_end, load, is_available, library_path,
    version, candidates, DTYPES, OPS, NcclError, NcclNotFoundError, NcclUnhandledCudaError, NcclSystemError,
    NcclInternalError, NcclInvalidArgument, NcclInvalidUsage, NcclRemoteError, NcclInProgress, nccl_error_class,
)

__all__ = [
    "Communicator", "UniqueId", "get_unique_id", "group", "group_start", "group_end", "load", "is_available",
    "library_path", "version", "candidates", "DTYPES", "OPS", "NcclError", "NcclNotFoundError",
    "NcclUnhandledCudaError", "NcclSystemError", "NcclInternalError", "NcclInvalidArgument", "NcclInvalidUsage",
    "NcclRemoteError", "NcclInProgress", "nccl_error_class",
]
