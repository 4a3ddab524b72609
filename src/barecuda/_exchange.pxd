"""DLPack and CUDA Array Interface import and export (see _exchange.pyx): what _interop reads through."""
from barecuda._abi cimport CUstream, CUcontext
from barecuda._dlpack cimport DLTensor
from barecuda._buffer cimport DeviceBuffer

# The DLPack capsule obj exports for consumer stream h (obj may be a capsule already).
cdef object _dl_capsule(object obj, CUstream h)
# The DLTensor in capsule cap; *mt its managed tensor, *versioned its kind; consume:
# rename the capsule as used (the caller then owns mt).
cdef DLTensor *_dl_tensor(object cap, void **mt, bint *versioned, bint consume) except NULL
# obj's __cuda_array_interface__ dict (obj may be the dict).
cdef object _cai_dict(object obj)
# Make `consumer` wait for the CAI's 'stream' entry (an event; nothing blocks).
cdef int _cai_wait(object cai, CUstream consumer, CUcontext ctx) except -1
# Zero-copy views of a DLPack producer / capsule, of a CAI object / dict, ordered on `stream`.
cdef DeviceBuffer _from_dlpack(object obj, object stream)
cdef DeviceBuffer _from_cai(object obj, object stream)
