"""Modules (PTX, cubin, fatbin) and their globals."""
from barecuda._abi cimport CUmodule, CUcontext, CUdeviceptr
from barecuda._device cimport Device

cdef class Module:
    cdef CUmodule handle            # NULL once closed
    cdef CUcontext ctx
    cdef readonly Device device
    """The Device whose context the module is loaded in."""
    cdef readonly str kind          # "ptx", "cubin" or "fatbin"
    """What was loaded: ``'ptx'``, ``'cubin'`` or ``'fatbin'``."""
    cdef readonly str info_log
    """The JIT compiler's information log of the load (``''`` when none)."""
    cdef readonly str error_log
    """The JIT compiler's error log of the load (``''`` when none)."""
    cdef object _entries            # {kernel name: [(type, size, align), ...]} from the PTX, or None
    cdef object _kernels            # name -> Kernel, weakly (a Kernel keeps its Module alive)
    cdef object _all_kernels        # WeakSet of every Kernel handed out (close() invalidates them)

    cdef int _live(self) except -1


cdef class Global:
    cdef readonly Module module
    """The Module the global belongs to."""
    cdef readonly str name
    """The global's name as the module spells it."""
    cdef CUdeviceptr dptr
    cdef size_t size
