"""The benchmark wing's own CUDA sources (the floor kernels and the Q4_K prototypes that
stand beside the kernel rows) compile with the real NVRTC for sm_80 and sm_90, with no
warnings, and define every entry point the rows ask for by name. They only ever run on a
GPU, so without this a source could rot between GPU runs and fail in the middle of one."""
import re

import pytest

import barecuda as bc
from barecuda import _nvrtc
from barecuda.bench import _dequant_floors, _q4k_floors, kernels_attention_rows, kernels_matvec_rows
from barecuda.kernels import _registry

needs_nvrtc = pytest.mark.skipif(not _nvrtc.nvrtc_available(), reason="NVRTC not installed")

# (module attribute, file name, options, the entries the rows fetch with get_kernel)
SOURCES = [
    (kernels_matvec_rows._FLOOR_SRC, "rd_floor.cu", (), {"rd_floor"}),
    (kernels_attention_rows.READ_FLOOR_SRC, "read_floor.cu", ("-DREAD_U=2",), {"read_floor"}),
    (_dequant_floors._MIX_SRC, "dequant_mix.cu", (), {"mix"}),
    (_dequant_floors._SHAPE_SRC, "dequant_shape.cu", (), {"copy1", "mixw", "mixt"}),
    (_q4k_floors._FLOOR_SRC, "q4k_floors.cu", (),
     {f"{lay}_pf{p}" for lay in ("pat", "rep") for p in (1, 2, 4)}),
    (_q4k_floors._PROTO_SRC, "q4k_rep_mv.cu", ("-std=c++17", f"-I{_registry.CSRC}"),
     {"rep_mv_pf1", "rep_mv_pf2", "rep_bk_mv_s2", "rep_bk_mv_s3", "rep_bk_mv_s4"}),
]


@pytest.mark.kernel_sources
@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("src", SOURCES, ids=[s[1] for s in SOURCES])
def test_bench_source_compiles_without_warnings(src, arch):
    source, name, options, wanted = src
    oc = bc.Program(source, name=name, options=list(options)).compile("cubin", arch=arch)
    assert oc.kind == "cubin" and oc.code[:4] == b"\x7fELF"
    assert not (oc.log or "").strip(), f"{name} {arch}: NVRTC said:\n{oc.log}"
    ptx = oc.ptx.decode() if isinstance(oc.ptx, bytes) else oc.ptx
    entries = set(re.findall(r"\.entry\s+(\w+)\s*\(", ptx))
    assert wanted <= entries, f"{name}: the rows ask for entries it does not define: {sorted(wanted - entries)}"


def test_repack_puts_each_lanes_bytes_where_the_prototype_reads_them():
    """_q4k_floors.repack against the layout its docstring states, computed independently
    byte by byte: super-block c of tile T at (T * nblk + c) * 2304, the 16 heads first, then
    lane 4 g + t's 16-byte vector j = bytes 8t..8t+7 of quant run j of rows g and g + 8."""
    np = pytest.importorskip("numpy")
    n, k = 32, 512
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=n * (k // 256) * 144, dtype=np.uint8)
    rep = _q4k_floors.repack(raw, n, k)
    assert rep.shape == raw.shape
    nb = k // 256
    rows = raw.reshape(n, nb, 144)
    for T in range(n // 16):
        for c in range(nb):
            sb = rep[(T * nb + c) * 2304:(T * nb + c + 1) * 2304]
            for r in range(16):
                assert bytes(sb[16 * r:16 * r + 16]) == bytes(rows[16 * T + r, c, :16])
            for j in range(4):
                for g in range(8):
                    for t in range(4):
                        v = sb[256 + 512 * j + 16 * (4 * g + t):][:16]
                        q0 = rows[16 * T + g, c, 16 + 32 * j + 8 * t:][:8]
                        q1 = rows[16 * T + g + 8, c, 16 + 32 * j + 8 * t:][:8]
                        assert bytes(v) == bytes(q0) + bytes(q1)
