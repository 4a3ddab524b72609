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
