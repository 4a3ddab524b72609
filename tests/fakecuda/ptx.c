/*
 * ptx.c -- driver double (tests/fakecuda/): the double's reader of PTX-like text: entry signatures (parameter layout as the CUDA ABI
 * lays it out), .global/.const variables, .maxntid and static .shared.
 */
#include "fake_internal.h"

/* ---------------------------------------------------------------- modules */

int tok_is(const tok *t, const char *s) {
    return (int)strlen(s) == t->n && memcmp(t->s, s, (size_t)t->n) == 0;
}

int tok_push(toks *ts, const char *s, int n) {
    if (ts->n == ts->cap) {
        int nc = ts->cap ? ts->cap * 2 : 64;
        tok *nt = realloc(ts->t, (size_t)nc * sizeof(tok));
        if (!nt) return -1;
        ts->t = nt;
        ts->cap = nc;
    }
    ts->t[ts->n].s = s;
    ts->t[ts->n].n = n;
    ts->n++;
    return 0;
}

/* Split text (comments already blanked) into words and single punctuation marks. */
int tokenize(const char *s, size_t len, toks *out) {
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c)) {
            i++;
        } else if (strchr("(),[]={};:<>+-*", c)) {
            if (tok_push(out, s + i, 1)) return -1;
            i++;
        } else {
            size_t j = i;
            while (j < len && !isspace((unsigned char)s[j]) && !strchr("(),[]={};:<>+*", s[j])) j++;
            if (tok_push(out, s + i, (int)(j - i))) return -1;
            i = j;
        }
    }
    return 0;
}

int type_size(const tok *t) {
    static const struct { const char *n; int s; } types[] = {
        {".u8", 1}, {".s8", 1}, {".b8", 1}, {".pred", 1},
        {".u16", 2}, {".s16", 2}, {".b16", 2}, {".f16", 2}, {".bf16", 2},
        {".u32", 4}, {".s32", 4}, {".b32", 4}, {".f32", 4}, {".f16x2", 4}, {".bf16x2", 4},
        {".u64", 8}, {".s64", 8}, {".b64", 8}, {".f64", 8},
    };
    size_t i;
    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (tok_is(t, types[i].n)) return types[i].s;
    return 0;
}

int is_float_type(const tok *t) { return tok_is(t, ".f32") || tok_is(t, ".f64"); }

long long tok_ll(const tok *t, int *ok) {
    char buf[64];
    char *end;
    long long v;
    if (t->n <= 0 || t->n >= (int)sizeof(buf)) { *ok = 0; return 0; }
    memcpy(buf, t->s, (size_t)t->n);
    buf[t->n] = 0;
    v = strtoll(buf, &end, 0);
    *ok = *end == 0 || ((*end == 'U' || *end == 'u') && end[1] == 0);
    return v;
}

/* Parse [.align N] [.vN] .type name [K]... starting at *i; fills size/align/count.
 * `is_param` allows the .ptr [.space] [.align N] decorations of kernel parameters. */
/* Largest declaration the double lays out (its globals are real host memory). */
#define FK_DECL_MAX ((size_t)1 << 28)

int parse_decl(const toks *ts, int *pi, int end, size_t *size, size_t *align, tok *name, tok *type,
                      parse_ctx *pc) {
    int i = *pi, ok, ptr = 0, vec = 1;
    size_t explicit_align = 0, count = 1;
    int tsize = 0;
    name->s = NULL;
    name->n = 0;
    for (; i < end; i++) {
        const tok *t = &ts->t[i];
        if (tok_is(t, ".align")) {
            long long a;
            if (i + 1 >= end) break;
            a = tok_ll(&ts->t[i + 1], &ok);
            if (!ok || a <= 0 || (a & (a - 1))) {
                snprintf(pc->err, sizeof(pc->err), "bad .align value '%.*s'", ts->t[i + 1].n, ts->t[i + 1].s);
                return -1;
            }
            if (!ptr) explicit_align = (size_t)a; /* after .ptr it describes the pointee */
            i++;
        } else if (tok_is(t, ".ptr")) {
            ptr = 1;
        } else if (tok_is(t, ".v2")) {
            vec = 2;
        } else if (tok_is(t, ".v4")) {
            vec = 4;
        } else if (tok_is(t, ".global") || tok_is(t, ".const") || tok_is(t, ".local") || tok_is(t, ".shared") ||
                   tok_is(t, ".param") || tok_is(t, ".visible") || tok_is(t, ".extern") || tok_is(t, ".weak")) {
            continue;
        } else if (t->n > 0 && t->s[0] == '.' && !tsize) {
            tsize = type_size(t);
            if (!tsize) {
                snprintf(pc->err, sizeof(pc->err), "unknown type '%.*s'", t->n, t->s);
                return -1;
            }
            *type = *t;
        } else if (tsize && !name->s && t->n > 0 && t->s[0] != '[' && t->s[0] != '=') {
            *name = *t;
        } else if (name->s && tok_is(t, "[")) {
            long long k;
            if (i + 2 >= end || !tok_is(&ts->t[i + 2], "]")) {
                snprintf(pc->err, sizeof(pc->err), "bad array size after '%.*s'", name->n, name->s);
                return -1;
            }
            k = tok_ll(&ts->t[i + 1], &ok);
            if (!ok || k <= 0) {
                snprintf(pc->err, sizeof(pc->err), "bad array size '%.*s'", ts->t[i + 1].n, ts->t[i + 1].s);
                return -1;
            }
            if ((unsigned long long)k > FK_DECL_MAX / count) {   /* checked: the product must not wrap */
                snprintf(pc->err, sizeof(pc->err), "array '%.*s' is too large for the double (over %llu bytes)",
                         name->n, name->s, (unsigned long long)FK_DECL_MAX);
                return -1;
            }
            count *= (size_t)k;
            i += 2;
        } else {
            break;
        }
    }
    if (!tsize || !name->s) {
        snprintf(pc->err, sizeof(pc->err), "malformed declaration near '%.*s'",
                 i < end ? ts->t[i].n : 0, i < end ? ts->t[i].s : "");
        return -1;
    }
    if (count > FK_DECL_MAX / ((size_t)tsize * (size_t)vec)) {
        snprintf(pc->err, sizeof(pc->err), "'%.*s' is too large for the double (over %llu bytes)",
                 name->n, name->s, (unsigned long long)FK_DECL_MAX);
        return -1;
    }
    *size = (size_t)tsize * (size_t)vec * count;
    *align = explicit_align ? explicit_align : (size_t)tsize * (size_t)vec;
    *pi = i;
    return 0;
}

void copy_name(char dst[256], const tok *t) {
    int n = t->n < 255 ? t->n : 255;
    memcpy(dst, t->s, (size_t)n);
    dst[n] = 0;
}

/* .entry NAME ( params ) [directives] { body } -- tokens [i, end) of one statement
 * plus the body range. */
int parse_entry(const toks *ts, int i, int end, const toks *body, struct CUfunc_st *f, parse_ctx *pc) {
    int ok;
    size_t off = 0, cap = 0;
    memset(f, 0, sizeof(*f));
    f->magic = 0xF00Cu;
    f->max_threads = 1024;
    f->carveout = -1;
    if (i >= end) {
        snprintf(pc->err, sizeof(pc->err), ".entry without a name");
        return -1;
    }
    copy_name(f->name, &ts->t[i]);
    i++;
    if (i < end && tok_is(&ts->t[i], "(")) {
        i++;
        while (i < end && !tok_is(&ts->t[i], ")")) {
            size_t size, align;
            tok name, type;
            fk_param *p;
            if (tok_is(&ts->t[i], ",")) { i++; continue; }
            if (!tok_is(&ts->t[i], ".param")) {
                snprintf(pc->err, sizeof(pc->err), "kernel %s: expected .param, got '%.*s'", f->name, ts->t[i].n,
                         ts->t[i].s);
                return -1;
            }
            if (parse_decl(ts, &i, end, &size, &align, &name, &type, pc)) return -1;
            if (f->nparams == (int)cap) {
                size_t nc = cap ? cap * 2 : 8;
                fk_param *np = realloc(f->params, nc * sizeof(fk_param));
                if (!np) return -1;
                f->params = np;
                cap = nc;
            }
            p = &f->params[f->nparams++];
            off = (off + align - 1) & ~(align - 1);
            p->offset = off;
            p->size = size;
            p->align = align;
            off += size;
        }
        if (i >= end) {
            snprintf(pc->err, sizeof(pc->err), "kernel %s: unterminated parameter list", f->name);
            return -1;
        }
        i++;
    }
    f->param_bytes = off;
    if (off > FK_MAX_PARAM_BYTES) {
        snprintf(pc->err, sizeof(pc->err), "kernel %s: %zu bytes of parameters exceed %d", f->name, off,
                 FK_MAX_PARAM_BYTES);
        return -1;
    }
    /* performance directives */
    for (; i < end; i++) {
        if (tok_is(&ts->t[i], ".maxntid") || tok_is(&ts->t[i], ".reqntid")) {
            long long prod = 1;
            int j = i + 1;
            while (j < end) {
                long long v = tok_ll(&ts->t[j], &ok);
                if (!ok) break;
                prod *= v;
                j++;
                if (j < end && tok_is(&ts->t[j], ",")) j++;
                else break;
            }
            if (prod > 0 && prod < f->max_threads) f->max_threads = (int)prod;
            i = j - 1;
        }
    }
    /* static shared memory declared in the body */
    if (body) {
        int b = 0, stmt = 1;
        size_t total = 0;
        for (b = 0; b < body->n; b++) {
            const tok *t = &body->t[b];
            if (tok_is(t, ";") || tok_is(t, "{") || tok_is(t, "}")) { stmt = 1; continue; }
            if (stmt && tok_is(t, ".shared")) {
                size_t size, align;
                tok name, type;
                int j = b;
                if (parse_decl(body, &j, body->n, &size, &align, &name, &type, pc) == 0) {
                    total = (total + align - 1) & ~(align - 1);
                    total += size;
                }
                pc->err[0] = 0;
            }
            stmt = 0;
        }
        f->static_smem = (int)total;
    }
    f->max_dyn_smem = 49152 - f->static_smem;
    if (f->max_dyn_smem < 0) f->max_dyn_smem = 0;
    return 0;
}

int parse_float_tok(const tok *t, double *out, int is_f32) {
    char buf[64];
    char *end;
    if (t->n <= 0 || t->n >= (int)sizeof(buf)) return -1;
    memcpy(buf, t->s, (size_t)t->n);
    buf[t->n] = 0;
    if ((buf[0] == '0') && (buf[1] == 'f' || buf[1] == 'F') && t->n == 10) {
        uint32_t u = (uint32_t)strtoul(buf + 2, &end, 16);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return *end ? -1 : 0;
    }
    if ((buf[0] == '0') && (buf[1] == 'd' || buf[1] == 'D') && t->n == 18) {
        uint64_t u = strtoull(buf + 2, &end, 16);
        memcpy(out, &u, 8);
        return *end ? -1 : 0;
    }
    (void)is_f32;
    *out = strtod(buf, &end);
    return *end ? -1 : 0;
}

/* .global/.const variable at module scope: tokens [i, end). */
int parse_global(const toks *ts, int i, int end, fk_global *g, parse_ctx *pc) {
    size_t size, align, esize, k = 0;
    tok name, type;
    int neg = 0;
    memset(g, 0, sizeof(*g));
    if (parse_decl(ts, &i, end, &size, &align, &name, &type, pc)) return -1;
    copy_name(g->name, &name);
    g->size = size;
    g->data = aligned_alloc(256, (size + 255) & ~(size_t)255);
    if (!g->data) return -1;
    memset(g->data, 0, size);
    esize = (size_t)type_size(&type);
    if (i < end && tok_is(&ts->t[i], "=")) {
        for (i++; i < end && k * esize < size; i++) {
            const tok *t = &ts->t[i];
            unsigned char *dst = g->data + k * esize;
            if (tok_is(t, "{") || tok_is(t, "}") || tok_is(t, ",")) continue;
            if (tok_is(t, "-")) { neg = 1; continue; }
            if (is_float_type(&type)) {
                double d;
                if (parse_float_tok(t, &d, esize == 4)) break;
                if (neg) d = -d;
                if (esize == 4) { float f = (float)d; memcpy(dst, &f, 4); }
                else memcpy(dst, &d, 8);
            } else {
                int ok;
                long long v = tok_ll(t, &ok);
                if (!ok) {
                    char buf[32];
                    if (t->n < (int)sizeof(buf)) {
                        memcpy(buf, t->s, (size_t)t->n);
                        buf[t->n] = 0;
                        v = (long long)strtoull(buf, NULL, 0);
                    }
                }
                if (neg) v = -v;
                memcpy(dst, &v, esize); /* little endian: low bytes */
            }
            neg = 0;
            k++;
        }
    }
    return 0;
}

/* Blank out // and block comments (keeping newlines), remembering whether the
 * FAKECUDA invalid marker was seen. */
char *strip_comments(const char *src, size_t len, int *invalid, int *invalid_line) {
    char *s = malloc(len + 1);
    size_t i = 0;
    int line = 1;
    if (!s) return NULL;
    memcpy(s, src, len);
    s[len] = 0;
    *invalid = 0;
    while (i < len) {
        if (s[i] == '\n') line++;
        if (s[i] == '/' && i + 1 < len && s[i + 1] == '/') {
            size_t j = i;
            while (j < len && s[j] != '\n') j++;
            if (strstr(src + i, "// FAKECUDA: invalid") == src + i) {
                *invalid = 1;
                *invalid_line = line;
            }
            memset(s + i, ' ', j - i);
            i = j;
        } else if (s[i] == '/' && i + 1 < len && s[i + 1] == '*') {
            size_t j = i + 2;
            while (j + 1 < len && !(s[j] == '*' && s[j + 1] == '/')) j++;
            j = j + 2 <= len ? j + 2 : len;
            for (; i < j; i++)
                if (s[i] != '\n') s[i] = ' ';
                else line++;
        } else {
            i++;
        }
    }
    return s;
}

int find_kw(const toks *ts, int from, int to, int *which) {
    static const char *kws[] = {".entry", ".func", ".global", ".const"};
    int i, k;
    for (i = from; i < to; i++)
        for (k = 0; k < 4; k++)
            if (tok_is(&ts->t[i], kws[k])) {
                *which = k;
                return i;
            }
    return -1;
}

int add_func(struct CUmod_st *m, struct CUfunc_st *f, int *cap) {
    if (m->nfuncs == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        struct CUfunc_st *nf = realloc(m->funcs, (size_t)nc * sizeof(*nf));
        if (!nf) return -1;
        m->funcs = nf;
        *cap = nc;
    }
    m->funcs[m->nfuncs++] = *f;
    return 0;
}

/* Parse PTX(-like) text into a module. Returns 0, or a CUresult with pc->err set. */
CUresult parse_module(const char *text, struct CUmod_st *m, parse_ctx *pc) {
    int invalid = 0, invalid_line = 0, fcap = 0, gcap = 0;
    size_t len = strlen(text);
    char *s = strip_comments(text, len, &invalid, &invalid_line);
    toks ts = {0};
    int i, start;
    CUresult rc = CUDA_SUCCESS;
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    if (invalid) {
        snprintf(pc->err, sizeof(pc->err),
                 "ptxas fatal   : fakecuda: PTX rejected on request ('// FAKECUDA: invalid' at line %d)",
                 invalid_line);
        free(s);
        return CUDA_ERROR_INVALID_PTX;
    }
    if (tokenize(s, len, &ts)) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* walk statements at brace depth 0 */
    i = 0;
    start = 0;
    while (i < ts.n) {
        const tok *t = &ts.t[i];
        if (tok_is(t, ";") || tok_is(t, "{")) {
            int which = -1, kw = find_kw(&ts, start, i, &which);
            int has_eq = 0, j, extern_ = 0, body_start = -1, body_end = -1;
            for (j = start; j < i; j++) {
                if (tok_is(&ts.t[j], "=")) has_eq = 1;
                if (kw >= 0 && j < kw && tok_is(&ts.t[j], ".extern")) extern_ = 1;
            }
            if (tok_is(t, "{") && has_eq) {
                /* initializer braces of a variable: continue to the ';' */
                int depth = 0;
                for (; i < ts.n; i++) {
                    if (tok_is(&ts.t[i], "{")) depth++;
                    else if (tok_is(&ts.t[i], "}")) depth--;
                    else if (tok_is(&ts.t[i], ";") && depth == 0) break;
                }
            } else if (tok_is(t, "{")) {
                int depth = 0;
                body_start = i + 1;
                for (; i < ts.n; i++) {
                    if (tok_is(&ts.t[i], "{")) depth++;
                    else if (tok_is(&ts.t[i], "}") && --depth == 0) break;
                }
                if (i >= ts.n) {
                    snprintf(pc->err, sizeof(pc->err), "unbalanced braces");
                    rc = CUDA_ERROR_INVALID_PTX;
                    break;
                }
                body_end = i;
            }
            if (kw >= 0 && which == 0 && !extern_) {
                struct CUfunc_st f;
                toks body = {0};
                const toks *bp = NULL;
                if (body_start >= 0) {
                    body.t = ts.t + body_start;
                    body.n = body_end - body_start;
                    bp = &body;
                }
                if (parse_entry(&ts, kw + 1, body_start >= 0 ? body_start - 1 : i, bp, &f, pc) ||
                    add_func(m, &f, &fcap)) {
                    free(f.params);
                    if (!pc->err[0]) snprintf(pc->err, sizeof(pc->err), "out of memory");
                    rc = CUDA_ERROR_INVALID_PTX;
                    break;
                }
                f.mod = m;
                m->funcs[m->nfuncs - 1].mod = m;
                pc->nentries++;
            } else if (kw >= 0 && (which == 2 || which == 3) && !extern_ && body_start < 0) {
                fk_global g;
                if (parse_global(&ts, kw + 1, i, &g, pc)) {
                    rc = CUDA_ERROR_INVALID_PTX;
                    break;
                }
                if (m->nglobals == gcap) {
                    int nc = gcap ? gcap * 2 : 8;
                    fk_global *ng = realloc(m->globals, (size_t)nc * sizeof(*ng));
                    if (!ng) { free(g.data); rc = CUDA_ERROR_OUT_OF_MEMORY; break; }
                    m->globals = ng;
                    gcap = nc;
                }
                m->globals[m->nglobals++] = g;
            }
            i++;
            start = i;
        } else if (tok_is(t, "}")) {
            snprintf(pc->err, sizeof(pc->err), "unbalanced braces");
            rc = CUDA_ERROR_INVALID_PTX;
            break;
        } else {
            i++;
        }
    }
    free(ts.t);
    free(s);
    return rc;
}
