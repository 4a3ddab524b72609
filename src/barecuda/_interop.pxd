"""Interop with other libraries' device arrays (see _interop.pyx, docs/interop.md)."""
from barecuda._abi cimport CUdeviceptr, CUstream
from barecuda._device cimport Device
from barecuda._buffer cimport DeviceBuffer

# Resolve any pointer-like launch/copy argument: DeviceBuffer (refused when closed; noted
# as used on `consumer`), torch/cupy tensors (by exact type, cached classes, never
# importing torch/cupy), __cuda_array_interface__, __dlpack__, int addresses. Honours the
# producer's stream by the one rule of docs/interop.md. Returns 0 and sets *out; raises
# TypeError/ValueError (wrong device: names both devices) before any work is queued.
cdef int pointer_of(object obj, Device dev, CUstream consumer, CUdeviceptr *out) except -1

# DeviceBuffer for a DeviceBuffer or a device array (CAI / CUDA DLPack); None for anything else.
cdef DeviceBuffer as_device(object obj, object stream)
