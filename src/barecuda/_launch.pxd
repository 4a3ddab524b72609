"""Kernels, argument packing, launch configurations and launch plans."""
from libc.stdint cimport uint32_t, int32_t
from barecuda._abi cimport CUfunction, CUcontext, CUstream, CUlaunchAttribute, bc_driver_t, CUresult
from barecuda._device cimport Device
from barecuda._loader cimport set_current

from barecuda._pack cimport bc_param, bc_launch_rec, bc_issue, BC_LAUNCH_RELEASES_GIL, BC_SMALL_ARGBYTES, \
    BC_SMALL_NPARAMS


cdef class Kernel:
    cdef CUfunction func             # NULL once the module is closed
    cdef CUcontext ctx
    cdef bc_param *params            # nparams descriptors, computed once
    cdef Py_ssize_t nparams          # -1: layout unknown (no PTX, no signature, no cuFuncGetParamInfo)
    cdef uint32_t argbytes           # size of the parameter block
    cdef unsigned int max_grid[3]
    cdef unsigned int max_block[3]
    cdef unsigned int max_threads    # min(device, kernel MAX_THREADS_PER_BLOCK)
    cdef unsigned int max_dyn_smem   # kernel MAX_DYNAMIC_SHARED_SIZE_BYTES
    cdef readonly str name
    """The kernel's name as the module spells it (the mangled name for C++)."""
    cdef readonly object module
    """The Module (or Library) the kernel comes from; the kernel keeps it alive."""
    cdef readonly Device device
    """The Device the kernel's module is loaded on."""
    cdef tuple _types                # type name of each parameter (messages, param_info)
    cdef object __weakref__          # Module tracks its kernels weakly (no Module <-> Kernel cycle)

    cdef int _live(self) except -1


# Build a Kernel for `func` (already resolved in `module`, whose context is `ctx`).
# ptx_params: list of (type name, size, align) from the PTX .entry, or None.
# signature: the user's signature (sequence of type names / sizes), or None.
cdef Kernel make_kernel(object module, CUfunction func, CUcontext ctx, Device device, str name,
                        object ptx_params, object signature)
# Pack `value` into parameter slot i of kernel k at `dst` (k's parameter block), with
# launch's checks. keep: a list the caller owns, for objects that must outlive the
# packed bytes (today none: the bytes are values and addresses; the caller keeps its
# argument objects). Used by graph's kernel nodes.
cdef int pack_arg(Kernel k, Py_ssize_t i, object value, char *dst, CUstream s, list keep) except -1
# Check a launch geometry against k (device and kernel limits, shared memory) and
# parse it into out_grid/out_block; raises ValueError/TypeError with a 'Fix:' hint.
cdef int check_dims(Kernel k, object grid, object block, unsigned int smem,
                    unsigned int out_grid[3], unsigned int out_block[3]) except -1
# _capture's recorder (NULL: none): every launch path calls hook(stream handle, kernel or
# plan, its Kernel, its arguments: the launch's tuple or the plan's list) before issuing
# while it is set.
ctypedef int (*capture_hook_t)(size_t stream, object obj, Kernel k, object args) except -1
cdef void set_capture_hook(capture_hook_t hook) noexcept
# Called by Module.close(): later launches of k raise instead of using a dead handle.
cdef void invalidate_kernel(Kernel k) noexcept
# A counter invalidate_kernel increments: holders of many kernels (executable graphs)
# re-check theirs only when it moved.
cdef const size_t *kernels_closed() noexcept

# -- for the plans (_plan.pyx, which cimports this file; never the reverse): the pieces
# of the launch path a plan shares. The two slots are read through at each plan launch.
cdef capture_hook_t *capture_hook_slot() noexcept   # the recorder (set_capture_hook writes it)
cdef bint *releases_gil_slot() noexcept             # the one GIL switch (set_launch_releases_gil)
# Pack value into parameter i's slot (k's checks; the launch packer without the launch's memo).
cdef int pack_slot(Kernel k, Py_ssize_t i, object value, char *slot, CUstream hs) except -1
# Raise for a record issue_recs refused or the driver failed (rc: the CUresult, -1 closed
# module, -2 closed stream). Cold.
cdef int issue_failed(Kernel k, CUresult rc, const bc_launch_rec *r) except -1


# -- the issue loop, inline: Kernel.launch's config path and every plan launch call it
# directly, in their own module (a plan launch makes no cross-module call to issue).
# D: the caller's driver table; release_gil: the caller's read of the one GIL switch.
cdef inline Py_ssize_t issue_loop(bc_driver_t *D, bc_launch_rec **recs, Py_ssize_t n,
                                  CUresult *rc) except -2 nogil:
    """Issue n records in order. Returns -1, or the index of the first that failed
    (*rc its CUresult, -1 when its kernel's module was closed, -2 its stream closed)."""
    cdef Py_ssize_t i
    cdef bc_launch_rec *r
    for i in range(n):
        r = recs[i]
        if r.pfunc[0] == NULL:
            rc[0] = -1
            return i
        if r.stream_closed != NULL and r.stream_closed[0]:
            rc[0] = -2
            return i
        set_current(r.ctx)
        rc[0] = bc_issue(D, r)
        if rc[0] != 0:
            return i
    return -1


cdef inline Py_ssize_t issue_recs(bc_driver_t *D, bc_launch_rec **recs, Py_ssize_t n, CUresult *rc,
                                  bint release_gil) except -2:
    """issue_loop behind the GIL switch."""
    if release_gil:
        with nogil:
            return issue_loop(D, recs, n, rc)
    return issue_loop(D, recs, n, rc)


cdef inline int issue(bc_driver_t *D, Kernel k, bc_launch_rec *r, bint release_gil) except -1:
    """Issue one record (its kernel's errors on failure)."""
    cdef CUresult rc = 0
    if issue_recs(D, &r, 1, &rc, release_gil) >= 0:
        issue_failed(k, rc, r)
    return 0
