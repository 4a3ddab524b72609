"""barecuda.models.gguf: the GGUF reader against the ``gguf`` package, its errors, the upload.

The reader is checked against ``gguf.GGUFReader`` (an independent parser) on the real
SmolLM2 file and on random files of every supported type; the numpy dequantizers
against ``gguf.quants.dequantize`` on the files and on random blocks. Errors are made
by cutting or patching real files. The upload runs on the driver double, whose device
memory is host memory: the bytes are read back with ctypes and compared with the file.
"""
import ctypes
import os
import shutil
import struct

import pytest

from barecuda.models import gguf as G
from barecuda.models.gguf import GGUFError

np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")
from barecuda.models import reference as R  # noqa: E402


def _same_as_reader(path):
    f = G.open_gguf(path)
    r = gguf.GGUFReader(path)
    assert len(f.tensors) == len(r.tensors)
    for t in r.tensors:
        m = f.tensor(t.name)
        assert list(m.dims) == [int(x) for x in t.shape], t.name
        assert m.type == int(t.tensor_type) and m.nbytes == t.n_bytes, t.name
        assert bytes(m.data) == t.data.tobytes(), t.name
    for k, field in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = field.contents()
        assert f[k] == pytest.approx(v) if isinstance(v, float) else f[k] == v, k
    return f, r


def test_real_file_matches_gguf_reader(smollm_path):
    f, r = _same_as_reader(smollm_path)
    assert f.version == 3 and f.architecture == "llama" and f.alignment == 32
    assert f["llama.block_count"] == 30 and f["llama.embedding_length"] == 576
    assert len(f["tokenizer.ggml.tokens"]) == 49152 and len(f["tokenizer.ggml.merges"]) == 48900
    assert {t.type_name for t in f.tensors.values()} == {"F32", "Q4_1", "Q8_0"}
    assert f.tensor("blk.0.attn_q.weight").shape == (576, 576)
    f.close()


def test_real_file_dequantizes_like_gguf(smollm_path):
    f = G.open_gguf(smollm_path)
    r = gguf.GGUFReader(smollm_path)
    seen = set()
    for t in r.tensors:
        name = t.tensor_type.name
        if name in seen and not t.name.startswith("blk.29."):
            continue
        seen.add(name)
        mine = R.dequantize_tensor(f.tensor(t.name))
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(mine.shape)
        assert mine.dtype == np.float32
        assert np.array_equal(mine, ref), t.name
    assert seen == {"F32", "Q4_1", "Q8_0"}


def test_tiny_files_of_every_type(tiny_ggufs):
    for qt, path in tiny_ggufs.items():
        f, r = _same_as_reader(path)
        for t in r.tensors:
            mine = R.dequantize_tensor(f.tensor(t.name))
            ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(mine.shape)
            assert np.max(np.abs(mine - ref)) <= 1e-6 * max(1.0, float(np.max(np.abs(ref)))), (qt, t.name)
        assert {t.type_name for t in f.tensors.values()} == {"F32", qt}
        f.close()


@pytest.mark.parametrize("qt", ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"])
def test_random_blocks_dequantize_like_gguf(qt):
    """Any bytes with sane f16 scales are a valid block: fresh random blocks, no quantizer."""
    rng = np.random.default_rng()
    qtype = getattr(gguf.GGMLQuantizationType, qt)
    be, bb = G.type_size(qt)
    blocks = rng.integers(0, 256, size=(37, bb), dtype=np.uint8)
    halves = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q4_K": [0, 2], "Q6_K": [208]}[qt]
    for h in halves:
        blocks[:, h:h + 2] = rng.uniform(-2, 2, 37).astype("<f2").view(np.uint8).reshape(37, 2)
    mine = R.dequantize(blocks.tobytes(), qt)
    ref = gguf.quants.dequantize(blocks, qtype).reshape(-1)
    assert mine.shape == (37 * be,)
    assert np.max(np.abs(mine - ref)) < 1e-4          # issue 23's Q4_K bar; in fact exact
    assert np.array_equal(mine, ref)


@pytest.mark.parametrize("kw", [dict(qtype="F16"), dict(qtype="F32"), dict(q4_k_m=True)], ids=["F16", "F32", "Q4_K_M"])
def test_fast_random_files(tmp_path, kw):
    """``fast=True`` (the benchmark's files): tensors cut from one pool as views at random
    offsets, a pool smaller than a tensor repeated cyclically; the values keep the scale
    1/sqrt(fan-in), tensors and neighbouring rows differ, and the file reads back."""
    from barecuda.models import synthetic as S
    shape = dict(n_layer=2, dim=256, ffn_dim=512, n_head=4, n_head_kv=2, vocab=300)
    path = S.write_random_llama(str(tmp_path / "fast.gguf"), **shape, fast=True, seed=3, **kw)
    f = G.open_gguf(path)
    q = R.dequantize_tensor(f.tensor("blk.0.attn_q.weight"))
    d = R.dequantize_tensor(f.tensor("blk.1.ffn_down.weight"))
    if "qtype" in kw:
        assert abs(q.std() * 16 - 1) < 0.05 and abs(d.std() * np.sqrt(512) - 1) < 0.05
    assert not np.array_equal(q[0], q[1]) and not np.array_equal(q, R.dequantize_tensor(f.tensor("blk.1.attn_q.weight")))
    pool = S._Pool(np.random.default_rng(0), 1000)
    v = pool.take(pool.normal, 600)
    assert not v.flags.writeable and np.shares_memory(v, pool.normal)
    assert pool.take(pool.bytes, 600, copy=True).flags.writeable
    w = pool.take(pool.normal, 2500)                                   # cyclic: index (off + i) mod n
    off = int(np.flatnonzero(pool.normal == w[0])[0])
    assert np.array_equal(w, pool.normal[(off + np.arange(2500)) % 1000])


def test_type_table_matches_gguf():
    # Q8_1 is never stored in files; gguf-py still lists its old 40-byte block (ggml: 36)
    for qt in gguf.GGMLQuantizationType:
        if qt.name == "Q8_1":
            continue
        if qt.name in ("Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8"):
            continue
        if int(qt) in G._TYPES:
            assert G._TYPES[int(qt)][0] == qt.name
            assert G.type_size(int(qt)) == gguf.GGML_QUANT_SIZES[qt], qt.name


# -- errors -----------------------------------------------------------------------------

def _copy(src, tmp_path, name="x.gguf"):
    dst = tmp_path / name
    shutil.copyfile(src, dst)
    return str(dst)


def _tensor_info_pos(path, name):
    """Byte offset of a tensor's info record (its name's length prefix)."""
    data = open(path, "rb").read()
    key = struct.pack("<Q", len(name)) + name.encode()
    pos = data.index(key)
    return pos + len(key)           # -> n_dims


def test_truncated_file_names_what_is_cut(tiny_ggufs, tmp_path):
    src = tiny_ggufs["Q8_0"]
    size = os.path.getsize(src)
    f = G.open_gguf(src)
    last = max(f.tensors.values(), key=lambda t: t.offset)
    data_offset = f.data_offset
    f.close()
    for cut, words in [(0, "empty"), (3, "magic"), (10, "tensor count"), (40, "metadata"),
                       (data_offset - 5, "tensor"), (size - 1, last.name)]:
        p = _copy(src, tmp_path)
        with open(p, "r+b") as fh:
            fh.truncate(cut)
        with pytest.raises(GGUFError, match="truncated|empty") as e:
            G.open_gguf(p)
        assert words in str(e.value) and p in str(e.value), (cut, str(e.value))


def test_unknown_type_names_the_tensor(tiny_ggufs, tmp_path):
    p = _copy(tiny_ggufs["F32"], tmp_path)
    pos = _tensor_info_pos(p, "blk.1.ffn_up.weight")
    with open(p, "r+b") as fh:
        fh.seek(pos)
        nd = struct.unpack("<I", fh.read(4))[0]
        fh.seek(pos + 4 + 8 * nd)
        fh.write(struct.pack("<I", 99))
    with pytest.raises(GGUFError, match=r"'blk\.1\.ffn_up\.weight' has unknown ggml type 99"):
        G.open_gguf(p)


def test_unsupported_type_fails_before_gpu_memory(tiny_ggufs, tmp_path, fake):
    """A known ggml type barecuda does not compute with (Q5_K): the file opens; the model
    check and the upload name the tensor and its type, and no device memory is taken."""
    p = _copy(tiny_ggufs["F32"], tmp_path)
    pos = _tensor_info_pos(p, "blk.0.attn_norm.weight")     # 256 F32 (1024 B) -> 256 Q5_K (176 B)
    with open(p, "r+b") as fh:
        fh.seek(pos)
        nd = struct.unpack("<I", fh.read(4))[0]
        fh.seek(pos + 4 + 8 * nd)
        fh.write(struct.pack("<I", 13))
    f = G.open_gguf(p)
    assert f.tensor("blk.0.attn_norm.weight").type_name == "Q5_K"
    used = fake.mem_used()
    with pytest.raises(GGUFError, match=r"'blk\.0\.attn_norm\.weight' has type Q5_K"):
        G.upload(f)
    with pytest.raises(GGUFError, match=r"'blk\.0\.attn_norm\.weight' has type Q5_K"):
        R.LlamaConfig.from_gguf(f).check(f)
    assert fake.mem_used() == used
    f.close()


def _write_without(path, drop_key=None, drop_tensor=None):
    w = gguf.GGUFWriter(path, "llama")
    if drop_key != "llama.block_count":
        w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_vocab_size(32)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (32, 64), "output_norm.weight": (64,), "blk.0.attn_norm.weight": (64,),
              "blk.0.attn_q.weight": (64, 64), "blk.0.attn_k.weight": (32, 64), "blk.0.attn_v.weight": (32, 64),
              "blk.0.attn_output.weight": (64, 64), "blk.0.ffn_norm.weight": (64,),
              "blk.0.ffn_gate.weight": (128, 64), "blk.0.ffn_up.weight": (128, 64), "blk.0.ffn_down.weight": (64, 128)}
    for n, s in shapes.items():
        if n != drop_tensor:
            w.add_tensor(n, rng.standard_normal(s).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_missing_key_and_tensor_are_named(tmp_path):
    ok = G.open_gguf(_write_without(str(tmp_path / "ok.gguf")))
    R.LlamaConfig.from_gguf(ok).check(ok)
    f = G.open_gguf(_write_without(str(tmp_path / "k.gguf"), drop_key="llama.block_count"))
    with pytest.raises(GGUFError, match=r"metadata key 'llama\.block_count' is missing"):
        R.LlamaConfig.from_gguf(f)
    with pytest.raises(GGUFError, match=r"metadata key 'nope' is missing"):
        f["nope"]
    f = G.open_gguf(_write_without(str(tmp_path / "t.gguf"), drop_tensor="blk.0.ffn_up.weight"))
    cfg = R.LlamaConfig.from_gguf(f)
    with pytest.raises(GGUFError, match=r"tensor 'blk\.0\.ffn_up\.weight' is missing"):
        cfg.check(f)
    with pytest.raises(GGUFError, match=r"tensor 'blk\.0\.ffn_up\.weight' is missing"):
        G.plan_upload(f, cfg.tensor_names())


def test_not_gguf_and_versions(tmp_path, tiny_ggufs):
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"GGML" + b"\0" * 64)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        G.open_gguf(str(p))
    src = open(tiny_ggufs["F32"], "rb").read()
    for v, ok in [(1, False), (2, True), (3, True), (4, False), (3 << 24, False)]:
        p.write_bytes(src[:4] + struct.pack("<I", v) + src[8:])
        if ok:
            assert G.open_gguf(str(p)).version == v
        else:
            with pytest.raises(GGUFError, match="version|big-endian"):
                G.open_gguf(str(p))


def test_metadata_of_every_value_type(tmp_path):
    path = str(tmp_path / "kv.gguf")
    w = gguf.GGUFWriter(path, "llama")
    vals = {"u8": (7, gguf.GGUFValueType.UINT8), "i8": (-7, gguf.GGUFValueType.INT8),
            "u16": (700, gguf.GGUFValueType.UINT16), "i16": (-700, gguf.GGUFValueType.INT16),
            "u32": (7 << 20, gguf.GGUFValueType.UINT32), "i32": (-(7 << 20), gguf.GGUFValueType.INT32),
            "f32": (0.5, gguf.GGUFValueType.FLOAT32), "b": (True, gguf.GGUFValueType.BOOL),
            "s": ("héllo", gguf.GGUFValueType.STRING), "u64": (7 << 40, gguf.GGUFValueType.UINT64),
            "i64": (-(7 << 40), gguf.GGUFValueType.INT64), "f64": (0.1, gguf.GGUFValueType.FLOAT64)}
    for k, (v, t) in vals.items():
        w.add_key_value("t." + k, v, t)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_s", ["a", "bc", ""])
    w.add_array("t.arr_f", [0.5, 1.5])
    w.add_array("t.arr_b", [True, False])
    w.add_custom_alignment(64)
    w.add_tensor("x", np.arange(10, dtype=np.float32))
    w.add_tensor("y", np.arange(6, dtype=np.float16).reshape(2, 3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f, _ = _same_as_reader(path)
    for k, (v, t) in vals.items():
        assert f["t." + k] == v and f.metadata_types["t." + k] == t.name
    assert f["t.arr_s"] == ["a", "bc", ""] and f["t.arr_b"] == [True, False] and f["t.arr_i32"] == [1, -2, 3]
    assert f.alignment == 64 and f.data_offset % 64 == 0
    assert all(t.offset % 64 == 0 for t in f.tensors.values())
    assert f.tensor("y").shape == (2, 3)
    assert np.array_equal(R.dequantize_tensor(f.tensor("y")), np.arange(6).reshape(2, 3))


# -- upload (driver double) ---------------------------------------------------------------

@pytest.mark.parametrize("via", ["direct", "device", "read"])
def test_upload_places_every_tensor(fake, tiny_ggufs, via):
    f = G.open_gguf(tiny_ggufs["Q4_K"])
    layout = ["token_embd.weight", ("blk.0.qkv", ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"]),
              "output_norm.weight", "blk.1.ffn_down.weight"]
    used = fake.mem_used()
    bufs = G.upload(f, layout, progress=True, via=via)
    assert fake.mem_used() > used
    for key in ["token_embd.weight", "output_norm.weight", "blk.1.ffn_down.weight"]:
        b = bufs[key]
        assert b.ptr % 256 == 0 and b.nbytes == f.tensor(key).nbytes
        assert ctypes.string_at(b.ptr, b.nbytes) == bytes(f.tensor(key).data), key
    qkv = b"".join(bytes(f.tensor(f"blk.0.attn_{x}.weight").data) for x in "qkv")
    assert ctypes.string_at(bufs["blk.0.qkv"].ptr, len(qkv)) == qkv
    st = G.LAST_UPLOAD                                      # the phases, for the load rows
    assert st["via"] == via and st["bytes"] >= sum(f.tensor(k).nbytes for k in ["token_embd.weight"])
    assert all(st[k] >= 0 for k in ("alloc_s", "htod_s", "place_s")) and st["total_s"] >= st["htod_s"]
    del bufs
    everything = G.upload(f, progress=False, via=via)
    for name, t in f.tensors.items():
        assert ctypes.string_at(everything[name].ptr, t.nbytes) == bytes(t.data), name
    del everything
    f.close()


def test_upload_read_pieces_threads_and_buffer_reuse(fake, tiny_ggufs, monkeypatch):
    # pieces of 4 KiB over three page-locked buffers, each piece read by several threads
    monkeypatch.setattr(G, "_PIECE", 4096)
    monkeypatch.setattr(G, "_READ_MIN_STEP", 512)
    monkeypatch.setattr(G, "_read_threads", lambda: 3)
    f = G.open_gguf(tiny_ggufs["Q4_K"])
    tensors = list(f.tensors.values())
    assert sum(t.nbytes for t in tensors) > 4 * 4096          # more pieces than buffers
    out = G.upload(f, progress=False, via="read")
    for t in tensors:
        assert ctypes.string_at(out[t.name].ptr, t.nbytes) == bytes(t.data), t.name
    assert G.LAST_UPLOAD["via"] == "read"
    del out
    f.close()
    with pytest.raises(ValueError, match="closed"):
        G.upload(f, via="read")


def test_upload_read_uses_the_opened_file_and_names_a_truncation(fake, tiny_ggufs, tmp_path):
    import shutil
    src = tmp_path / "m.gguf"
    shutil.copyfile(tiny_ggufs["F16"], src)
    f = G.open_gguf(src)
    want = {n: bytes(t.data) for n, t in f.tensors.items()}
    # a file renamed over the path after open: the upload still reads the file it opened
    other = tmp_path / "other.gguf"
    other.write_bytes(b"\0" * src.stat().st_size)
    os.replace(other, src)
    out = G.upload(f, progress=False, via="read")
    for n, t in f.tensors.items():
        assert ctypes.string_at(out[n].ptr, t.nbytes) == want[n], n
    del out
    f.close()
    # the opened file cut short under the reader: a clear error, not a fault on the mapping
    cut = tmp_path / "cut.gguf"
    shutil.copyfile(tiny_ggufs["F16"], cut)
    f = G.open_gguf(cut)
    last = max(f.tensors.values(), key=lambda t: t.offset)
    with open(cut, "r+b") as fh:
        fh.truncate(last.offset + 1)
    with pytest.raises(GGUFError, match="truncated"):
        G.upload(f, progress=False, via="read")
    f.close()


def test_upload_ways_row_times_each_way(fake, tiny_ggufs):
    from barecuda.bench.decode_rows import upload_ways
    r = upload_ways(tiny_ggufs["Q4_K"])
    f = G.open_gguf(tiny_ggufs["Q4_K"])
    least = sum(t.nbytes for t in f.tensors.values())
    f.close()
    assert set(r) == {"device", "read"}
    for via, (secs, nbytes, phases) in r.items():
        assert secs is not None and secs > 0, phases
        assert nbytes >= least and phases["via"] == via


def test_upload_refuses_mismatched_rows(fake, tiny_ggufs):
    f = G.open_gguf(tiny_ggufs["F16"])
    used = fake.mem_used()
    with pytest.raises(GGUFError, match="as one matrix"):
        G.upload(f, [("bad", ["blk.0.attn_q.weight", "blk.0.ffn_down.weight"])])
    with pytest.raises(GGUFError, match="'nope' is missing"):
        G.upload(f, ["token_embd.weight", "nope"])
    with pytest.raises(ValueError, match="via="):
        G.upload(f, ["token_embd.weight"], via="dma")
    assert fake.mem_used() == used
    f.close()


def test_import_needs_no_numpy():
    import subprocess
    import sys
    code = ("import sys; sys.modules['numpy'] = None; import barecuda.models.gguf as g, barecuda.models as m; "
            "assert 'numpy' not in [k for k, v in sys.modules.items() if v is not None]; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr
