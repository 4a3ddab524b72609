#ifndef BARECUDA_CUDA_ERRORS_H
#define BARECUDA_CUDA_ERRORS_H
/* barecuda's own table of every CUresult value returned by the CUDA 13 driver
 * API, written once as the X-macro BC_CUDA_ERRORS below.  We never include
 * cuda.h at build time, so this file is where each numeric result code gets
 * the driver's spelling of its name, a short description written for barecuda,
 * an optional hint telling the user what to try next, and a flag saying
 * whether the error is "sticky", i.e. it leaves the context (or the whole
 * process) unusable so that the only way to keep using the GPU is to restart
 * the process.
 *
 * Everything else is generated from the one list:
 *   - the enum of named constants (CUDA_SUCCESS, CUDA_ERROR_NOT_READY, ...) that
 *     barecuda's C code and the driver double (tests/fakecuda/) use instead of
 *     bare numbers;
 *   - the lookup table behind bc_error_lookup();
 *   - the Cython names in src/barecuda/_errors.pxd and the CUresult IntEnum in
 *     src/barecuda/_errors.pyi (written by tools/gen_errors.py; tests/core/test_errors.py
 *     fails when they are out of date).
 *
 * X(code, NAME, description, hint or NULL, sticky).  Keep the list sorted by code:
 * bc_error_lookup() is a binary search. */

#include <stddef.h>

#define BC_CUDA_ERRORS(X) \
    X(0, CUDA_SUCCESS, \
      "The call completed without error (for queries: the work is finished).", \
      NULL, 0) \
    X(1, CUDA_ERROR_INVALID_VALUE, \
      "An argument passed to the driver call was out of its allowed range.", \
      "check the arguments of the failing call (sizes, flags, pointers, enum values)", 0) \
    X(2, CUDA_ERROR_OUT_OF_MEMORY, \
      "The driver could not allocate enough memory or other resources for the request.", \
      "free buffers, call trim() on the memory pool, or use a smaller batch", 0) \
    X(3, CUDA_ERROR_NOT_INITIALIZED, \
      "The driver has not been initialized, or its initialization failed.", \
      "make sure cuInit() ran successfully before any other driver call", 0) \
    X(4, CUDA_ERROR_DEINITIALIZED, \
      "The driver is shutting down and no longer accepts work.", \
      "avoid GPU calls from atexit handlers or finalizers that run during interpreter shutdown", 0) \
    X(5, CUDA_ERROR_PROFILER_DISABLED, \
      "Profiling is not enabled for this run, typically because an external profiler controls it.", \
      NULL, 0) \
    X(6, CUDA_ERROR_PROFILER_NOT_INITIALIZED, \
      "Deprecated: the profiler was used before it had been initialized.", \
      NULL, 0) \
    X(7, CUDA_ERROR_PROFILER_ALREADY_STARTED, \
      "Deprecated: profiling was started while it was already running.", \
      NULL, 0) \
    X(8, CUDA_ERROR_PROFILER_ALREADY_STOPPED, \
      "Deprecated: profiling was stopped while it was not running.", \
      NULL, 0) \
    X(34, CUDA_ERROR_STUB_LIBRARY, \
      "The loaded libcuda is a link-time stub rather than the real NVIDIA driver library.", \
      "make sure the real libcuda.so.1 from the NVIDIA driver is found first, not the toolkit's stubs/ directory", 0) \
    X(36, CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, \
      "The requested call needs a newer NVIDIA driver than the one installed.", \
      "upgrade the NVIDIA driver", 0) \
    X(46, CUDA_ERROR_DEVICE_UNAVAILABLE, \
      "The GPU cannot be used right now, usually because of its compute mode or another process owning it.", \
      "check the compute mode and other GPU users with nvidia-smi", 0) \
    X(100, CUDA_ERROR_NO_DEVICE, \
      "The driver found no usable CUDA GPU.", \
      "check nvidia-smi and CUDA_VISIBLE_DEVICES", 0) \
    X(101, CUDA_ERROR_INVALID_DEVICE, \
      "The device ordinal does not name a valid GPU, or the action is not valid for that GPU.", \
      "check the device index against the device count and CUDA_VISIBLE_DEVICES", 0) \
    X(102, CUDA_ERROR_DEVICE_NOT_LICENSED, \
      "The GPU requires a vGPU/Grid license that has not been applied.", \
      "check the vGPU/Grid licensing setup of this machine", 0) \
    X(200, CUDA_ERROR_INVALID_IMAGE, \
      "The module or kernel image handed to the driver is malformed.", \
      "check that the cubin/fatbin/PTX data is complete and not corrupted", 0) \
    X(201, CUDA_ERROR_INVALID_CONTEXT, \
      "No valid context is current on this thread, or the context handle is invalid or destroyed.", \
      "make sure a context is current on the calling thread and has not been destroyed", 0) \
    X(202, CUDA_ERROR_CONTEXT_ALREADY_CURRENT, \
      "Deprecated: the context was already the current one.", \
      NULL, 0) \
    X(205, CUDA_ERROR_MAP_FAILED, \
      "A map or register operation did not succeed.", \
      NULL, 0) \
    X(206, CUDA_ERROR_UNMAP_FAILED, \
      "An unmap or unregister operation did not succeed.", \
      NULL, 0) \
    X(207, CUDA_ERROR_ARRAY_IS_MAPPED, \
      "The array cannot be destroyed while it is still mapped.", \
      "unmap the array before destroying it", 0) \
    X(208, CUDA_ERROR_ALREADY_MAPPED, \
      "The resource is mapped already.", \
      NULL, 0) \
    X(209, CUDA_ERROR_NO_BINARY_FOR_GPU, \
      "The module holds no code that can run on this GPU's architecture.", \
      "compile for this GPU's compute capability or include PTX so the driver can JIT it", 0) \
    X(210, CUDA_ERROR_ALREADY_ACQUIRED, \
      "The resource has been acquired already.", \
      NULL, 0) \
    X(211, CUDA_ERROR_NOT_MAPPED, \
      "The resource is not currently mapped.", \
      NULL, 0) \
    X(212, CUDA_ERROR_NOT_MAPPED_AS_ARRAY, \
      "The mapped resource cannot be accessed as an array.", \
      NULL, 0) \
    X(213, CUDA_ERROR_NOT_MAPPED_AS_POINTER, \
      "The mapped resource cannot be accessed through a pointer.", \
      NULL, 0) \
    X(214, CUDA_ERROR_ECC_UNCORRECTABLE, \
      "The GPU detected a memory error that ECC could not repair.", \
      "restart the process; if it repeats, check nvidia-smi -q for ECC errors and have the GPU inspected", 1) \
    X(215, CUDA_ERROR_UNSUPPORTED_LIMIT, \
      "The requested CUlimit is not supported on this GPU.", \
      NULL, 0) \
    X(216, CUDA_ERROR_CONTEXT_ALREADY_IN_USE, \
      "The context may only be bound to one CPU thread at a time and another thread holds it.", \
      NULL, 0) \
    X(217, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, \
      "Direct peer access between these two GPUs is not possible.", \
      "copy through host memory instead, or check the GPU topology with nvidia-smi topo -m", 0) \
    X(218, CUDA_ERROR_INVALID_PTX, \
      "JIT compilation of the PTX code failed.", \
      "check the JIT error log in the exception message", 0) \
    X(219, CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, \
      "Something is wrong with the OpenGL or DirectX context used for interop.", \
      NULL, 0) \
    X(220, CUDA_ERROR_NVLINK_UNCORRECTABLE, \
      "An NVLink error occurred that could not be corrected.", \
      "restart the process; if it repeats, check the NVLink status with nvidia-smi nvlink", 0) \
    X(221, CUDA_ERROR_JIT_COMPILER_NOT_FOUND, \
      "The driver could not find its PTX JIT compiler library.", \
      "check that the NVIDIA driver installation is complete (libnvidia-ptxjitcompiler)", 0) \
    X(222, CUDA_ERROR_UNSUPPORTED_PTX_VERSION, \
      "The PTX was produced by a toolchain newer than this driver understands.", \
      "upgrade the NVIDIA driver or generate PTX with an older toolkit / lower PTX ISA version", 0) \
    X(223, CUDA_ERROR_JIT_COMPILATION_DISABLED, \
      "PTX JIT compilation has been turned off.", \
      "check CUDA_DISABLE_PTX_JIT or supply a cubin built for this GPU", 0) \
    X(224, CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, \
      "The requested execution-affinity type is not supported on this GPU.", \
      NULL, 0) \
    X(225, CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, \
      "The code to be JIT-compiled calls cudaDeviceSynchronize from the device, which is not supported.", \
      "remove device-side cudaDeviceSynchronize calls from the kernel", 0) \
    X(226, CUDA_ERROR_CONTAINED, \
      "A device fault (for example a bad NVLink peer access or a hardware error) was contained by the GPU and the process is now unusable.", \
      "restart the process", 1) \
    X(300, CUDA_ERROR_INVALID_SOURCE, \
      "The device source is invalid, for instance because compiling or linking it failed.", \
      "check the compiler/linker log for the device code", 0) \
    X(301, CUDA_ERROR_FILE_NOT_FOUND, \
      "A file the driver was asked to open does not exist.", \
      "check the path of the module file", 0) \
    X(302, CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, \
      "A symbol could not be resolved while linking to a shared object.", \
      NULL, 0) \
    X(303, CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, \
      "A shared object failed to initialize.", \
      NULL, 0) \
    X(304, CUDA_ERROR_OPERATING_SYSTEM, \
      "An operating-system call made by the driver failed.", \
      "check system logs (dmesg) and resource limits", 0) \
    X(400, CUDA_ERROR_INVALID_HANDLE, \
      "A handle (stream, event, module, function, ...) passed to the call is not valid.", \
      "make sure the object was created successfully, belongs to the current context and was not already destroyed", 0) \
    X(401, CUDA_ERROR_ILLEGAL_STATE, \
      "A resource the call depends on is not in a state that allows the operation.", \
      NULL, 0) \
    X(402, CUDA_ERROR_LOSSY_QUERY, \
      "Answering the query would drop important information, e.g. because of an old API version or missing output arguments.", \
      "use a newer query API or supply all optional output arguments", 0) \
    X(500, CUDA_ERROR_NOT_FOUND, \
      "A named symbol (kernel, global variable, driver entry point, ...) does not exist.", \
      "check the symbol name; C++ kernels need extern \"C\" or their mangled name", 0) \
    X(600, CUDA_ERROR_NOT_READY, \
      "The queried asynchronous work has not finished yet; this is a status, not a failure.", \
      NULL, 0) \
    X(700, CUDA_ERROR_ILLEGAL_ADDRESS, \
      "A kernel loaded or stored through an invalid memory address, leaving the process unusable.", \
      "a kernel accessed memory out of bounds; run under compute-sanitizer, then restart the process", 1) \
    X(701, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, \
      "The launch needs more resources than available, e.g. too many threads for the kernel's register use or oversized arguments.", \
      "reduce block size or registers, and check the kernel argument sizes", 0) \
    X(702, CUDA_ERROR_LAUNCH_TIMEOUT, \
      "A kernel ran past the watchdog time limit and was killed, leaving the process unusable.", \
      "split the work into shorter kernels or use a GPU without a display watchdog, then restart the process", 1) \
    X(703, CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, \
      "The kernel was launched with a texturing mode it cannot use.", \
      NULL, 0) \
    X(704, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, \
      "Peer access to this context has been enabled already.", \
      NULL, 0) \
    X(705, CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, \
      "Peer access was disabled without having been enabled first.", \
      NULL, 0) \
    X(708, CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, \
      "The device's primary context is already initialized.", \
      "set primary-context flags before the context is first used", 0) \
    X(709, CUDA_ERROR_CONTEXT_IS_DESTROYED, \
      "The current context was destroyed, or is a primary context not initialized yet.", \
      "retain/activate a context before using it and do not use it after destroying it", 0) \
    X(710, CUDA_ERROR_ASSERT, \
      "A device-side assert() fired in a kernel; the context and its allocations can no longer be used.", \
      "check the kernel's assert condition, then restart the process", 1) \
    X(711, CUDA_ERROR_TOO_MANY_PEERS, \
      "The hardware cannot support any more peer-access connections for these devices.", \
      "disable peer access to GPUs you no longer need", 0) \
    X(712, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, \
      "The host memory range is registered already.", \
      NULL, 0) \
    X(713, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, \
      "The host pointer does not belong to any registered memory range.", \
      NULL, 0) \
    X(714, CUDA_ERROR_HARDWARE_STACK_ERROR, \
      "A kernel hit a stack fault (corruption or stack overflow), leaving the process unusable.", \
      "reduce recursion/local arrays or raise CU_LIMIT_STACK_SIZE, then restart the process", 1) \
    X(715, CUDA_ERROR_ILLEGAL_INSTRUCTION, \
      "A kernel executed an illegal instruction, leaving the process unusable.", \
      "run under compute-sanitizer, then restart the process", 1) \
    X(716, CUDA_ERROR_MISALIGNED_ADDRESS, \
      "A kernel accessed memory through an address not aligned for the access size, leaving the process unusable.", \
      "check pointer offsets and casts in the kernel; run under compute-sanitizer, then restart the process", 1) \
    X(717, CUDA_ERROR_INVALID_ADDRESS_SPACE, \
      "A kernel used an address from the wrong memory space (global/shared/local) for an instruction, leaving the process unusable.", \
      "run under compute-sanitizer, then restart the process", 1) \
    X(718, CUDA_ERROR_INVALID_PC, \
      "A kernel's program counter wrapped around its address space, leaving the process unusable.", \
      "restart the process", 1) \
    X(719, CUDA_ERROR_LAUNCH_FAILED, \
      "A kernel faulted during execution (such as a bad pointer or out-of-bounds shared memory), leaving the process unusable.", \
      "run under compute-sanitizer, then restart the process", 1) \
    X(720, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, \
      "A cooperative launch asked for more blocks than can be resident on the GPU at once.", \
      "limit the grid to the occupancy maximum per SM times the SM count", 0) \
    X(721, CUDA_ERROR_TENSOR_MEMORY_LEAK, \
      "A kernel exited without freeing all of its tensor memory, leaving the process unusable.", \
      "deallocate all tensor memory before the kernel exits, then restart the process", 1) \
    X(800, CUDA_ERROR_NOT_PERMITTED, \
      "The operation is not allowed.", \
      NULL, 0) \
    X(801, CUDA_ERROR_NOT_SUPPORTED, \
      "The operation is not supported on this system or GPU.", \
      NULL, 0) \
    X(802, CUDA_ERROR_SYSTEM_NOT_READY, \
      "The system is not yet ready to run CUDA work.", \
      "check that required driver services (e.g. nvidia-fabricmanager, persistence daemon) are running", 0) \
    X(803, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, \
      "The versions of the kernel-mode display driver and the user-mode CUDA driver do not match.", \
      "reinstall the NVIDIA driver or reboot after a driver upgrade", 0) \
    X(804, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, \
      "A forward-compatibility driver is installed but the visible GPU does not support that mode.", \
      "use a native driver or restrict CUDA_VISIBLE_DEVICES to supported GPUs", 0) \
    X(805, CUDA_ERROR_MPS_CONNECTION_FAILED, \
      "The MPS client could not connect to the MPS control daemon or server.", \
      "check that the MPS daemon is running and its pipe directory is accessible", 0) \
    X(806, CUDA_ERROR_MPS_RPC_FAILURE, \
      "A remote call between the MPS client and server failed.", \
      NULL, 0) \
    X(807, CUDA_ERROR_MPS_SERVER_NOT_READY, \
      "The MPS server cannot take new client requests yet, for instance while recovering from a failure.", \
      "retry later", 0) \
    X(808, CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, \
      "No hardware resources are left to create another MPS client.", \
      "reduce the number of MPS client processes", 0) \
    X(809, CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, \
      "No hardware resources are left for additional device connections.", \
      NULL, 0) \
    X(810, CUDA_ERROR_MPS_CLIENT_TERMINATED, \
      "The MPS server terminated this client; CUDA cannot be used again in this process.", \
      "restart the process", 1) \
    X(811, CUDA_ERROR_CDP_NOT_SUPPORTED, \
      "The module uses CUDA Dynamic Parallelism, which the current setup (e.g. MPS) does not allow.", \
      NULL, 0) \
    X(812, CUDA_ERROR_CDP_VERSION_MISMATCH, \
      "The module mixes incompatible versions of CUDA Dynamic Parallelism.", \
      "rebuild all device code with the same toolkit and CDP version", 0) \
    X(900, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, \
      "The operation is not allowed while the stream is being captured.", \
      "move the operation outside the graph capture", 0) \
    X(901, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, \
      "The stream's capture sequence was invalidated by an earlier error.", \
      "look for the first error during capture, then end and restart the capture", 0) \
    X(902, CUDA_ERROR_STREAM_CAPTURE_MERGE, \
      "The operation would merge two separate capture sequences.", \
      NULL, 0) \
    X(903, CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, \
      "Capture was not started on this stream.", \
      NULL, 0) \
    X(904, CUDA_ERROR_STREAM_CAPTURE_UNJOINED, \
      "A stream forked off during capture was never joined back into the origin stream.", \
      "join every forked stream back (via an event) before ending the capture", 0) \
    X(905, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, \
      "The operation would add a dependency that crosses the boundary of the capture sequence.", \
      NULL, 0) \
    X(906, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, \
      "The legacy default stream would implicitly depend on a stream under capture.", \
      "use non-blocking or per-thread default streams while capturing", 0) \
    X(907, CUDA_ERROR_CAPTURED_EVENT, \
      "The operation is not allowed on an event last recorded in a stream under capture.", \
      NULL, 0) \
    X(908, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, \
      "A capture not begun in relaxed mode was ended from a thread other than the one that started it.", \
      "end the capture on the thread that began it, or begin it with CU_STREAM_CAPTURE_MODE_RELAXED", 0) \
    X(909, CUDA_ERROR_TIMEOUT, \
      "The wait operation's timeout expired.", \
      NULL, 0) \
    X(910, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, \
      "The executable graph could not be updated because the changes break the update rules.", \
      "re-instantiate the graph instead of updating it", 0) \
    X(911, CUDA_ERROR_EXTERNAL_DEVICE, \
      "A device outside CUDA signalled an asynchronous error on shared data, leaving the process unusable.", \
      "restart the process", 1) \
    X(912, CUDA_ERROR_INVALID_CLUSTER_SIZE, \
      "The kernel launch's thread-block cluster configuration is invalid.", \
      "check the cluster dimensions against the grid and the kernel's cluster attributes", 0) \
    X(913, CUDA_ERROR_FUNCTION_NOT_LOADED, \
      "The function handle has not been loaded yet but the call needs a loaded function.", \
      "load the function (cuFuncLoad / module loading mode) before using it", 0) \
    X(914, CUDA_ERROR_INVALID_RESOURCE_TYPE, \
      "At least one resource passed in has a type that this operation does not accept.", \
      NULL, 0) \
    X(915, CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, \
      "At least one resource passed in is too small or otherwise unsuitable for this operation.", \
      NULL, 0) \
    X(916, CUDA_ERROR_KEY_ROTATION, \
      "Something went wrong while rotating encryption keys.", \
      NULL, 0) \
    X(999, CUDA_ERROR_UNKNOWN, \
      "The driver hit an internal error of unknown nature.", \
      NULL, 0)

/* The named constants.  cuda_abi.h includes this header, so CUDA_SUCCESS and
 * every CUDA_ERROR_* name is available wherever the ABI is. */
enum bc_cuda_result {
#define BC_X_ENUM(code, name, description, hint, sticky) name = code,
    BC_CUDA_ERRORS(BC_X_ENUM)
#undef BC_X_ENUM
    BC_CUDA_RESULT_END_ = 0x7fffffff
};

typedef struct bc_error_info {
    int code;                 /* CUresult value */
    const char *name;         /* "CUDA_ERROR_..." exactly as the driver spells it */
    const char *description;  /* our own words */
    const char *hint;         /* what to do, or NULL */
    int sticky;               /* 1 when the error corrupts the context: the process must restart */
} bc_error_info;

/* Number of entries in the table. */
enum {
#define BC_X_COUNT(code, name, description, hint, sticky) + 1
    BC_ERROR_TABLE_LEN = 0 BC_CUDA_ERRORS(BC_X_COUNT)
#undef BC_X_COUNT
};

/* The table, sorted by code.  A function-local static so that a translation unit
 * that includes this header without using the table carries no copy of it and
 * gets no unused-variable warning. */
static inline const bc_error_info *bc_error_table(void) {
#define BC_X_ROW(code, name, description, hint, sticky) {code, #name, description, hint, sticky},
    static const bc_error_info table[] = { BC_CUDA_ERRORS(BC_X_ROW) };
#undef BC_X_ROW
    return table;
}

/* Returns the entry for code, or NULL when the code is unknown. Binary search (table is sorted). */
static inline const bc_error_info *bc_error_lookup(int code) {
    const bc_error_info *t = bc_error_table();
    size_t lo = 0, hi = BC_ERROR_TABLE_LEN;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = t[mid].code;
        if (c == code)
            return &t[mid];
        if (c < code)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
#endif
