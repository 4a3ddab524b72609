"""Kernels, argument packing, launch configurations and launch plans."""
from libc.stdint cimport uint32_t, int32_t
from barecuda._abi cimport CUfunction, CUcontext, CUstream, CUlaunchAttribute, bc_driver_t, CUresult
from barecuda._device cimport Device

cdef extern from "barecuda/bc_pack.h" nogil:
    enum:
        BC_LAUNCH_RELEASES_GIL
        BC_SMALL_ARGBYTES
        BC_SMALL_NPARAMS
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
        BC_K_BYTES
        BC_K_COUNT
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
        void **params
        unsigned int nattrs
        CUlaunchAttribute attrs[4]
    CUresult bc_issue(const bc_driver_t *D, const bc_launch_rec *r)


cdef class Kernel:
    cdef CUfunction func             # NULL once the module is closed
    cdef CUcontext ctx
    cdef bc_param *params            # nparams descriptors, computed once
    cdef Py_ssize_t nparams          # -1: layout unknown (no PTX, no signature, driver < 12.4)
    cdef uint32_t argbytes           # size of the parameter block
    cdef unsigned int max_grid[3]
    cdef unsigned int max_block[3]
    cdef unsigned int max_threads    # min(device, kernel MAX_THREADS_PER_BLOCK)
    cdef unsigned int max_dyn_smem   # kernel MAX_DYNAMIC_SHARED_SIZE_BYTES
    cdef readonly str name
    cdef readonly object module
    cdef readonly Device device
    cdef tuple _types                # type name of each parameter (messages, param_info)
    cdef object __weakref__          # Module tracks its kernels weakly (no Module <-> Kernel cycle)

    cdef int _live(self) except -1


# Build a Kernel for `func` (already resolved in `module`, whose context is `ctx`).
# ptx_params: list of (type name, size, align) from the PTX .entry, or None.
# signature: the user's signature (sequence of type names / sizes), or None.
cdef Kernel make_kernel(object module, CUfunction func, CUcontext ctx, Device device, str name,
                        object ptx_params, object signature)
# Called by Module.close(): later launches of k raise instead of using a dead handle.
cdef void invalidate_kernel(Kernel k) noexcept

# -- CUDA graphs (kernel-node set_arg; INTERFACES.md "Packing one argument"). Graph's
#    stand-in until launch's own definitions merge; whoever merges second keeps one.
cdef int pack_arg(Kernel k, Py_ssize_t i, object value, char *dst, CUstream s, list keep) except -1
cdef int check_dims(Kernel k, object grid, object block, unsigned int smem, unsigned int out_grid[3],
                    unsigned int out_block[3]) except -1
