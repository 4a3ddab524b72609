"""barecuda.models.tokenizer: the GGUF's own vocabulary through ``tokenizers``.

SmolLM2's byte-level BPE is checked against the ids HF's SmolLM2 tokenizer gives for
its chat markers, against a small pure-Python BPE over the file's merges, and by round
trips; the SentencePiece-style path on a small hand-made vocabulary.
"""
import sys

import pytest

pytest.importorskip("tokenizers")
np = pytest.importorskip("numpy")
gguf = pytest.importorskip("gguf")

from barecuda.models import gguf as G  # noqa: E402
from barecuda.models.tokenizer import Tokenizer  # noqa: E402

MSGS = [{"role": "user", "content": "What is the capital of France?"}]


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _bpe_word(word, ranks, vocab):
    """Plain byte-level BPE of one pre-token (independent of `tokenizers`)."""
    b2u = _bytes_to_unicode()
    parts = [b2u[b] for b in word.encode("utf-8")]
    while len(parts) > 1:
        pairs = [(ranks.get((a, b), 1 << 60), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        r, i = min(pairs)
        if r == 1 << 60:
            break
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [vocab[p] for p in parts]


def test_smollm2_words_match_plain_bpe(smollm_path, smollm_tokenizer):
    f = G.open_gguf(smollm_path)
    ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(f["tokenizer.ggml.merges"])}
    vocab = {t: i for i, t in enumerate(f["tokenizer.ggml.tokens"])}
    words = ["The", " capital", " of", " France", " is", " unbelievably", " tokenization", " Straße", " naïve",
             " GPU", " kernels", " xylophone"]
    want = [i for w in words for i in _bpe_word(w, ranks, vocab)]
    assert smollm_tokenizer.encode("".join(words)) == want
    f.close()


def test_smollm2_specials_digits_and_round_trips(smollm_tokenizer):
    tk = smollm_tokenizer
    assert tk.vocab_size == 49152 and tk.bos_id == 1 and tk.eos_id == 2 and 2 in tk.stop_ids
    assert not tk.add_bos
    # <|im_start|> and <|im_end|> are single ids (1, 2), as in HF's SmolLM2 tokenizer
    assert tk.encode("<|im_start|>system\n")[:1] == [1]
    assert tk.encode("a<|im_end|>b")[1] == 2
    # smollm pre-tokenizer: digits one by one
    assert len(tk.encode("12345")) == 5
    for s in ["The capital of France is", "  two  spaces\n\n\ttab", "héllo wörld ✓ 日本語", "x = f(3.14159) ** 2",
              "<|im_start|>user\nhi<|im_end|>\n"]:
        assert tk.decode(tk.encode(s)) == s
    assert tk.decode(tk.encode("<|im_start|>hi<|im_end|>"), skip_special=True) == "hi"


def test_smollm2_chat_template(smollm_tokenizer, monkeypatch):
    tk = smollm_tokenizer
    pytest.importorskip("jinja2")
    text = tk.apply_chat_template(MSGS)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    ids = tk.encode(text)
    assert ids[:3] == [1, 9690, 198] and ids[-4:] == [1, 520, 9531, 198]   # <|im_start|>assistant\n
    sys_msgs = [{"role": "system", "content": "Be brief."}] + MSGS
    assert tk.apply_chat_template(sys_msgs, add_generation_prompt=False) == \
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    # without jinja2: the ChatML fallback gives the same text
    monkeypatch.setitem(sys.modules, "jinja2", None)
    assert tk.apply_chat_template(MSGS) == text
    assert tk.apply_chat_template(sys_msgs, add_generation_prompt=False) == tk.chatml(sys_msgs, add_generation_prompt=False)


def test_sentencepiece_style_vocabulary(tmp_path):
    """tokenizer.ggml.model == "llama": merges from scores, byte fallback, "▁" for spaces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
        ["▁", "a", "b", "c", "▁a", "ab", "▁ab", "abc", "▁abc", "bc"]
    scores = [0.0] * 259 + [-1.0, -2.0, -2.0, -2.0, -3.0, -4.0, -5.0, -6.0, -0.5, -7.0]
    types = [2, 3, 3] + [6] * 256 + [1] * 10
    path = str(tmp_path / "spm.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tk = Tokenizer(path)
    v = {t: i for i, t in enumerate(tokens)}
    ids = tk.encode("abc ab c")
    assert ids == [1, v["▁abc"], v["▁ab"], v["▁"], v["c"]]
    assert tk.decode(ids, skip_special=True) == "abc ab c"
    z = tk.encode("az", add_bos=False)             # 'z' is not in the vocabulary: byte fallback
    assert z == [v["▁a"], v["<0x7A>"]] and tk.decode(z) == "az"
