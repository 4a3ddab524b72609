"""Free-threaded CPython (3.13t/3.14t) support shared by the modules: bc_ft.h's mutex for
C tables every thread reaches and its atomic counters; both are nothing on a GIL build.
Object state uses Cython's critical sections instead (docs/architecture.md, "Free-threaded
CPython: what is protected")."""

cdef extern from "barecuda/bc_ft.h" nogil:
    enum:
        BC_FREE_THREADED        # 1 when built for a free-threaded interpreter (Py_GIL_DISABLED)
    ctypedef struct bc_mutex:
        pass
    void bc_mutex_lock(bc_mutex *m)
    void bc_mutex_unlock(bc_mutex *m)
    void bc_count_add(size_t *n, size_t d)
    size_t bc_count_get(const size_t *n)
