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

# Non-zero for the exact classes pointer_of reads directly (torch/CuPy tensors).
cdef int tensor_kind(type t) except -1

# The packer calls pointer_batch(True) before a launch's first argument and
# pointer_batch(False) after its last (also on error): inside, the torch/CuPy current
# stream is read once per launch instead of once per tensor.
cdef void pointer_batch(bint open) noexcept

# DeviceBuffer for a DeviceBuffer or a device array (CAI / CUDA DLPack); None for anything else.
cdef DeviceBuffer as_device(object obj, object stream)

# A whole array for consumers that need its size and type (NCCL): contiguous
# DeviceBuffers, torch/cupy tensors (by exact type, as pointer_of), and other device
# arrays through DLPack/CAI (as as_device_buffer(obj, stream=consumer), which orders
# `consumer` after the producer itself). array_of fills *out and returns the dtype name
# (None when unknown); it raises TypeError/ValueError (CPU tensor, not contiguous) and
# makes no driver call on the DeviceBuffer/torch/cupy paths. order_array then applies
# the stream rule of docs/interop.md for `consumer` (note_use for DeviceBuffers).
ctypedef struct bc_array:
    CUdeviceptr ptr
    size_t nbytes
    int ordinal                 # the device it lives on
    int kind                    # how it was read (private to _interop)
    bint readonly
cdef object array_of(object obj, CUstream consumer, bc_array *out)
cdef int order_array(object obj, const bc_array *a, Device dev, CUstream consumer) except -1
