"""Sharing device buffers and events between processes on one machine (CUDA IPC).

See docs/multi-gpu.md. Everything here lives in barecuda._ipc; this module is its
public name (``import barecuda.ipc`` or ``barecuda.ipc``).
"""
from barecuda._ipc import (  # noqa: F401
    MemHandle, EventHandle, export_buffer, open_buffer, ipc_event, export_event, open_event, open_count,
    IpcAllocator, IpcMemoryPool, IpcError, IpcStaleHandleError, IpcForeignHostError, IpcAlreadyOpenError,
)

__all__ = [
    "MemHandle", "EventHandle", "export_buffer", "open_buffer", "ipc_event", "export_event", "open_event",
    "open_count", "IpcAllocator", "IpcMemoryPool", "IpcError", "IpcStaleHandleError", "IpcForeignHostError",
    "IpcAlreadyOpenError",
]
