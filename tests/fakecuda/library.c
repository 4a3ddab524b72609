/*
 * library.c -- driver double (tests/fakecuda/): the driver's linker (cuLink*) and
 * context-independent libraries (cuLibraryLoadData, cuLibraryGetKernel,
 * cuKernelGetFunction, cuLibraryUnload).
 *
 * A library is a module of the double loaded into the context current at load time,
 * or device 0's primary context when none is (a real library needs no context); it
 * counts as a live "module", and loading it also counts one cuModuleLoadDataEx call;
 * its kernels are that module's functions, so cuKernelGetFunction is the identity.
 * The linker is not simulated: cuLinkCreate reports CUDA_ERROR_NOT_SUPPORTED, and the
 * other cuLink* entry points reject every state they are given.
 */
#include "fake_internal.h"

CUresult CUDAAPI cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
                              CUlinkState *stateOut) {
    FK_ENTER(cuLinkCreate);
    (void)numOptions; (void)options; (void)optionValues;
    if (!stateOut) return CUDA_ERROR_INVALID_VALUE;
    *stateOut = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
                               unsigned int numOptions, CUjit_option *options, void **optionValues) {
    FK_ENTER(cuLinkAddData);
    (void)state; (void)type; (void)data; (void)size; (void)name; (void)numOptions; (void)options;
    (void)optionValues;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut) {
    FK_ENTER(cuLinkComplete);
    (void)state; (void)cubinOut; (void)sizeOut;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
    FK_ENTER(cuLinkDestroy);
    (void)state;
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions) {
    CUmodule m = NULL;
    CUresult rc;
    CUcontext saved;
    FK_ENTER(cuLibraryLoadData);
    (void)libraryOptions; (void)libraryOptionValues;
    if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
    if (numLibraryOptions) return CUDA_ERROR_INVALID_VALUE;   /* barecuda passes none */
    saved = tls_ctx;
    if (!cur_ctx()) tls_ctx = &g_dev[0].ctx;
    rc = cuModuleLoadDataEx(&m, code, numJitOptions, jitOptions, jitOptionsValues);
    tls_ctx = saved;
    if (rc != CUDA_SUCCESS) return rc;
    *library = (CUlibrary)(void *)m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
    FK_ENTER(cuLibraryUnload);
    return cuModuleUnload((CUmodule)(void *)library);
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    CUfunction f = NULL;
    CUresult rc;
    FK_ENTER(cuLibraryGetKernel);
    if (!pKernel) return CUDA_ERROR_INVALID_VALUE;
    rc = cuModuleGetFunction(&f, (CUmodule)(void *)library, name);
    if (rc != CUDA_SUCCESS) return rc;
    *pKernel = (CUkernel)(void *)f;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    FK_ENTER(cuKernelGetFunction);
    if (!pFunc || !kernel) return CUDA_ERROR_INVALID_VALUE;
    *pFunc = (CUfunction)(void *)kernel;
    return CUDA_SUCCESS;
}
