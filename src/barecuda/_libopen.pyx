"""Opening a library at run time: the one dlopen + table-filling loop behind NVRTC,
nvJitLink, NCCL and cuBLASLt (the driver's own loader, in _loader and bc_runtime.h,
fills its table through cuGetProcAddress_v2 instead).

Owns: trying ``_libfind``'s candidates in order, refusing a library that lacks a
required entry point, and the wording of each refusal in ``tried`` (which ``_libfind``'s
``describe`` turns into the "not found" message); ``OpenedLibrary``, a library opened
once on first use, whose methods are the library modules' ``candidates``, ``load``,
``is_available`` and ``library_path``. Where to look is ``_libfind``'s.
"""
import os
import threading

cimport cython

from barecuda._abi cimport bc_symbol_info
from barecuda import _libfind

cdef extern from "barecuda/bc_dl.h" nogil:
    void *bc_dl_open(const char *path, char *err, size_t errlen)
    void *bc_dl_sym(void *h, const char *name)
    void bc_dl_close(void *h)


cdef str open_table(object spec, const bc_symbol_info *syms, size_t n, void *table, object optional,
                    str too_old, object error, void **handle):
    """See _libopen.pxd."""
    cdef char err[512]
    cdef void *h
    cdef void *fn
    cdef size_t i
    cdef bytes bpath
    cdef const char *cpath
    tried = []
    for path in _libfind.candidates(spec):
        bpath = os.fsencode(path)
        cpath = bpath
        err[0] = 0
        with nogil:
            h = bc_dl_open(cpath, err, sizeof(err))
        if h == NULL:
            if os.path.isabs(path) or os.environ.get(spec.env):
                tried.append(f"{path}: {err.decode(errors='replace')}")
            else:
                tried.append(f"{path}: not found by the system loader")
            continue
        missing = []
        for i in range(n):
            fn = bc_dl_sym(h, syms[i].name)
            (<void **>(<char *>table + syms[i].offset))[0] = fn
            if fn == NULL:
                name = syms[i].name.decode()
                if syms[i].required if optional is None else name not in optional:
                    missing.append(name)
        if missing:
            bc_dl_close(h)
            for i in range(n):
                (<void **>(<char *>table + syms[i].offset))[0] = NULL
            tried.append(f"{path}: opened, but it lacks {', '.join(missing)}"
                         + (f" ({too_old})" if too_old else ""))
            continue
        handle[0] = h
        return path
    raise error(_libfind.describe(spec, tried, _libfind.driver_cuda_major()), tried)


@cython.final
cdef class OpenedLibrary:
    """A library ``_libfind`` finds and its table of entry points, opened on first use
    (see _libopen.pxd)."""

    cdef str open(self):
        with self.lock:
            if self.handle == NULL:
                self.path = open_table(self.spec, self.syms, self.n, self.table, self.optional, self.too_old,
                                       self.error, &self.handle)
            return self.path

    def candidates(self):
        """The paths (or bare names) ``load`` tries, in order."""
        return _libfind.candidates(self.spec)

    def load(self):
        """Load the library (once) and return its path.

        Raises
        ------
        LibraryNotFoundError
            The library's own subclass: no candidate could be opened, or none has every
            required entry point (``tried`` says why for each).
        """
        return self.open()

    def is_available(self):
        """True when the library can be loaded (never raises)."""
        try:
            self.open()
            return True
        except Exception:
            return False

    def library_path(self):
        """The library that was loaded (loads it)."""
        return self.open()


cdef OpenedLibrary opened_library(object spec, const bc_symbol_info *syms, size_t n, void *table, object optional,
                                  str too_old, object error):
    """See _libopen.pxd."""
    cdef OpenedLibrary lib = OpenedLibrary.__new__(OpenedLibrary)
    lib.spec = spec
    lib.syms = syms
    lib.n = n
    lib.table = table
    lib.optional = optional
    lib.too_old = too_old
    lib.error = error
    lib.lock = threading.RLock()
    return lib
