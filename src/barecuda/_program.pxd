"""NVRTC programs, compiled code and library-API kernels (see _program.pyx)."""
from barecuda._abi cimport CUlibrary


cdef class ObjectCode:
    cdef readonly bytes code
    cdef readonly str kind
    cdef readonly str arch
    cdef readonly str log
    cdef readonly object nvrtc_version
    cdef bytes _ptx                  # PTX text of the same program (signatures), or None
    cdef dict _names                 # name expression -> lowered name
    cdef object _sigs                # parsed PTX signatures, lazily
    cdef dict _modules               # device ordinal -> Module (get_kernel's loads)
    cdef object __weakref__


cdef class Program:
    cdef readonly str name
    cdef bytes _src
    cdef list _headers            # [(name bytes, source bytes)] sorted
    cdef tuple _options           # normalized option strings, without -arch
    cdef object _key              # hashable, everything above
    cdef dict _last               # (kind, arch, names, deps) -> ObjectCode, this program's own memo
    cdef object _deps             # _compile_deps.Deps: headers it may read from disk, or None


cdef class Library:
    cdef CUlibrary handle
    cdef readonly ObjectCode code
    cdef object _kernels          # (name, ordinal, signature key) -> Kernel, weakly (a Kernel keeps us alive)
    cdef object _all_kernels
