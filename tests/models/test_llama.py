"""barecuda.models.llama on the driver double: the decode graph's shape and dispatch.

The double runs no kernel, so values are checked on the GPU (test_llama_gpu.py); here:
every check fails before GPU memory is taken, the graph has the documented nodes (fused:
one embedding+norm node, five a layer, three at the end; unfused: one, nine, four), and
decoding is graph launches only.
"""
import struct

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("gguf")

from barecuda.models import gguf as G  # noqa: E402
from barecuda.models.gguf import GGUFError  # noqa: E402
from barecuda.models.synthetic import write_random_llama  # noqa: E402

SMALL = dict(n_layer=2, dim=128, ffn_dim=256, n_head=2, n_head_kv=1, vocab=96)


@pytest.fixture(scope="module")
def small_f16(tmp_path_factory):
    return write_random_llama(str(tmp_path_factory.mktemp("llama") / "small.gguf"), **SMALL, qtype="F16",
                              llama3_rope=True)


@pytest.mark.parametrize("fused,pdl", [(True, False), (False, False), (True, True)])
def test_graph_nodes_and_graph_only_decode(fake_kernels, small_f16, fused, pdl):
    from barecuda.models.llama import Llama, _Sampling
    fake = fake_kernels
    m = Llama(small_f16, max_seq=32, fused=fused, pdl=pdl)
    ge = m.graph()
    want = 1 + 5 * SMALL["n_layer"] + 3 if fused else 1 + 9 * SMALL["n_layer"] + 4
    assert m.nodes_per_token == want
    assert m.nodes_per_layer == (5 if fused else 9)
    assert m.rope_scaling["factor"] == 8.0
    assert m.graph() is ge                                 # built once per sampling setting
    launches, graphs, direct = fake.launch_count(), fake.calls("cuGraphLaunch"), fake.calls("cuLaunchKernel")
    out = m.generate_ids([1, 2, 3], 7, chunk=4)
    assert len(out) == 7                                   # the double runs no kernel: ids are 0
    n = fake.calls("cuGraphLaunch") - graphs
    assert n == (3 - 1) + 7, n                             # prompt - 1 + new tokens, one launch each
    assert fake.calls("cuLaunchKernel") == direct          # no kernel launched outside the graph
    assert fake.launch_count() - launches == n * m.nodes_per_token
    ge2 = m.graph(_Sampling(0.8, 20, 0.9, 1234))
    assert ge2 is not ge and m.nodes_per_token == want
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m.reset([5, 96])
    with pytest.raises(ValueError, match="fit the KV cache"):
        m.reset(list(range(33)))
    m.close()


def test_float32_mode_runs_the_unfused_loop(fake_kernels, small_f16):
    """dtype="float32" (the correctness mode): the unfused loop whatever ``fused`` says, with
    float32 activations, cache and logits (attention through attn_decode_f32)."""
    from barecuda.models.llama import Llama
    fake = fake_kernels
    m = Llama(small_f16, max_seq=32, dtype="float32", fused=True, pdl=True)
    assert not m.fused and not m.pdl and m.kv_layout == "token_major"
    m.graph()
    assert m.nodes_per_layer == 9 and m.nodes_per_token == 1 + 9 * SMALL["n_layer"] + 4
    assert str(m.layers[0]["k_cache"].dtype) == "float32" and str(m.logits.dtype) == "float32"
    n = fake.calls("cuGraphLaunch")
    assert len(m.generate_ids([1, 2], 3)) == 3 and fake.calls("cuGraphLaunch") - n == 1 + 3
    with pytest.raises(NotImplementedError, match="16-bit"):
        m.prefill_gemm([1, 2, 3])
    m.close()


def test_state_layout(fake_kernels, small_f16):
    """reset() writes pos 0, the first token, the prompt length and the prompt."""
    import ctypes
    from barecuda.models.llama import Llama
    m = Llama(small_f16, max_seq=16)
    m.reset([7, 8, 9])
    raw = ctypes.string_at(m.state.ptr, 4 * 7)
    assert struct.unpack("<7i", raw) == (0, 7, 3, 0, 7, 8, 9)
    assert m.pos_ref.ptr == m.state.ptr and m.tok_ref.ptr == m.state.ptr + 4 and m.sampled_ref.ptr == m.state.ptr + 12
    m.close()


def _patched(src, tmp_path, name, key_fn):
    import gguf
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(tmp_path / name), "llama")
    for k, fld in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = key_fn(k, fld.contents())
        if v is not None:
            w.add_key_value(k, v, fld.types[0], sub_type=fld.types[-1] if len(fld.types) > 1 else None)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=None, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(tmp_path / name)


def test_errors_before_gpu_memory(fake_kernels, small_f16, tmp_path):
    from barecuda.models.llama import Llama
    fake = fake_kernels
    used = fake.mem_used()
    with pytest.raises(ValueError, match="float16, bfloat16 or float32"):
        Llama(small_f16, dtype="float64")
    same = G.open_gguf(_patched(small_f16, tmp_path, "same.gguf", lambda k, v: v))
    assert same["llama.block_count"] == 2 and len(same.tensors) == len(G.open_gguf(small_f16).tensors)
    # a head dim the attention kernel does not serve (128 wide, 4 heads -> 32)
    hd32 = _patched(small_f16, tmp_path, "hd32.gguf", lambda k, v: 4 if k == "llama.attention.head_count" else v)
    with pytest.raises(GGUFError, match=r"'blk\.0\.attn_k\.weight' has shape \(64, 128\), expected \(32, 128\)"):
        Llama(hd32)
    hd32 = _patched(small_f16, tmp_path, "hd32b.gguf", lambda k, v: {"llama.attention.head_count": 4,
                                                                      "llama.attention.head_count_kv": 2}.get(k, v))
    with pytest.raises(GGUFError, match="head dim 32"):          # consistent, but no attention kernel for it
        Llama(hd32)
    nokey = _patched(small_f16, tmp_path, "nokey.gguf", lambda k, v: None if k == "llama.feed_forward_length" else v)
    with pytest.raises(GGUFError, match="'llama.feed_forward_length' is missing"):
        Llama(nokey)
    assert fake.mem_used() == used


def test_prefill_gemm_dispatch(fake_kernels, small_f16):
    """The batched prefill launches (no graph), then leaves the state at the last prompt token."""
    import ctypes
    from barecuda.models.llama import Llama
    fake = fake_kernels
    with pytest.raises(NotImplementedError, match="token_major"):
        Llama(small_f16, max_seq=32).prefill_gemm([1, 2, 3])
    m = Llama(small_f16, max_seq=32, kv_layout="token_major")
    prompt = [3, 4, 5, 6, 7, 8]
    m.graph()
    m.reset(prompt)
    graphs, launches = fake.calls("cuGraphLaunch"), fake.launch_count()
    m.prefill_gemm(prompt, chunk=4)                          # two chunks: 4 + 1 tokens
    assert fake.calls("cuGraphLaunch") == graphs
    per_layer = 1 + 3 + 1 + 1 + 1 + 1 + 2 + 1 + 1            # norm, q/k/v, rope, attention, wo, norm, gate/up, silu_mul, down
    assert fake.launch_count() - launches == 2 * (1 + SMALL["n_layer"] * per_layer)   # + the embedding a chunk
    assert struct.unpack("<10i", ctypes.string_at(m.state.ptr, 40)) == (5, 8, 6, 0, 3, 4, 5, 6, 7, 8)
    out = m.generate_ids(prompt, 4, prefill="gemm")
    assert len(out) == 4
    with pytest.raises(ValueError, match="prefill="):
        m.generate_ids(prompt, 4, prefill="flash")
    m.close()
