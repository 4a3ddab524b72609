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

# pointer_of's reader of torch/CuPy tensors (the exact classes it recognises), for the
# launch packer: 1 and *out set (stream rule applied), 0 when obj is not such a tensor
# (nothing done), -2 when it is one but not on `dev` (nothing done: pointer_of raises
# the error), -1 with an exception set (from the library, or ordering the streams).
# memo: one launch's memo of the libraries' current streams (the packer keeps it on its
# C stack, source = NULL before the first argument): the first tensor of a library and
# device reads the library's current stream and orders `consumer` after it, the others
# skip both. NULL: every tensor does both.
ctypedef struct bc_stream_memo:
    const void *source              # the library (its exchange API, or its kind); NULL: none yet
    int ordinal
cdef int tensor_pointer(object obj, Device dev, CUstream consumer, bc_stream_memo *memo,
                        CUdeviceptr *out) except -1

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
