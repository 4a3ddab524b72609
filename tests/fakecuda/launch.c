/*
 * launch.c -- driver double (tests/fakecuda/): occupancy and kernel launches (validation and recording).
 */
#include "fake_internal.h"

/* ---------------------------------------------------------------- occupancy */

void get_occ_info(const struct CUfunc_st *f, occ_info *o) {
    const int *a = g_dev[f->mod->ctx->dev].attrs;
    o->max_threads = f->max_threads;
    o->static_smem = f->static_smem;
    o->max_dyn = f->max_dyn_smem;
    o->sms = a[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
    o->max_blocks_sm = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR];
    o->threads_sm = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR];
    o->smem_sm = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR];
    o->regs_sm = a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR];
    o->optin = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN];
}

int occ_blocks(const occ_info *o, int block, size_t dyn) {
    int warps_threads, by_threads, by_regs, by_smem, n;
    size_t smem;
    if (block <= 0 || block > o->max_threads) return 0;
    warps_threads = (block + 31) / 32 * 32;
    by_threads = o->threads_sm / warps_threads;
    by_regs = o->regs_sm / (warps_threads * 32);
    smem = (size_t)o->static_smem + dyn + FK_RESERVED_SMEM;
    by_smem = (int)((size_t)o->smem_sm / smem);
    n = o->max_blocks_sm;
    if (by_threads < n) n = by_threads;
    if (by_regs < n) n = by_regs;
    if (by_smem < n) n = by_smem;
    return n;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                             size_t dynamicSMemSize) {
    occ_info o;
    FK_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
    if (!numBlocks || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_funcs, func)) return CUDA_ERROR_INVALID_HANDLE;
    get_occ_info(func, &o);
    *numBlocks = occ_blocks(&o, blockSize, dynamicSMemSize);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
    occ_info o;
    int b, best_b = 0, best_occ = 0, best_blocks = 0, limit;
    {
        FK_ENTER(cuOccupancyMaxPotentialBlockSize);
        if (!minGridSize || !blockSize) return CUDA_ERROR_INVALID_VALUE;
        if (!vec_has(&g_funcs, func)) return CUDA_ERROR_INVALID_HANDLE;
        get_occ_info(func, &o);
    }
    /* outside the lock: the callback may be anything */
    limit = o.max_threads;
    if (blockSizeLimit > 0 && blockSizeLimit < limit) limit = blockSizeLimit;
    for (b = (limit / 32) * 32; b >= 32; b -= 32) {
        size_t dyn = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(b) : dynamicSMemSize;
        int n = occ_blocks(&o, b, dyn);
        if (n * b > best_occ) {
            best_occ = n * b;
            best_b = b;
            best_blocks = n;
        }
    }
    if (!best_b) {
        *blockSize = 0;
        *minGridSize = 0;
        return CUDA_SUCCESS;
    }
    *blockSize = best_b;
    *minGridSize = best_blocks * o.sms;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                         int blockSize) {
    occ_info o;
    long long per;
    FK_ENTER(cuOccupancyAvailableDynamicSMemPerBlock);
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_funcs, func)) return CUDA_ERROR_INVALID_HANDLE;
    get_occ_info(func, &o);
    if (blockSize > o.max_threads) return CUDA_ERROR_INVALID_VALUE;
    per = (long long)o.smem_sm / numBlocks - FK_RESERVED_SMEM - o.static_smem;
    if (per > o.optin - o.static_smem) per = o.optin - o.static_smem;
    if (per < 0) per = 0;
    *dynamicSmemSize = (size_t)per;
    return CUDA_SUCCESS;
}

int cluster_size_of(const CUlaunchConfig *cfg, unsigned int dims[3]) {
    unsigned int i;
    dims[0] = dims[1] = dims[2] = 1;
    for (i = 0; i < cfg->numAttrs; i++)
        if (cfg->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            dims[0] = cfg->attrs[i].value.clusterDim.x;
            dims[1] = cfg->attrs[i].value.clusterDim.y;
            dims[2] = cfg->attrs[i].value.clusterDim.z;
            return 1;
        }
    return 0;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config) {
    occ_info o;
    unsigned int cd[3];
    unsigned long long csize, block;
    int per_sm;
    FK_ENTER(cuOccupancyMaxActiveClusters);
    if (!numClusters || !config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_funcs, func)) return CUDA_ERROR_INVALID_HANDLE;
    get_occ_info(func, &o);
    cluster_size_of(config, cd);
    csize = (unsigned long long)cd[0] * cd[1] * cd[2];
    if (csize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (csize > (func->non_portable_cluster ? 16u : 8u)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    block = (unsigned long long)config->blockDimX * config->blockDimY * config->blockDimZ;
    per_sm = occ_blocks(&o, (int)block, config->sharedMemBytes);
    *numClusters = (int)((unsigned long long)o.sms * (unsigned long long)per_sm / csize);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ launch */

CUresult do_launch(CUfunction f, const launch_req *r, void **kernelParams, void **extra) {
    const int *a;
    unsigned long long threads;
    unsigned char *buf = NULL;
    int used_extra = 0, i;
    fk_launch *rec;
    CUcontext c = cur_ctx();
    if (!c) return fk_reject(CUDA_ERROR_INVALID_CONTEXT, "no current context");
    if (!vec_has(&g_funcs, f)) return fk_reject(CUDA_ERROR_INVALID_HANDLE, "unknown function handle");
    if (f->mod->ctx != c) return fk_reject(CUDA_ERROR_INVALID_CONTEXT, "function belongs to another context");
    if (!valid_stream(r->stream)) return fk_reject(CUDA_ERROR_INVALID_HANDLE, "unknown stream handle");
    a = g_dev[c->dev].attrs;
    for (i = 0; i < 3; i++) {
        if (r->grid[i] == 0 || r->grid[i] > (unsigned int)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i])
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "grid dim %d = %u out of range", i, r->grid[i]);
        if (r->block[i] == 0 || r->block[i] > (unsigned int)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i])
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "block dim %d = %u out of range", i, r->block[i]);
    }
    threads = (unsigned long long)r->block[0] * r->block[1] * r->block[2];
    if (threads > (unsigned long long)f->max_threads ||
        threads > (unsigned long long)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK])
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "%llu threads per block > %d", threads, f->max_threads);
    if (r->shared > (unsigned int)f->max_dyn_smem)
        return fk_reject(CUDA_ERROR_INVALID_VALUE, "%u bytes of dynamic shared memory > %d", r->shared, f->max_dyn_smem);
    if (r->has_cluster) {
        unsigned long long cs = (unsigned long long)r->cluster[0] * r->cluster[1] * r->cluster[2];
        if (cs == 0 || cs > (f->non_portable_cluster ? 16u : 8u))
            return fk_reject(CUDA_ERROR_INVALID_CLUSTER_SIZE, "cluster size %llu", cs);
        for (i = 0; i < 3; i++)
            if (r->grid[i] % r->cluster[i]) return fk_reject(CUDA_ERROR_INVALID_CLUSTER_SIZE, "grid not divisible by cluster");
    }
    if (r->cooperative) {
        occ_info o;
        get_occ_info(f, &o);
        if ((unsigned long long)r->grid[0] * r->grid[1] * r->grid[2] >
            (unsigned long long)occ_blocks(&o, (int)threads, r->shared) * (unsigned long long)o.sms)
            return fk_reject(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "cooperative grid too large");
    }
    if (kernelParams && extra) return fk_reject(CUDA_ERROR_INVALID_VALUE, "both kernelParams and extra");
    if (f->param_bytes) {
        buf = calloc(1, f->param_bytes);
        if (!buf) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (extra) {
        void *pbuf = NULL;
        size_t *psize = NULL;
        int k;
        for (k = 0; extra[k] != NULL; k += 2) {
            if (extra[k] == (void *)1) pbuf = extra[k + 1];
            else if (extra[k] == (void *)2) psize = (size_t *)extra[k + 1];
            else { free(buf); return fk_reject(CUDA_ERROR_INVALID_VALUE, "unknown extra key"); }
            if (k > 64) { free(buf); return fk_reject(CUDA_ERROR_INVALID_VALUE, "extra not terminated"); }
        }
        if (f->param_bytes && (!pbuf || !psize || *psize < f->param_bytes)) {
            free(buf);
            return fk_reject(CUDA_ERROR_INVALID_VALUE, "extra buffer missing or smaller than %zu bytes", f->param_bytes);
        }
        if (f->param_bytes) memcpy(buf, pbuf, f->param_bytes);
        used_extra = 1;
    } else if (f->nparams) {
        if (!kernelParams) { free(buf); return fk_reject(CUDA_ERROR_INVALID_VALUE, "kernelParams is NULL for %d parameters", f->nparams); }
        for (i = 0; i < f->nparams; i++) {
            if (!kernelParams[i]) { free(buf); return fk_reject(CUDA_ERROR_INVALID_VALUE, "kernelParams[%d] is NULL", i); }
            memcpy(buf + f->params[i].offset, kernelParams[i], f->params[i].size);
        }
    }
    {
        int taken = 0;
        CUresult crc = fk_cap_kernel(f, r, buf, &taken);   /* a capturing stream records a node */
        if (taken) {
            if (crc) free(buf);
            return crc;
        }
    }
    rec = &g_ring[g_launch_count % FK_RING];
    free(rec->params);
    memset(rec, 0, sizeof(*rec));
    memcpy(rec->name, f->name, sizeof(rec->name));
    memcpy(rec->grid, r->grid, sizeof(rec->grid));
    memcpy(rec->block, r->block, sizeof(rec->block));
    rec->shared = r->shared;
    rec->stream = r->stream;
    rec->kind = r->kind;
    memcpy(rec->cluster, r->cluster, sizeof(rec->cluster));
    rec->cooperative = r->cooperative;
    rec->priority = r->priority;
    rec->prog_serial = r->prog_serial;
    rec->num_attrs = r->num_attrs;
    rec->used_extra = used_extra;
    rec->params = buf;
    rec->nparams_bytes = f->param_bytes;
    g_launch_count++;
    if (g_pending_mode) pend_add_launch(r->stream, buf, f->param_bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra) {
    launch_req r = {0, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                    {1, 1, 1}, 0, 0, 0, 0, 0};
    FK_ENTER(cuLaunchKernel);
    return do_launch(f, &r, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void **kernelParams) {
    launch_req r = {1, {gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes, hStream,
                    {1, 1, 1}, 1, 0, 0, 0, 0};
    FK_ENTER(cuLaunchCooperativeKernel);
    return do_launch(f, &r, kernelParams, NULL);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
    launch_req r;
    unsigned int i;
    FK_ENTER(cuLaunchKernelEx);
    if (!config || (config->numAttrs && !config->attrs)) return fk_reject(CUDA_ERROR_INVALID_VALUE, "config or attrs NULL");
    memset(&r, 0, sizeof(r));
    r.kind = 2;
    r.grid[0] = config->gridDimX;
    r.grid[1] = config->gridDimY;
    r.grid[2] = config->gridDimZ;
    r.block[0] = config->blockDimX;
    r.block[1] = config->blockDimY;
    r.block[2] = config->blockDimZ;
    r.shared = config->sharedMemBytes;
    r.stream = config->hStream;
    r.cluster[0] = r.cluster[1] = r.cluster[2] = 1;
    r.num_attrs = (int)config->numAttrs;
    for (i = 0; i < config->numAttrs; i++) {
        const CUlaunchAttribute *at = &config->attrs[i];
        switch ((int)at->id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE: break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: r.cooperative = at->value.cooperative != 0; break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            r.has_cluster = 1;
            r.cluster[0] = at->value.clusterDim.x;
            r.cluster[1] = at->value.clusterDim.y;
            r.cluster[2] = at->value.clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY: r.priority = at->value.priority; break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            r.prog_serial = at->value.programmaticStreamSerializationAllowed;
            break;
        default:
            if ((int)at->id < 0 || (int)at->id > 32) return fk_reject(CUDA_ERROR_INVALID_VALUE, "launch attribute id %d", (int)at->id);
        }
    }
    return do_launch(f, &r, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
    {
        FK_ENTER(cuLaunchHostFunc);
        if (!fn) return CUDA_ERROR_INVALID_VALUE;
        if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
        if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
        FK_CAPTURED(fk_cap_host(hStream, fn, userData, &fk_taken_));
    }
    /* outside the lock: the callback may take the GIL */
    fn(userData);
    return CUDA_SUCCESS;
}
