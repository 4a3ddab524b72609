/*
 * module.c -- driver double (tests/fakecuda/): module loading (PTX text, ELF cubins and fatbin containers), functions, globals,
 * function attributes.
 */
#include "fake_internal.h"

void free_module(struct CUmod_st *m) {
    int i;
    if (!m) return;
    for (i = 0; i < m->nfuncs; i++) free(m->funcs[i].params);
    free(m->funcs);
    for (i = 0; i < m->nglobals; i++) free(m->globals[i].data);
    free(m->globals);
    free(m);
}
/* ---------------------------------------------------------------- modules */
void write_log(void *buf, void **size_slot, const char *msg) {
    size_t cap, n;
    if (!buf || !size_slot) return;
    cap = (size_t)(uintptr_t)*size_slot;
    if (cap == 0) return;
    n = strlen(msg);
    if (n > cap - 1) n = cap - 1;
    memcpy(buf, msg, n);
    ((char *)buf)[n] = 0;
    *size_slot = (void *)(uintptr_t)n; /* the driver writes back how much it filled */
}

/* ------------------------------------------------------------- image formats
 * The double reads the containers the real driver reads, by their real magic
 * numbers, so production code needs no knowledge of it:
 *   - ELF (cubin): "\x7fELF", ELF64 little-endian, e_machine EM_CUDA (190). Kernels do
 *     not run here, so instead of SASS the double reads the PTX-like text of a section
 *     named ".nv.fakecuda.ptx" (tests/ptx/__init__.py builds such images); an ELF
 *     without it is a cubin for a real GPU: CUDA_ERROR_NO_BINARY_FOR_GPU.
 *   - fatbin: a little-endian u32 0xBA55ED50, u16 version, u16 header size, u64 size of
 *     the entries; each entry: u16 kind (1 PTX, 2 ELF), u16, u32 entry header size,
 *     u64 payload size, then the payload after the entry header. The first ELF entry
 *     is used, else the first PTX entry. Compressed entries are not supported.
 * Sizes are checked against generous limits only: like cuModuleLoadData, the double
 * is handed a pointer without a length. */
#define FK_IMAGE_MAX ((uint64_t)1 << 30)
#define FK_EM_CUDA 190
#define FK_FATBIN_MAGIC 0xBA55ED50u

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const unsigned char *p) { return (uint32_t)rd16(p) | ((uint32_t)rd16(p + 2) << 16); }
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static char *dup_text(const unsigned char *p, uint64_t n) {
    char *s;
    if (n > FK_IMAGE_MAX) return NULL;
    s = malloc((size_t)n + 1);
    if (!s) return NULL;
    memcpy(s, p, (size_t)n);
    s[n] = 0;
    return s;
}

/* The PTX-like text of an ELF image (malloc'd), or NULL with *rc and why set. */
static char *elf_text(const unsigned char *e, CUresult *rc, const char **why) {
    uint64_t shoff;
    unsigned shentsize, shnum, shstrndx, i;
    const unsigned char *strtab_sh;
    uint64_t stroff, strsize;
    *rc = CUDA_ERROR_INVALID_IMAGE;
    if (e[4] != 2 || e[5] != 1) { *why = "fakecuda: ELF image is not ELF64 little-endian"; return NULL; }
    if (rd16(e + 18) != FK_EM_CUDA) { *why = "fakecuda: ELF image is not for EM_CUDA"; return NULL; }
    shoff = rd64(e + 40);
    shentsize = rd16(e + 58);
    shnum = rd16(e + 60);
    shstrndx = rd16(e + 62);
    if (shentsize != 64 || shnum == 0 || shstrndx >= shnum || shoff > FK_IMAGE_MAX) {
        *why = "fakecuda: ELF image has a malformed section header table";
        return NULL;
    }
    strtab_sh = e + shoff + (uint64_t)shstrndx * 64;
    stroff = rd64(strtab_sh + 24);
    strsize = rd64(strtab_sh + 32);
    if (stroff > FK_IMAGE_MAX || strsize > FK_IMAGE_MAX) { *why = "fakecuda: ELF string table out of range"; return NULL; }
    for (i = 0; i < shnum; i++) {
        const unsigned char *sh = e + shoff + (uint64_t)i * 64;
        uint32_t name = rd32(sh);
        uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
        static const char want[] = ".nv.fakecuda.ptx";
        if (name + sizeof(want) > strsize) continue;
        if (memcmp(e + stroff + name, want, sizeof(want)) != 0) continue;
        if (off > FK_IMAGE_MAX || size > FK_IMAGE_MAX) break;
        {
            char *s = dup_text(e + off, size);
            if (!s) { *rc = CUDA_ERROR_OUT_OF_MEMORY; *why = "fakecuda: out of memory"; }
            return s;
        }
    }
    *rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
    *why = "fakecuda: ELF image has no .nv.fakecuda.ptx section (a cubin for a real GPU)";
    return NULL;
}

/* The text to parse for `image`: *owned is set (to free) for ELF/fatbin images. */
static const char *image_text(const void *image, char **owned, CUresult *rc, const char **why) {
    const unsigned char *b = (const unsigned char *)image;
    const char *text = (const char *)image;
    *owned = NULL;
    *rc = CUDA_ERROR_INVALID_IMAGE;
    if (memcmp(b, "\x7f" "ELF", 4) == 0) {
        *owned = elf_text(b, rc, why);
        return *owned;
    }
    if (rd32(b) == FK_FATBIN_MAGIC) {
        unsigned hsize = rd16(b + 6);
        uint64_t total = rd64(b + 8), pos = hsize;
        const unsigned char *ptx = NULL;
        uint64_t ptx_size = 0;
        if (hsize < 16 || total > FK_IMAGE_MAX) { *why = "fakecuda: malformed fatbin header"; return NULL; }
        while (pos + 16 <= hsize + total) {
            const unsigned char *ent = b + pos;
            unsigned kind = rd16(ent);
            uint32_t ehsize = rd32(ent + 4);
            uint64_t psize = rd64(ent + 8);
            if (ehsize < 16 || psize > FK_IMAGE_MAX || pos + ehsize + psize > hsize + total) {
                *why = "fakecuda: malformed fatbin entry";
                return NULL;
            }
            if (kind == 2) {
                *owned = elf_text(ent + ehsize, rc, why);
                return *owned;
            }
            if (kind == 1 && !ptx) {
                ptx = ent + ehsize;
                ptx_size = psize;
            }
            pos += ehsize + psize;
        }
        if (!ptx) {
            *rc = CUDA_ERROR_NO_BINARY_FOR_GPU;
            *why = "fakecuda: fatbin holds neither an ELF nor a PTX entry";
            return NULL;
        }
        *owned = dup_text(ptx, ptx_size);
        if (!*owned) { *rc = CUDA_ERROR_OUT_OF_MEMORY; *why = "fakecuda: out of memory"; }
        return *owned;
    }
    {
        /* PTX: optional whitespace/comments, then a directive; .version or .entry somewhere. */
        const char *p = text;
        for (;;) {
            while (*p && isspace((unsigned char)*p)) p++;
            if (p[0] == '/' && p[1] == '/') { while (*p && *p != '\n') p++; continue; }
            if (p[0] == '/' && p[1] == '*') { const char *e = strstr(p + 2, "*/"); p = e ? e + 2 : p + strlen(p); continue; }
            break;
        }
        if (*p != '.' || (!strstr(p, ".version") && !strstr(p, ".entry"))) {
            *why = "fakecuda: image is neither PTX, an ELF cubin nor a fatbin";
            return NULL;
        }
    }
    return text;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues) {
    void *info_buf = NULL, *err_buf = NULL;
    void **info_size = NULL, **err_size = NULL;
    float *wall = NULL;
    unsigned int k;
    const char *text;
    struct CUmod_st *m;
    parse_ctx pc;
    CUresult rc;
    char msg[700];
    char *owned = NULL;
    const char *why = "";
    double t0 = now_ms();
    FK_ENTER(cuModuleLoadDataEx);
    FK_NEED_CTX(c);
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    if (numOptions && (!options || !optionValues)) return CUDA_ERROR_INVALID_VALUE;
    for (k = 0; k < numOptions; k++) {
        switch ((int)options[k]) {
        case CU_JIT_INFO_LOG_BUFFER: info_buf = optionValues[k]; break;
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: info_size = &optionValues[k]; break;
        case CU_JIT_ERROR_LOG_BUFFER: err_buf = optionValues[k]; break;
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: err_size = &optionValues[k]; break;
        case CU_JIT_WALL_TIME: wall = (float *)&optionValues[k]; break;
        default:
            if ((int)options[k] < 0 || (int)options[k] >= CU_JIT_NUM_OPTIONS) return CUDA_ERROR_INVALID_VALUE;
        }
    }
    text = image_text(image, &owned, &rc, &why);
    if (!text) {
        write_log(err_buf, err_size, why);
        return rc;
    }
    m = calloc(1, sizeof(*m));
    if (!m) {
        free(owned);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = 0x30D0u;
    m->ctx = c;
    memset(&pc, 0, sizeof(pc));
    rc = parse_module(text, m, &pc);
    free(owned);
    if (rc != CUDA_SUCCESS) {
        snprintf(msg, sizeof(msg), "%s", pc.err);
        write_log(err_buf, err_size, msg);
        write_log(info_buf, info_size, "fakecuda: compilation failed, see the error log");
        free_module(m);
        return rc;
    }
    {
        int i;
        for (i = 0; i < m->nfuncs; i++) vec_add(&g_funcs, &m->funcs[i]);
        for (i = 0; i < m->nglobals; i++) {
            fk_alloc *a = add_alloc();
            if (!a) break;
            a->base = (uintptr_t)m->globals[i].data;
            a->size = m->globals[i].size;
            a->kind = MK_GLOBAL;
            a->dev = c->dev;
        }
    }
    vec_add(&g_modules, m);
    snprintf(msg, sizeof(msg), "info    : fakecuda: loaded %d entry function(s), %d global(s) for sm_90",
             m->nfuncs, m->nglobals);
    write_log(info_buf, info_size, msg);
    write_log(err_buf, err_size, "");
    if (wall) *wall = (float)(now_ms() - t0);
    *module = m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
    int i;
    FK_ENTER(cuModuleUnload);
    if (!vec_has(&g_modules, hmod)) return CUDA_ERROR_INVALID_HANDLE;
    for (i = 0; i < hmod->nfuncs; i++) vec_remove(&g_funcs, &hmod->funcs[i]);
    for (i = 0; i < hmod->nglobals; i++) {
        fk_alloc *a = find_alloc_exact((uintptr_t)hmod->globals[i].data);
        if (a && a->kind == MK_GLOBAL) remove_alloc(a);
    }
    vec_remove(&g_modules, hmod);
    free_module(hmod);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    int i;
    FK_ENTER(cuModuleGetFunction);
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_modules, hmod)) return CUDA_ERROR_INVALID_HANDLE;
    for (i = 0; i < hmod->nfuncs; i++)
        if (strcmp(hmod->funcs[i].name, name) == 0) {
            *hfunc = &hmod->funcs[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name) {
    int i;
    FK_ENTER(cuModuleGetGlobal);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_modules, hmod)) return CUDA_ERROR_INVALID_HANDLE;
    for (i = 0; i < hmod->nglobals; i++)
        if (strcmp(hmod->globals[i].name, name) == 0) {
            if (dptr) *dptr = (CUdeviceptr)(uintptr_t)hmod->globals[i].data;
            if (bytes) *bytes = hmod->globals[i].size;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

int optin_limit(const struct CUfunc_st *f) {
    return g_dev[f->mod->ctx->dev].attrs[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] - f->static_smem;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
    FK_ENTER(cuFuncGetAttribute);
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_funcs, hfunc)) return CUDA_ERROR_INVALID_HANDLE;
    switch ((int)attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = hfunc->max_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = hfunc->static_smem; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = hfunc->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = hfunc->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *pi = hfunc->cluster[0]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *pi = hfunc->cluster[1]; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = hfunc->cluster[2]; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = hfunc->non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = hfunc->cluster_policy; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
    FK_ENTER(cuFuncSetAttribute);
    if (!vec_has(&g_funcs, hfunc)) return CUDA_ERROR_INVALID_HANDLE;
    switch ((int)attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > optin_limit(hfunc)) return CUDA_ERROR_INVALID_VALUE;
        hfunc->max_dyn_smem = value;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
        hfunc->carveout = value;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (value < 0) return CUDA_ERROR_INVALID_VALUE;
        hfunc->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        if (value != 0 && value != 1) return CUDA_ERROR_INVALID_VALUE;
        hfunc->non_portable_cluster = value;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (value < 0 || value > 2) return CUDA_ERROR_INVALID_VALUE;
        hfunc->cluster_policy = value;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize) {
    FK_ENTER(cuFuncGetParamInfo);
    if (!vec_has(&g_funcs, func)) return CUDA_ERROR_INVALID_HANDLE;
    if (paramIndex >= (size_t)func->nparams) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset) *paramOffset = func->params[paramIndex].offset;
    if (paramSize) *paramSize = func->params[paramIndex].size;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc) {
    FK_ENTER(cuFuncGetName);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_funcs, hfunc)) return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name;
    return CUDA_SUCCESS;
}

/* ---- launch: a module's kernel names (cuModuleGetFunctionCount, cuModuleEnumerateFunctions), so C++ kernels of cubins can be found by their plain name. */
CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int *count, CUmodule mod) {
    FK_ENTER(cuModuleGetFunctionCount);
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_modules, mod)) return CUDA_ERROR_INVALID_HANDLE;
    *count = (unsigned int)mod->nfuncs;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions, CUmodule mod) {
    unsigned int i;
    FK_ENTER(cuModuleEnumerateFunctions);
    if (!functions) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_modules, mod)) return CUDA_ERROR_INVALID_HANDLE;
    for (i = 0; i < numFunctions && (int)i < mod->nfuncs; i++) functions[i] = &mod->funcs[i];
    return CUDA_SUCCESS;
}
