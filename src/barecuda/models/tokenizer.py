"""The tokenizer of a GGUF file, built from its own vocabulary, through ``tokenizers``.

``tokenizers`` (optional extra ``barecuda[models]``) runs the algorithm; the data —
tokens, merges, scores, token types, special ids, pre-tokenizer name and chat template —
come from the file's ``tokenizer.*`` keys, nothing is downloaded.

- ``tokenizer.ggml.model == "gpt2"`` (byte-level BPE: SmolLM2, Llama 3, Qwen, ...):
  ``models.BPE(vocab, merges)`` with the byte-level pre-tokenizer; ``tokenizer.ggml.pre``
  picks the split regex llama.cpp uses for that name (``smollm``/``starcoder``: digits
  one by one, then GPT-2's regex; ``llama-bpe``: Llama 3's regex; anything else: GPT-2's).
- ``tokenizer.ggml.model == "llama"`` (SentencePiece BPE: Llama 1/2, Mistral):
  ``models.BPE`` with merges derived from the scores (every split of a token into two
  tokens, ranked by the merged token's score, as HF's SentencePiece converter does),
  byte fallback, "▁" for spaces.
- Control and user-defined tokens (``token_type`` 3 and 4) are special: matched whole
  in the text, skipped by ``decode(..., skip_special=True)``.
- The chat template (``tokenizer.chat_template``) is rendered with jinja2 when it is
  installed; without it, ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``, what
  SmolLM2's template produces) is used when the template is ChatML, else an error.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional, Sequence

from barecuda.models.gguf import GGUFError, GGUFFile, open_gguf

__all__ = ["Tokenizer"]

_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_DIGITS_FIRST = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}


def _need_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ImportError('the GGUF tokenizer needs the "tokenizers" package (from a barecuda checkout: '
                          'pip install ".[models]")') from None
    return tokenizers


class Tokenizer:
    """Encode and decode with a GGUF file's vocabulary.

    Parameters
    ----------
    source : GGUFFile or path
    """

    def __init__(self, source: Any) -> None:
        f = source if isinstance(source, GGUFFile) else open_gguf(source)
        tk = _need_tokenizers()
        from tokenizers import AddedToken, decoders, models, pre_tokenizers, Regex, normalizers
        self.path = f.path
        self.model = str(f["tokenizer.ggml.model"])
        tokens: List[str] = list(f["tokenizer.ggml.tokens"])
        types: List[int] = list(f.get("tokenizer.ggml.token_type", [1] * len(tokens)))
        self.tokens = tokens
        self.bos_id: Optional[int] = f.get("tokenizer.ggml.bos_token_id")
        self.eos_id: Optional[int] = f.get("tokenizer.ggml.eos_token_id")
        eot = f.get("tokenizer.ggml.eot_token_id")
        self.add_bos = bool(f.get("tokenizer.ggml.add_bos_token", self.model == "llama"))
        self.chat_template: Optional[str] = f.get("tokenizer.chat_template")
        self.pre = str(f.get("tokenizer.ggml.pre", "default"))
        vocab = {t: i for i, t in enumerate(tokens)}
        if self.model == "gpt2":
            merges_raw = f["tokenizer.ggml.merges"]
            merges = [tuple(m.split(" ", 1)) for m in merges_raw]
            bpe = models.BPE(vocab, merges, fuse_unk=False, ignore_merges=self.pre == "llama-bpe")
            tok = tk.Tokenizer(bpe)
            if self.pre == "llama-bpe":
                tok.pre_tokenizer = pre_tokenizers.Sequence([
                    pre_tokenizers.Split(Regex(_LLAMA3_RE), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            elif self.pre in _DIGITS_FIRST:
                tok.pre_tokenizer = pre_tokenizers.Sequence([
                    pre_tokenizers.Digits(individual_digits=True),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
            else:
                tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
            tok.decoder = decoders.ByteLevel()
        elif self.model == "llama":
            scores = list(f.get("tokenizer.ggml.scores", [0.0] * len(tokens)))
            merges = []
            for t, i in vocab.items():
                if types[i] != 1 or len(t) < 2:
                    continue
                for k in range(1, len(t)):
                    a, b = t[:k], t[k:]
                    if a in vocab and b in vocab:
                        merges.append((scores[i], vocab[a], vocab[b], a, b))
            merges.sort(key=lambda m: (-m[0], m[1], m[2]))
            unk = f.get("tokenizer.ggml.unknown_token_id", 0)
            bpe = models.BPE(vocab, [(m[3], m[4]) for m in merges], unk_token=tokens[unk] if unk is not None else None,
                             fuse_unk=True, byte_fallback=True)
            tok = tk.Tokenizer(bpe)
            norm: List[Any] = [normalizers.Replace(" ", "\u2581")]
            if f.get("tokenizer.ggml.add_space_prefix", True):
                norm.insert(0, normalizers.Prepend("\u2581"))
            tok.normalizer = normalizers.Sequence(norm)
            dec = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
            if f.get("tokenizer.ggml.add_space_prefix", True):
                dec.append(decoders.Strip(" ", 1, 0))
            tok.decoder = decoders.Sequence(dec)
        else:
            raise GGUFError(f"{f.path}: tokenizer.ggml.model = {self.model!r} is not supported (gpt2, llama)")
        self.special_ids = {i for i, ty in enumerate(types) if ty in (3, 4)}
        specials = [AddedToken(tokens[i], special=types[i] == 3, normalized=False) for i in sorted(self.special_ids)]
        if specials:
            tok.add_special_tokens([s for s in specials if s.special])
            tok.add_tokens([s for s in specials if not s.special])
        self._tok = tok
        self.stop_ids = {i for i in (self.eos_id, eot) if i is not None}
        im_end = vocab.get("<|im_end|>")
        if im_end is not None:
            self.stop_ids.add(im_end)

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, *, add_bos: Optional[bool] = None) -> List[int]:
        """Token ids of ``text`` (special tokens written in the text are matched whole)."""
        ids = list(self._tok.encode(text, add_special_tokens=False).ids)
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=skip_special))

    def apply_chat_template(self, messages: Sequence[Dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` ([{"role": ..., "content": ...}]), from the file's template."""
        tpl = self.chat_template
        if tpl is None:
            raise GGUFError(f"{self.path}: the file has no tokenizer.chat_template")
        jinja2: Any
        try:
            jinja2 = importlib.import_module("jinja2")      # optional (the tokenizers extra)
        except ImportError:
            jinja2 = None
        if jinja2 is not None:
            env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False,
                                     keep_trailing_newline=True)
            env.globals["raise_exception"] = _raise_exception
            bos = self.tokens[self.bos_id] if self.bos_id is not None else ""
            eos = self.tokens[self.eos_id] if self.eos_id is not None else ""
            return env.from_string(tpl).render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                               bos_token=bos, eos_token=eos)
        return self.chatml(messages, add_generation_prompt=add_generation_prompt)

    def chatml(self, messages: Sequence[Dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """ChatML, as SmolLM2's template writes it (its default system message included when the
        template has one and the messages do not start with a system message)."""
        tpl = self.chat_template or ""
        if "<|im_start|>" not in tpl:
            raise GGUFError(f"{self.path}: the chat template is not ChatML and jinja2 is not installed "
                            "(pip install jinja2)")
        out = []
        marker = "'<|im_start|>system\n"
        if messages and messages[0]["role"] != "system" and marker in tpl:
            start = tpl.index(marker) + 1
            end = tpl.index("<|im_end|>", start) + len("<|im_end|>")
            out.append(tpl[start:end] + "\n")
        for m in messages:
            out.append(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n")
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n")
        return "".join(out)


def _raise_exception(msg: str) -> None:
    raise GGUFError(f"chat template: {msg}")
