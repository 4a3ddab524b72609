"""Opening a library ``_libfind`` finds and filling its table of entry points (see _libopen.pyx)."""
from barecuda._abi cimport bc_symbol_info


# Open the first of spec's candidates (_libfind.candidates) that has every required entry
# point `syms` describes, and fill `table` from it. optional: None, the rows' own
# `required` flags; else the names that may be missing (every other row is required).
# too_old: a hint added when entry points are missing, or None. Returns the path and sets
# *handle; raises error(_libfind.describe(...), tried) when no candidate will do.
# The caller holds its own lock and keeps the handle for the process's lifetime.
cdef str open_table(object spec, const bc_symbol_info *syms, size_t n, void *table, object optional,
                    str too_old, object error, void **handle)


# One library's table, opened on first use: `open()` (under `lock`) runs open_table once
# and returns the path; `handle` is NULL until then and kept for the process's lifetime.
# Its Python methods are the library module's public functions (`candidates`, `load`,
# `is_available`, `library_path`: `load = lib.load`, ...). Made by opened_library().
cdef class OpenedLibrary:
    cdef object spec
    cdef const bc_symbol_info *syms
    cdef size_t n
    cdef void *table
    cdef object optional
    cdef str too_old
    cdef object error
    cdef object lock
    cdef void *handle
    cdef str path

    cdef str open(self)


# The arguments are open_table's (above), kept for the first open().
cdef OpenedLibrary opened_library(object spec, const bc_symbol_info *syms, size_t n, void *table, object optional,
                                  str too_old, object error)
