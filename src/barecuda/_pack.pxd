"""Argument packing off the fast path: the C pieces of bc_pack.h and the slow cases."""
from libc.stdint cimport uint32_t, int32_t, uint16_t
from barecuda._abi cimport CUfunction, CUcontext, CUstream, CUlaunchAttribute, bc_driver_t, CUresult
from barecuda._signature cimport *

cdef extern from "barecuda/bc_pack.h" nogil:
    enum:
        BC_LAUNCH_RELEASES_GIL
        BC_SMALL_ARGBYTES
        BC_SMALL_NPARAMS
    ctypedef struct bc_param:
        uint32_t offset
        uint32_t size
        uint32_t align
        int32_t kind
    ctypedef struct bc_launch_rec:
        const CUfunction *pfunc
        CUcontext ctx
        unsigned int grid[3]
        unsigned int block[3]
        unsigned int smem
        CUstream stream
        const int *stream_closed
        void **params
        unsigned int nattrs
        CUlaunchAttribute attrs[4]
    CUresult bc_issue(const bc_driver_t *D, const bc_launch_rec *r)
    void bc_store_int(char *slot, uint32_t size, unsigned long long v)
    void bc_store_f16(char *slot, double d)
    void bc_store_f32(char *slot, double d)
    void bc_store_f64(char *slot, double d)
    uint16_t bc_double_to_half(double d)
    uint32_t bc_align_up(uint32_t v, uint32_t a)

cdef extern from *:
    """
    /* PyLong_AsLongLongAndOverflow, with the value of an exact compact int (any int
     * that fits in one digit, 30 bits on usual builds: most arguments) read inline:
     * through the 3.12+ unstable API, or from the digit before 3.12 (the layout
     * Cython's own int conversion reads there too). */
    #if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_LIMITED_API)
    static inline long long bc_as_ll(PyObject *o, int *overflow) {
        if (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)o)) {
            *overflow = 0;
            return (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
        }
        return PyLong_AsLongLongAndOverflow(o, overflow);
    }
    #elif !defined(Py_LIMITED_API) && !defined(PYPY_VERSION)
    #if PY_VERSION_HEX < 0x030B0000
    #include "longintrepr.h"
    #endif
    static inline long long bc_as_ll(PyObject *o, int *overflow) {
        if (PyLong_CheckExact(o)) {
            Py_ssize_t size = Py_SIZE(o);
            if (size == 0 || size == 1 || size == -1) {
                *overflow = 0;      /* (a zero may have no digit allocated) */
                return size == 0 ? 0 : size * (long long)((PyLongObject *)o)->ob_digit[0];
            }
        }
        return PyLong_AsLongLongAndOverflow(o, overflow);
    }
    #else
    #define bc_as_ll PyLong_AsLongLongAndOverflow
    #endif
    """
    # No exception is possible for an exact int, so no error check is generated.
    long long _bc_as_ll "bc_as_ll"(object o, int *overflow)


cdef inline bint float_ok(int kind) noexcept nogil:
    return (bc_kind_flags[kind] & BC_F_FLOAT) != 0


cdef inline bint int_ok(int kind) noexcept nogil:
    return (bc_kind_flags[kind] & BC_F_INT) != 0


# The one integer range check of a parameter kind (bc_kinds.h's range), for an int read
# as a C long long (a u64 above 2**63 does not get here: the caller's overflow path).
cdef inline bint int_in_range(int kind, long long x) noexcept nogil:
    return x >= bc_kind_min[kind] and (x < 0 or <unsigned long long>x <= bc_kind_max[kind])


cdef inline void store_float(int kind, char *slot, double d) noexcept nogil:
    if kind == BC_K_F32 or kind == BC_K_B32:
        bc_store_f32(slot, d)
    elif kind == BC_K_F64 or kind == BC_K_B64:
        bc_store_f64(slot, d)
    else:
        bc_store_f16(slot, d)


# "name(type, type, ...)" of a Kernel (k: a barecuda.Kernel), for messages.
cdef str sig_text(object k)
# The launch paths' errors (Kernel.launch, launch_config, bind, plans): k's module was
# closed (ValueError); `got` arguments for k's nparams (TypeError; nparams < 0: the layout
# is unknown); a plan's stream was closed (index: the plan's place in a PlanList, or -1).
cdef int raise_closed(object k) except -1
cdef int raise_count(object k, Py_ssize_t nparams, Py_ssize_t got) except -1
cdef int raise_stream_closed(Py_ssize_t index) except -1
# TypeError: argument i of k does not take arg.
cdef int raise_type(object k, const bc_param *p, Py_ssize_t i, object arg) except -1
# An int (or subclass) v into slot p: range-checked, or converted for float kinds.
cdef int pack_int(object k, const bc_param *p, Py_ssize_t i, object v, char *slot) except -1
# Every argument type the launch fast path does not handle.
# hs: the stream the launch is queued on (the consumer stream of docs/interop.md)
cdef int pack_slow(object k, const bc_param *p, Py_ssize_t i, object arg, char *slot, CUstream hs) except -1
