"""PTX texts the package itself loads: the doctor's check kernel, the benchmark's kernels
and the decode-loop example's kernel. One place for the package's PTX: the tests' own
texts (tests/ptx/) take ``header`` and ``vadd`` from here.

Hand-written for ``sm_52`` so that every GPU the driver supports JIT-compiles them.
"""

__all__ = ["header", "vadd", "DOCTOR_VADD", "BENCH_KERNELS", "GRAPH_VADD", "AXPB"]


# %r1 = the thread's global index (ctaid.x * ntid.x + tid.x); threads at or past %r2 (n)
# branch to $L__done. The elementwise kernels below share it.
_INDEX_OR_DONE = """    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra $L__done;
"""


def header(target="sm_52", version="8.0"):
    """The directives a module starts with: PTX ISA `version`, `target`, 64-bit addresses."""
    return f".version {version}\n.target {target}\n.address_size 64\n"


def _entry(name, params, regs, loads, body, *, guard="", pointer="", done="$L__done"):
    """One ``.visible .entry`` (every kernel here is written through it).

    params: (PTX type, name) pairs, declared in order (`pointer` qualifies each ``u64``
    one); regs: the register declarations ("pred %p<2>", ...); guard: instructions
    before the loads; loads: (register, parameter) pairs, each an ``ld.param`` of the
    parameter's type; body: the instructions after them, ending at the label `done`.
    """
    types = {n: t for t, n in params}
    decl = ",\n".join(f"    .param .{t} {pointer if t == 'u64' else ''}{n}" for t, n in params)
    return (f"\n.visible .entry {name}(\n{decl}\n)\n{{\n"
            + "".join(f"    .reg .{r};\n" for r in regs) + guard
            + "".join(f"    ld.param.{types[p]} {reg}, [{p}];\n" for reg, p in loads)
            + body + f"{done}:\n    ret;\n}}\n")


def _sum_at(out, a, b, rd):
    """PTX: out[%r1] = a[%r1] + b[%r1] (float32; out, a, b: registers holding global
    addresses), in registers %rd<rd>..%rd<rd+3> and %f1..%f3."""
    return (f"    mul.wide.u32 %rd{rd}, %r1, 4;\n"
            + "".join(f"    add.s64 %rd{rd + i}, {base}, %rd{rd};\n" for i, base in ((1, a), (2, b), (3, out)))
            + f"    ld.global.f32 %f1, [%rd{rd + 1}];\n    ld.global.f32 %f2, [%rd{rd + 2}];\n"
            f"    add.f32 %f3, %f1, %f2;\n    st.global.f32 [%rd{rd + 3}], %f3;\n")


def vadd(head, pointer="", name="vadd"):
    """A module `head` (``header()``) + the kernel ``name(out, a, b, n)``: out[i] = a[i] + b[i]
    for i < n (float32). `pointer` qualifies the three pointer parameters (".ptr .global
    .align 4 " in tests/ptx/gpu.py); the parameter layout is the same either way."""
    return head + _entry(
        name, [("u64", "out"), ("u64", "a"), ("u64", "b"), ("u32", "n")],
        ["pred %p<2>", "b32 %r<6>", "f32 %f<4>", "b64 %rd<11>"],
        [("%rd1", "out"), ("%rd2", "a"), ("%rd3", "b"), ("%r2", "n")], _INDEX_OR_DONE + """\
    cvta.to.global.u64 %rd4, %rd2;
    cvta.to.global.u64 %rd5, %rd3;
    cvta.to.global.u64 %rd6, %rd1;
""" + _sum_at("%rd6", "%rd4", "%rd5", 7), pointer=pointer)


# bc_doctor_vadd(out, a, b, n): out[i] = a[i] + b[i], float32 (python -m barecuda's self-check).
DOCTOR_VADD = vadd(header(), name="bc_doctor_vadd")


def _first_thread_only(done):
    """PTX: thread 0 of block 0 goes on; every other thread branches to `done`."""
    return ("    mov.u32 %r1, %tid.x;\n"
            "    mov.u32 %r2, %ctaid.x;\n"
            "    or.b32 %r3, %r1, %r2;\n"
            "    setp.ne.u32 %p1, %r3, 0;\n"
            f"    @%p1 bra {done};\n")


def _bench_kernel(name, params, regs, loads, body):
    """A benchmark kernel: only thread 0 of block 0 runs `body`; parameters are
    (type, suffix) pairs, named ``<name>_<suffix>``, loads (register, suffix) pairs."""
    done = f"$L_{name.removeprefix('bc_')}_done"
    return _entry(name, [(t, f"{name}_{p}") for t, p in params], regs,
                  [(r, f"{name}_{p}") for r, p in loads], body, guard=_first_thread_only(done), done=done)


# The launch benchmark's kernels (barecuda.bench.context): each does almost nothing (one
# thread writes one value) so that the CPU cost of issuing the launch dominates.
BENCH_KERNELS = header() + """
.visible .entry bc_k0()
{
    ret;
}
""" + _bench_kernel(
    "bc_k4", [("u64", "out"), ("u64", "in"), ("u32", "n"), ("f32", "x")],
    ["pred %p<2>", "b32 %r<4>", "f32 %f<4>", "b64 %rd<5>"],
    [("%rd1", "out"), ("%rd2", "in"), ("%r1", "n"), ("%f1", "x")], """\
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    ld.global.f32 %f2, [%rd4];
    cvt.rn.f32.u32 %f3, %r1;
    fma.rn.f32 %f2, %f2, %f1, %f3;
    st.global.f32 [%rd3], %f2;
""") + _bench_kernel(
    "bc_k4p", [("u64", "out"), ("u64", "a"), ("u64", "b"), ("u64", "c")],
    ["pred %p<2>", "b32 %r<4>", "f32 %f<4>", "b64 %rd<9>"],
    [("%rd1", "out"), ("%rd2", "a"), ("%rd3", "b"), ("%rd4", "c")],
    "".join(f"    cvta.to.global.u64 %rd{i + 4}, %rd{i};\n" for i in range(1, 5)) + """\
    ld.global.f32 %f1, [%rd6];
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd8];
    fma.rn.f32 %f1, %f1, %f2, %f3;
    st.global.f32 [%rd5], %f1;
""") + _bench_kernel(
    "bc_k16", list(zip("u64 u32 f32 u64 s32 f64 u64 u64 u32 f32 u64 s64 f32 u32 u64 f64".split(),
                       [f"{'p' if i in (0, 3, 6, 10, 14) else 'a'}{i}" for i in range(16)])),
    ["pred %p<2>", "b32 %r<6>", "b64 %rd<3>"],
    [("%rd1", "p0")], """\
    cvta.to.global.u64 %rd2, %rd1;
    ld.param.u32 %r1, [bc_k16_a1];
    ld.param.u32 %r2, [bc_k16_a8];
    ld.param.u32 %r4, [bc_k16_a13];
    add.u32 %r5, %r1, %r2;
    add.u32 %r5, %r5, %r4;
    st.global.u32 [%rd2], %r5;
""")


# gvadd(o, a, b, n): o[i] = a[i] + b[i] for the first block (the graph benchmark rows).
GRAPH_VADD = header() + _entry(
    "gvadd", [("u64", "o"), ("u64", "a"), ("u64", "b"), ("u32", "n")],
    ["pred %p<2>", "b32 %r<3>", "f32 %f<4>", "b64 %rd<8>"],
    [("%rd1", "o"), ("%rd2", "a"), ("%rd3", "b"), ("%r2", "n")], """\
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra $L__done;
""" + _sum_at("%rd1", "%rd2", "%rd3", 4))


# axpb(x, src, alpha, n): x[i] = alpha * x[i] + src[i] for i < n, float32 (examples/decode_loop.py).
AXPB = header() + _entry(
    "axpb", [("u64", "x"), ("u64", "src"), ("f32", "alpha"), ("u32", "n")],
    ["pred %p<2>", "b32 %r<6>", "f32 %f<5>", "b64 %rd<8>"],
    [("%rd1", "x"), ("%rd2", "src"), ("%f1", "alpha"), ("%r2", "n")], _INDEX_OR_DONE + """\
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r1, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd6], %f4;
""")
