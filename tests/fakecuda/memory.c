/*
 * memory.c -- driver double (tests/fakecuda/): device, host, managed and registered memory, copies, memsets, pointer attributes,
 * and memory pools.
 */
#include "fake_internal.h"

/* ------------------------------------------------------------------ memory */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) {
    FK_ENTER(cuMemAlloc);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    FK_NEED_CTX(c);
    return do_alloc(dptr, bytesize, MK_DEVICE, c->dev, NULL, 0);
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
    FK_ENTER(cuMemFree);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (dptr == 0) return CUDA_SUCCESS;
    pend_check_free(dptr, NULL, 1);
    return do_free(dptr, 0);
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                 unsigned int ElementSizeBytes) {
    size_t pitch;
    CUresult rc;
    FK_ENTER(cuMemAllocPitch);
    FK_NEED_CTX(c);
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
    pitch = (WidthInBytes + 511) & ~(size_t)511;
    rc = do_alloc(dptr, pitch * Height, MK_DEVICE, c->dev, NULL, 0);
    if (rc == CUDA_SUCCESS) *pPitch = pitch;
    return rc;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    FK_ENTER(cuMemAllocManaged);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    FK_NEED_CTX(c);
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
    return do_alloc(dptr, bytesize, MK_MANAGED, c->dev, NULL, flags);
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
    CUdeviceptr d = 0;
    CUresult rc;
    FK_ENTER(cuMemHostAlloc);
    FK_NEED_CTX(c);
    if (!pp) return CUDA_ERROR_INVALID_VALUE;
    if (Flags & ~7u) return CUDA_ERROR_INVALID_VALUE;
    rc = do_alloc(&d, bytesize, MK_HOST_ALLOC, c->dev, NULL, Flags);
    if (rc == CUDA_SUCCESS) *pp = (void *)(uintptr_t)d;
    return rc;
}

CUresult CUDAAPI cuMemFreeHost(void *p) {
    FK_ENTER(cuMemFreeHost);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    return do_free((CUdeviceptr)(uintptr_t)p, 1);
}

CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
    fk_alloc *a;
    FK_ENTER(cuMemHostGetDevicePointer);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!pdptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    a = find_alloc((uintptr_t)p);
    if (!a || (a->kind != MK_HOST_ALLOC && a->kind != MK_HOST_REG)) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags) {
    size_t i;
    uintptr_t lo = (uintptr_t)p, hi = lo + bytesize;
    fk_alloc *a;
    FK_ENTER(cuMemHostRegister);
    FK_NEED_CTX(c);
    if (!p || bytesize == 0 || (Flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < g_nallocs; i++) {
        fk_alloc *b = &g_allocs[i];
        if (lo < b->base + b->size && b->base < hi) {
            if (b->kind == MK_HOST_REG || b->kind == MK_HOST_ALLOC) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    a = add_alloc();
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    a->base = lo;
    a->size = bytesize;
    a->kind = MK_HOST_REG;
    a->dev = c->dev;
    a->flags = Flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void *p) {
    fk_alloc *a;
    FK_ENTER(cuMemHostUnregister);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    a = find_alloc_exact((uintptr_t)p);
    if (!a || a->kind != MK_HOST_REG) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    remove_alloc(a);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    fk_alloc *a;
    FK_ENTER(cuMemGetAddressRange);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    a = find_alloc((uintptr_t)dptr);
    if (!a) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = (CUdeviceptr)a->base;
    if (psize) *psize = a->size;
    return CUDA_SUCCESS;
}

/* Booleans (SYNC_MEMOPS, IS_MANAGED, MAPPED) are written as one byte, like the driver's bool. */
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
    fk_alloc *a;
    int host_side;
    FK_ENTER(cuPointerGetAttribute);
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    a = find_alloc((uintptr_t)ptr);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    host_side = a->kind == MK_HOST_ALLOC || a->kind == MK_HOST_REG;
    switch ((int)attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = &g_dev[a->dev].ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = host_side ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (a->kind == MK_DEVICE || a->kind == MK_GLOBAL) return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(unsigned char *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = a->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned char *)data = a->kind == MK_MANAGED; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = a->dev; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = (CUdeviceptr)a->base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = a->size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned char *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        if (!a->pool) return CUDA_ERROR_INVALID_VALUE;
        *(CUmemoryPool *)data = a->pool;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
    FK_ENTER(cuMemcpy);
    FK_COPY_PRELUDE(NULL);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (ByteCount && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
    if (ByteCount) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyAsync);
    FK_COPY_PRELUDE(hStream);
    FK_CAPTURED(fk_cap_copy(hStream, CU_MEMORYTYPE_UNIFIED, NULL, dst, CU_MEMORYTYPE_UNIFIED, NULL, src, ByteCount,
                            &fk_taken_));
    if (ByteCount && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
    if (ByteCount) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount);
    return CUDA_SUCCESS;
}

CUresult htod(CUdeviceptr dst, const void *src, size_t n) {
    if (!n) return CUDA_SUCCESS;
    if (!src || !dev_range_ok((uintptr_t)dst, n)) return CUDA_ERROR_INVALID_VALUE;
    memmove((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}

CUresult dtoh(void *dst, CUdeviceptr src, size_t n) {
    if (!n) return CUDA_SUCCESS;
    if (!dst || !dev_range_ok((uintptr_t)src, n)) return CUDA_ERROR_INVALID_VALUE;
    memmove(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (!n) return CUDA_SUCCESS;
    if (!dev_range_ok((uintptr_t)dst, n) || !dev_range_ok((uintptr_t)src, n)) return CUDA_ERROR_INVALID_VALUE;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    FK_ENTER(cuMemcpyHtoD);
    FK_COPY_PRELUDE(NULL);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sync_point();
    return htod(dstDevice, srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    FK_ENTER(cuMemcpyDtoH);
    FK_COPY_PRELUDE(NULL);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sync_point();
    return dtoh(dstHost, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    FK_ENTER(cuMemcpyDtoD);
    FK_COPY_PRELUDE(NULL);
    if (fk_cap_unsafe()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return dtod(dstDevice, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyHtoDAsync);
    FK_COPY_PRELUDE(hStream);
    FK_CAPTURED(fk_cap_copy(hStream, CU_MEMORYTYPE_DEVICE, NULL, dstDevice, CU_MEMORYTYPE_HOST, srcHost, 0, ByteCount,
                            &fk_taken_));
    return htod(dstDevice, srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyDtoHAsync);
    FK_COPY_PRELUDE(hStream);
    FK_CAPTURED(fk_cap_copy(hStream, CU_MEMORYTYPE_HOST, dstHost, 0, CU_MEMORYTYPE_DEVICE, NULL, srcDevice, ByteCount,
                            &fk_taken_));
    return dtoh(dstHost, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyDtoDAsync);
    FK_COPY_PRELUDE(hStream);
    FK_CAPTURED(fk_cap_copy(hStream, CU_MEMORYTYPE_DEVICE, NULL, dstDevice, CU_MEMORYTYPE_DEVICE, NULL, srcDevice,
                            ByteCount, &fk_taken_));
    return dtod(dstDevice, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream) {
    FK_ENTER(cuMemcpyPeerAsync);
    FK_COPY_PRELUDE(hStream);
    if (!valid_ctx(dstContext) || !valid_ctx(srcContext)) return CUDA_ERROR_INVALID_CONTEXT;
    FK_CAPTURED(fk_cap_copy(hStream, CU_MEMORYTYPE_DEVICE, NULL, dstDevice, CU_MEMORYTYPE_DEVICE, NULL, srcDevice,
                            ByteCount, &fk_taken_));
    return dtod(dstDevice, srcDevice, ByteCount);
}

/* Address of (x, y, z) for one side of a 2D/3D copy; NULL when the side is unusable. */
unsigned char *side_addr(CUmemorytype t, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z,
                                size_t pitch, size_t height, size_t width, size_t rows, size_t depth, int *err) {
    unsigned char *base;
    size_t last;
    if (t == CU_MEMORYTYPE_HOST) base = (unsigned char *)host;
    else if (t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED) base = (unsigned char *)(uintptr_t)dev;
    else { *err = 1; return NULL; }
    if (!base) { *err = 1; return NULL; }
    if (rows > 1 || depth > 1) {
        if (pitch < x + width) { *err = 1; return NULL; }
    }
    if (depth > 1 && height < y + rows) { *err = 1; return NULL; }
    last = ((z + depth - 1) * height + (y + rows - 1)) * pitch + x + width;
    if (t == CU_MEMORYTYPE_DEVICE) {
        size_t first = (z * height + y) * pitch + x;
        if (!dev_range_ok((uintptr_t)base + first, last - first)) { *err = 1; return NULL; }
    }
    return base;
}

CUresult copy3d(CUmemorytype st, const void *sh, CUdeviceptr sd, size_t sx, size_t sy, size_t sz,
                       size_t sp, size_t shgt, CUmemorytype dt, void *dh, CUdeviceptr dd, size_t dx, size_t dy,
                       size_t dz, size_t dp, size_t dhgt, size_t w, size_t h, size_t d) {
    int err = 0;
    unsigned char *s, *t;
    size_t y, z;
    if (w == 0 || h == 0 || d == 0) return CUDA_SUCCESS;
    s = side_addr(st, sh, sd, sx, sy, sz, sp, shgt, w, h, d, &err);
    t = side_addr(dt, dh, dd, dx, dy, dz, dp, dhgt, w, h, d, &err);
    if (err) return CUDA_ERROR_INVALID_VALUE;
    for (z = 0; z < d; z++)
        for (y = 0; y < h; y++)
            memmove(t + ((dz + z) * dhgt + dy + y) * dp + dx, s + ((sz + z) * shgt + sy + y) * sp + sx, w);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream hStream) {
    FK_ENTER(cuMemcpy2DAsync);
    FK_COPY_PRELUDE(hStream);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    {
        CUDA_MEMCPY3D m;
        memset(&m, 0, sizeof(m));
        m.srcXInBytes = c->srcXInBytes; m.srcY = c->srcY; m.srcMemoryType = c->srcMemoryType;
        m.srcHost = c->srcHost; m.srcDevice = c->srcDevice; m.srcPitch = c->srcPitch; m.srcHeight = c->Height;
        m.dstXInBytes = c->dstXInBytes; m.dstY = c->dstY; m.dstMemoryType = c->dstMemoryType;
        m.dstHost = c->dstHost; m.dstDevice = c->dstDevice; m.dstPitch = c->dstPitch; m.dstHeight = c->Height;
        m.WidthInBytes = c->WidthInBytes; m.Height = c->Height; m.Depth = 1;
        FK_CAPTURED(fk_cap_copy3d(hStream, &m, &fk_taken_));
    }
    return copy3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, 0, c->srcPitch, 0,
                  c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, 0, c->dstPitch, 0,
                  c->WidthInBytes, c->Height, 1);
}

CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D *c, CUstream hStream) {
    size_t sh, dh;
    FK_ENTER(cuMemcpy3DAsync);
    FK_COPY_PRELUDE(hStream);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    if (c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1) return CUDA_ERROR_INVALID_VALUE;
    FK_CAPTURED(fk_cap_copy3d(hStream, c, &fk_taken_));
    sh = c->srcHeight;
    dh = c->dstHeight;
    return copy3d(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, sh,
                  c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch, dh,
                  c->WidthInBytes, c->Height, c->Depth);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    FK_ENTER(cuMemsetD8Async);
    FK_COPY_PRELUDE(hStream);
    if (!dev_range_ok((uintptr_t)dstDevice, N)) return CUDA_ERROR_INVALID_VALUE;
    FK_CAPTURED(fk_cap_memset(hStream, dstDevice, uc, 1, N, &fk_taken_));
    if (N) memset((void *)(uintptr_t)dstDevice, uc, N);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream) {
    size_t i;
    FK_ENTER(cuMemsetD16Async);
    FK_COPY_PRELUDE(hStream);
    if ((dstDevice & 1) || N * 2 / 2 != N || !dev_range_ok((uintptr_t)dstDevice, N * 2)) return CUDA_ERROR_INVALID_VALUE;
    FK_CAPTURED(fk_cap_memset(hStream, dstDevice, us, 2, N, &fk_taken_));
    for (i = 0; i < N; i++) ((unsigned short *)(uintptr_t)dstDevice)[i] = us;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    size_t i;
    FK_ENTER(cuMemsetD32Async);
    FK_COPY_PRELUDE(hStream);
    if ((dstDevice & 3) || N * 4 / 4 != N || !dev_range_ok((uintptr_t)dstDevice, N * 4)) return CUDA_ERROR_INVALID_VALUE;
    FK_CAPTURED(fk_cap_memset(hStream, dstDevice, ui, 4, N, &fk_taken_));
    for (i = 0; i < N; i++) ((unsigned int *)(uintptr_t)dstDevice)[i] = ui;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------- pools */
int valid_pool(CUmemoryPool p) {
    int d;
    for (d = 0; d < g_ndev; d++)
        if (p == &g_dev[d].default_pool) return 1;
    return vec_has(&g_pools, p);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    FK_ENTER(cuMemAllocAsync);
    FK_NEED_CTX(c);
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    FK_CAPTURED(fk_cap_alloc(hStream, dptr, bytesize, c->dev, &g_dev[c->dev].default_pool, &fk_taken_));
    return do_alloc(dptr, bytesize, MK_DEVICE, c->dev, &g_dev[c->dev].default_pool, 0);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    FK_ENTER(cuMemFreeAsync);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    FK_CAPTURED(fk_cap_free(hStream, dptr, &fk_taken_));
    pend_check_free(dptr, hStream, 0);
    return do_free(dptr, 0);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    FK_ENTER(cuMemAllocFromPoolAsync);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (!valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    FK_CAPTURED(fk_cap_alloc(hStream, dptr, bytesize, pool->dev, pool, &fk_taken_));
    return do_alloc(dptr, bytesize, MK_DEVICE, pool->dev, pool, 0);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
    struct CUmemPoolHandle_st *p;
    FK_ENTER(cuMemPoolCreate);
    if (!pool || !poolProps) return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_dev(poolProps->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    p = calloc(1, sizeof(*p));
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->magic = 0x900Lu;
    p->live = 1;
    p->dev = poolProps->location.id;
    p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
    if (vec_add(&g_pools, p)) { free(p); return CUDA_ERROR_OUT_OF_MEMORY; }
    *pool = p;
    return CUDA_SUCCESS;
}

/* Destroyed pools are never freed: allocations still made from them keep a pointer. */
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
    FK_ENTER(cuMemPoolDestroy);
    if (!vec_has(&g_pools, pool)) return CUDA_ERROR_INVALID_VALUE;
    vec_remove(&g_pools, pool);
    pool->live = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    FK_ENTER(cuMemPoolTrimTo);
    if (!valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    pool_trim(pool, minBytesToKeep);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER(cuMemPoolSetAttribute);
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        pool->reuse[attr] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->threshold = *(unsigned long long *)value; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(unsigned long long *)value != 0) return CUDA_ERROR_INVALID_VALUE;
        pool->reserved_high = pool->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(unsigned long long *)value != 0) return CUDA_ERROR_INVALID_VALUE;
        pool->used_high = pool->used;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    FK_ENTER(cuMemPoolGetAttribute);
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    switch ((int)attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = pool->reuse[attr];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(unsigned long long *)value = pool->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(unsigned long long *)value = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(unsigned long long *)value = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(unsigned long long *)value = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(unsigned long long *)value = pool->used_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
    FK_ENTER(cuDeviceGetDefaultMemPool);
    if (!pool_out) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_dev(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *pool_out = &g_dev[dev].default_pool;
    return CUDA_SUCCESS;
}

int valid_location(CUmemLocation loc) {
    if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) return valid_dev(loc.id);
    return loc.type == CU_MEM_LOCATION_TYPE_HOST || loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
           loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

int managed_range(CUdeviceptr p, size_t n) {
    fk_alloc *a = find_alloc((uintptr_t)p);
    return a && a->kind == MK_MANAGED && n <= a->size - ((uintptr_t)p - a->base);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                    CUstream hStream) {
    FK_ENTER(cuMemPrefetchAsync);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0 || count == 0 || !valid_location(location) || !managed_range(devPtr, count))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
    FK_ENTER(cuMemAdvise);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if ((int)advice < CU_MEM_ADVISE_SET_READ_MOSTLY || (int)advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    if (count == 0 || !managed_range(devPtr, count)) return CUDA_ERROR_INVALID_VALUE;
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
        !valid_location(location))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
