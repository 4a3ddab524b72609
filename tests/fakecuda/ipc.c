/*
 * tests/fakecuda/ipc.c -- the driver double's IPC, peer-topology and pool-sharing
 * entry points (cuIpc*, cuMemPool{Export,Import}*, cuMemPoolSetAccess,
 * cuDeviceGetP2PAttribute, cuDeviceGetByPCIBusId).
 *
 * One file of the double (tests/conftest.py compiles every .c file in tests/fakecuda/ into
 * one library); registries, locking and FK_ENTER come from fake_internal.h. The
 * double is one process, so:
 *   - a memory handle names an allocation of THIS process; opening it is allowed
 *     here (the real driver refuses handles of the calling process -- barecuda checks
 *     the exporter's pid before calling) and gives back the same address;
 *   - opening the same handle again while it is open returns CUDA_ERROR_ALREADY_MAPPED;
 *     a handle whose allocation was freed returns CUDA_ERROR_INVALID_VALUE;
 *   - pool export writes the pool's address into a memfd (a real file descriptor);
 *     importing pools and pool pointers returns CUDA_ERROR_NOT_SUPPORTED (the
 *     cross-process pool path is exercised by the GPU suite only).
 * fakecuda_ipc_live() counts open memory mappings.
 */
#include "fake_internal.h"

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FK_IPC_MAGIC 0x46AB1C01u
#define FK_IPC_MAX 4096

typedef struct fk_ipc_payload {
    unsigned magic;
    int pid;
    uintptr_t base;
    unsigned long long id;
    size_t size;
} fk_ipc_payload;

typedef struct fk_ipc_evpayload {
    unsigned magic;
    int pid;
    unsigned flags;
} fk_ipc_evpayload;

static uintptr_t g_ipc_open[FK_IPC_MAX];
static int g_ipc_nopen;

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
    fk_alloc *a;
    fk_ipc_payload pl;
    FK_ENTER(cuIpcGetMemHandle);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    a = find_alloc((uintptr_t)dptr);
    if (!a || a->kind != MK_DEVICE || a->pool) return CUDA_ERROR_INVALID_VALUE;   /* cuMemAlloc memory only */
    memset(pHandle, 0, sizeof(*pHandle));
    pl.magic = FK_IPC_MAGIC;
    pl.pid = (int)getpid();
    pl.base = a->base;
    pl.id = a->id;
    pl.size = a->size;
    memcpy(pHandle->reserved, &pl, sizeof(pl));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
    fk_ipc_payload pl;
    fk_alloc *a;
    int i;
    FK_ENTER(cuIpcOpenMemHandle);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) return CUDA_ERROR_INVALID_VALUE;
    memcpy(&pl, handle.reserved, sizeof(pl));
    if (pl.magic != FK_IPC_MAGIC) return CUDA_ERROR_INVALID_VALUE;
    a = find_alloc_exact(pl.base);
    if (!a || a->id != pl.id) return CUDA_ERROR_INVALID_VALUE;                      /* freed: stale */
    for (i = 0; i < g_ipc_nopen; i++)
        if (g_ipc_open[i] == pl.base) return CUDA_ERROR_ALREADY_MAPPED;
    if (g_ipc_nopen == FK_IPC_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    g_ipc_open[g_ipc_nopen++] = pl.base;
    *pdptr = (CUdeviceptr)pl.base;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
    int i;
    FK_ENTER(cuIpcCloseMemHandle);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    for (i = 0; i < g_ipc_nopen; i++)
        if (g_ipc_open[i] == (uintptr_t)dptr) {
            g_ipc_open[i] = g_ipc_open[--g_ipc_nopen];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
    fk_ipc_evpayload pl;
    FK_ENTER(cuIpcGetEventHandle);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!pHandle) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_events, event)) return CUDA_ERROR_INVALID_HANDLE;
    if (!(event->flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
    memset(pHandle, 0, sizeof(*pHandle));
    pl.magic = FK_IPC_MAGIC;
    pl.pid = (int)getpid();
    pl.flags = event->flags;
    memcpy(pHandle->reserved, &pl, sizeof(pl));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
    fk_ipc_evpayload pl;
    struct CUevent_st *e;
    FK_ENTER(cuIpcOpenEventHandle);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    memcpy(&pl, handle.reserved, sizeof(pl));
    if (pl.magic != FK_IPC_MAGIC || !(pl.flags & CU_EVENT_INTERPROCESS)) return CUDA_ERROR_INVALID_VALUE;
    e = calloc(1, sizeof(*e));
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = 0xE7E7u;
    e->flags = pl.flags;
    if (vec_add(&g_events, e)) { free(e); return CUDA_ERROR_OUT_OF_MEMORY; }
    *phEvent = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType, unsigned long long flags) {
    int fd;
    FK_ENTER(cuMemPoolExportToShareableHandle);
    if (!handle_out || flags) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_pools, pool)) return CUDA_ERROR_INVALID_VALUE;   /* device default pools: no handle types */
    fd = (int)syscall(SYS_memfd_create, "fakecuda-pool", 0u);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (write(fd, &pool, sizeof(pool)) != (ssize_t)sizeof(pool)) { close(fd); return CUDA_ERROR_OUT_OF_MEMORY; }
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                    CUmemAllocationHandleType handleType, unsigned long long flags) {
    FK_ENTER(cuMemPoolImportFromShareableHandle);
    (void)handle;
    if (!pool_out || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;   /* no second process in the double */
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr) {
    fk_alloc *a;
    fk_ipc_payload pl;
    FK_ENTER(cuMemPoolExportPointer);
    if (!shareData_out) return CUDA_ERROR_INVALID_VALUE;
    a = find_alloc_exact((uintptr_t)ptr);
    if (!a || !a->pool) return CUDA_ERROR_INVALID_VALUE;
    memset(shareData_out, 0, sizeof(*shareData_out));
    pl.magic = FK_IPC_MAGIC;
    pl.pid = (int)getpid();
    pl.base = a->base;
    pl.id = a->id;
    pl.size = a->size;
    memcpy(shareData_out->reserved, &pl, sizeof(pl));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData) {
    FK_ENTER(cuMemPoolImportPointer);
    (void)pool;
    if (!ptr_out || !shareData) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
    size_t i;
    FK_ENTER(cuMemPoolSetAccess);
    if (!map || !count) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_pools, pool)) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < count; i++)
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_dev(map[i].location.id))
            return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* Every distinct pair: access and atomics supported, rank 0 (NVLink-like). */
CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                         CUdevice dstDevice) {
    FK_ENTER(cuDeviceGetP2PAttribute);
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(srcDevice) || !valid_dev(dstDevice) || srcDevice == dstDevice) return CUDA_ERROR_INVALID_DEVICE;
    switch ((int)attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
    int d;
    char buf[32];
    FK_ENTER(cuDeviceGetByPCIBusId);
    if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
    for (d = 0; d < g_ndev; d++) {
        snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", g_dev[d].attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
                 g_dev[d].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], g_dev[d].attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
        if (!strcasecmp(buf, pciBusId)) {
            *dev = d;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

FK_EXPORT int fakecuda_ipc_live(void) {
    FK_LOCK_SCOPE;
    return g_ipc_nopen;
}
