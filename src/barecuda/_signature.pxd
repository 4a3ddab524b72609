"""Kernel signature knowledge: parameter kinds, the PTX .entry parser, user signatures."""

cdef extern from "barecuda/bc_kinds.h" nogil:
    enum:
        BC_F_INT
        BC_F_FLOAT
        BC_F_FCONV
        BC_F_PTR
        BC_F_BOOL
        BC_F_EXACT
        BC_F_BYTES
    enum:
        BC_K_PTR
        BC_K_U64
        BC_K_S64
        BC_K_F64
        BC_K_U32
        BC_K_S32
        BC_K_F32
        BC_K_U16
        BC_K_S16
        BC_K_F16
        BC_K_U8
        BC_K_S8
        BC_K_BOOL
        BC_K_B8
        BC_K_B16
        BC_K_B32
        BC_K_B64
        BC_K_X8
        BC_K_X16
        BC_K_X32
        BC_K_X64
        BC_K_W8
        BC_K_W16
        BC_K_W32
        BC_K_W64
        BC_K_BYTES
        BC_K_COUNT
    const char *const bc_kind_name[]
    const int bc_kind_size[]
    const int bc_kind_align[]
    const long long bc_kind_min[]
    const unsigned long long bc_kind_max[]
    const int bc_kind_flags[]
    const char *const bc_ptx_type_name[]
    const int bc_ptx_type_kind[]
    int BC_PTX_TYPE_COUNT
    int bc_kind_is_pointer(int kind)
    int bc_kind_is_float(int kind)


# The parameter layout of one kernel as a list of (type name, kind, size, align),
# or None when nothing tells it. ptx_params: [(type, size, align)] from the PTX
# .entry, or None; signature: the user's, or None; drv: [(offset, size)] from
# cuFuncGetParamInfo, or None. Raises ValueError for a bad signature.
cdef object layout_entries(str name, object ptx_params, object signature, object drv)
