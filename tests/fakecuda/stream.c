/*
 * stream.c -- driver double (tests/fakecuda/): streams, host functions and events.
 */
#include "fake_internal.h"

/* ----------------------------------------------------------------- streams */
CUresult make_stream(CUstream *ph, unsigned int flags, int priority) {
    struct CUstream_st *s;
    FK_NEED_CTX(c);
    if (!ph) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    s = calloc(1, sizeof(*s));
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    if (priority < FK_PRIO_GREATEST) priority = FK_PRIO_GREATEST;
    if (priority > FK_PRIO_LEAST) priority = FK_PRIO_LEAST;
    s->magic = 0x57EAu;
    s->flags = flags;
    s->priority = priority;
    s->ctx = c;
    if (vec_add(&g_streams, s)) { free(s); return CUDA_ERROR_OUT_OF_MEMORY; }
    *ph = s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags) {
    FK_ENTER(cuStreamCreate);
    return make_stream(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    FK_ENTER(cuStreamCreateWithPriority);
    return make_stream(phStream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream) {
    FK_ENTER(cuStreamDestroy);
    if (!vec_remove(&g_streams, hStream)) return CUDA_ERROR_INVALID_HANDLE;
    hStream->magic = 0xDEADu;
    free(hStream);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
    FK_ENTER(cuStreamSynchronize);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (fk_cap_forbid(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sync_point();
    pend_complete(hStream, ~0ULL, 0);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
    FK_ENTER(cuStreamQuery);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (fk_cap_forbid(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pend_complete(hStream, ~0ULL, 0);   /* reported idle: its pending work is done */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
    FK_ENTER(cuStreamWaitEvent);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (Flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream) || !vec_has(&g_events, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    (void)fk_cap_event_wait(hStream, hEvent);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority) {
    FK_ENTER(cuStreamGetPriority);
    if (!priority) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    *priority = vec_has(&g_streams, hStream) ? hStream->priority : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
    FK_ENTER(cuStreamGetFlags);
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    *flags = vec_has(&g_streams, hStream) ? hStream->flags : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
    FK_ENTER(cuStreamGetCtx);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (vec_has(&g_streams, hStream)) {
        *pctx = hStream->ctx;
    } else {
        FK_NEED_CTX(c);
        *pctx = c;
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ events */
CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags) {
    struct CUevent_st *e;
    FK_ENTER(cuEventCreate);
    FK_NEED_CTX(c);
    (void)c;
    if (!phEvent) return CUDA_ERROR_INVALID_VALUE;
    if (Flags & ~7u) return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    e = calloc(1, sizeof(*e));
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->magic = 0xE7E7u;
    e->flags = Flags;
    if (vec_add(&g_events, e)) { free(e); return CUDA_ERROR_OUT_OF_MEMORY; }
    *phEvent = e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent) {
    FK_ENTER(cuEventDestroy);
    if (!vec_remove(&g_events, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    hEvent->magic = 0xDEADu;
    free(hEvent);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    FK_ENTER(cuEventRecord);
    if (!cur_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    if (!vec_has(&g_events, hEvent) || !valid_stream(hStream)) return CUDA_ERROR_INVALID_HANDLE;
    if (fk_cap_event_record(hEvent, hStream)) return CUDA_SUCCESS;
    hEvent->recorded = 1;
    hEvent->t_ms = now_ms();
    hEvent->pend_stream = pend_norm(hStream);
    hEvent->pend_seq = g_pend_seq;
    hEvent->pend_polls = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
    FK_ENTER(cuEventQuery);
    if (!vec_has(&g_events, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    if (g_pending_mode && hEvent->recorded) {
        int i;
        for (i = 0; i < g_npend; i++)
            if (g_pend[i].stream == hEvent->pend_stream && g_pend[i].seq <= hEvent->pend_seq) break;
        if (i < g_npend) {
            /* Not ready at the first look; the work finishes before the next one (so that
             * polling loops end). Completion is recorded either way. */
            if (hEvent->pend_polls++ == 0) return CUDA_ERROR_NOT_READY;
            pend_complete(hEvent->pend_stream, hEvent->pend_seq, 0);
        }
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    FK_ENTER(cuEventSynchronize);
    if (!vec_has(&g_events, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    sync_point();
    if (hEvent->recorded) pend_complete(hEvent->pend_stream, hEvent->pend_seq, 0);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    FK_ENTER(cuEventElapsedTime);
    if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
    if (!vec_has(&g_events, hStart) || !vec_has(&g_events, hEnd)) return CUDA_ERROR_INVALID_HANDLE;
    if (!hStart->recorded || !hEnd->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    *pMilliseconds = (float)(hEnd->t_ms - hStart->t_ms);
    return CUDA_SUCCESS;
}
