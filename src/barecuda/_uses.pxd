"""Use counts and flags (include/barecuda/bc_uses.h): declarations only, no module at run
time. The modules that count calls in flight cimport them from here
(docs/architecture.md, "Close versus in-flight use")."""

cdef extern from "barecuda/bc_uses.h" nogil:
    void bc_use_enter(long *n)
    long bc_use_leave(long *n)
    long bc_use_count(long *n)
    void bc_flag_set(int *f)
    int bc_flag_take(int *f)
    int bc_flag_get(int *f)
