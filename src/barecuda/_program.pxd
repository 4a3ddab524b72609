"""NVRTC programs, compiled code and library-API kernels (see _program.pyx)."""
from barecuda._abi cimport CUlibrary


cdef class ObjectCode:
    cdef readonly bytes code
    """The image's bytes."""
    cdef readonly str kind
    """``'ptx'``, ``'cubin'``, ``'ltoir'`` or ``'fatbin'``."""
    cdef readonly str arch
    """The ``-arch`` the image was made for (``'sm_90'``, ``'compute_90'``), or ``''``."""
    cdef readonly str log
    """The compiler's (or linker's) log; warnings land here."""
    cdef readonly object nvrtc_version
    """The NVRTC version that compiled it, as ``(major, minor)``, or None."""
    cdef bytes _ptx                  # PTX text of the same program (signatures), or None
    cdef dict _names                 # name expression -> lowered name
    cdef object _sigs                # parsed PTX signatures, lazily
    cdef dict _modules               # device ordinal -> Module (get_kernel's loads)
    cdef object __weakref__


cdef class Program:
    cdef readonly str name
    """The program's name (the file name NVRTC reports in its messages)."""
    cdef bytes _src
    cdef list _headers            # [(name bytes, source bytes)] sorted
    cdef tuple _options           # normalized option strings, without -arch
    cdef object _key              # hashable, everything above
    cdef dict _last               # (kind, arch, names, deps) -> ObjectCode, this program's own memo
    cdef object _deps             # _compile_deps.Deps: headers it may read from disk, or None


cdef class Library:
    cdef CUlibrary handle
    cdef readonly ObjectCode code
    """The ObjectCode the library was loaded from."""
    cdef object _kernels          # (name, ordinal, signature key) -> Kernel, weakly (a Kernel keeps us alive)
    cdef object _all_kernels
