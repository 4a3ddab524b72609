/*
 * device.c -- driver double (tests/fakecuda/): driver version and init, error names, devices, primary contexts, peer access.
 */
#include "fake_internal.h"

/* ================================================================= driver */
CUresult CUDAAPI cuInit(unsigned int Flags) {
    int forced;
    FK_ENTER_NOINIT(cuInit);
    forced = env_int("FAKECUDA_INIT_RESULT", 0);
    if (forced) return forced;
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!g_initialized) {
        init_devices();
        if (g_ndev == 0) return CUDA_ERROR_NO_DEVICE;
        g_initialized = 1;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) {
    FK_ENTER_NOINIT(cuDriverGetVersion);
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = env_int("FAKECUDA_DRIVER_VERSION", 13000);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr) {
    const bc_error_info *e;
    FK_ENTER_NOINIT(cuGetErrorName);
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    e = bc_error_lookup(error);
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr) {
    const bc_error_info *e;
    FK_ENTER_NOINIT(cuGetErrorString);
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    e = bc_error_lookup(error);
    *pStr = e ? e->description : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- devices */
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
    FK_ENTER(cuDeviceGet);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count) {
    FK_ENTER(cuDeviceGetCount);
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = g_ndev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev) {
    FK_ENTER(cuDeviceGetName);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "FakeCUDA Device %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    static const unsigned char base[16] = {0xfa, 0xce, 0xc0, 0xda, 0x00, 0x00, 0x40, 0x00,
                                           0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    FK_ENTER(cuDeviceGetUuid);
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev) {
    FK_ENTER(cuDeviceTotalMem);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)FK_TOTAL_MEM;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    FK_ENTER(cuDeviceGetAttribute);
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if ((int)attrib <= 0 || (int)attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
    *pi = g_dev[dev].attrs[attrib];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
    FK_ENTER(cuDeviceGetPCIBusId);
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", g_dev[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
             g_dev[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], g_dev[dev].attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
    FK_ENTER(cuDeviceCanAccessPeer);
    if (!canAccessPeer) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev) || !valid_dev(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

/* --------------------------------------------------------------- contexts */
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    FK_ENTER(cuDevicePrimaryCtxRetain);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    g_dev[dev].retain++;
    *pctx = &g_dev[dev].ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
    FK_ENTER(cuDevicePrimaryCtxRelease);
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (g_dev[dev].retain <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--g_dev[dev].retain == 0) g_dev[dev].ctx.peers = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    FK_ENTER(cuDevicePrimaryCtxGetState);
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = g_dev[dev].retain > 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    FK_ENTER(cuCtxSetCurrent);
    if (ctx && !valid_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    tls_ctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
    FK_ENTER(cuCtxGetCurrent);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = tls_ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) {
    FK_ENTER(cuCtxGetDevice);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    {
        FK_NEED_CTX(c);
        *device = c->dev;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
    FK_ENTER(cuCtxSynchronize);
    {
        FK_NEED_CTX(c);
        (void)c;
    }
    if (fk_cap_any()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;   /* invalidates every capture */
    sync_point();
    pend_complete(NULL, 0, 1);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
    FK_ENTER(cuCtxEnablePeerAccess);
    FK_NEED_CTX(c);
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_ctx(peerContext) || g_dev[peerContext->dev].retain <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (peerContext == c) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (c->peers & (1u << peerContext->dev)) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    c->peers |= 1u << peerContext->dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
    FK_ENTER(cuCtxDisablePeerAccess);
    FK_NEED_CTX(c);
    if (!valid_ctx(peerContext)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!(c->peers & (1u << peerContext->dev))) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    c->peers &= ~(1u << peerContext->dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    FK_ENTER(cuCtxGetStreamPriorityRange);
    if (leastPriority) *leastPriority = FK_PRIO_LEAST;
    if (greatestPriority) *greatestPriority = FK_PRIO_GREATEST;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t *free_, size_t *total) {
    FK_ENTER(cuMemGetInfo);
    FK_NEED_CTX(c);
    if (!free_ || !total) return CUDA_ERROR_INVALID_VALUE;
    *total = (size_t)FK_TOTAL_MEM;
    *free_ = (size_t)(FK_TOTAL_MEM - g_dev[c->dev].used);
    return CUDA_SUCCESS;
}
