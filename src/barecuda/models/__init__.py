"""barecuda.models: GGUF models run on barecuda's own kernels (issue 25).

Nothing heavy happens at import: each submodule imports what it needs (numpy,
``tokenizers``, the kernels) only when used.

- ``barecuda.models.gguf``: the GGUF reader (memory-mapped, no numpy needed) and the
  upload of its tensors through the pinned staging path.
- ``barecuda.models.tokenizer``: the tokenizer built from the file's own vocabulary
  (``tokenizers``, optional extra ``barecuda[models]``) and its chat template.
- ``barecuda.models.reference``: a float64 numpy Llama (the correctness reference) and
  numpy dequantizers of the GGUF block formats.
- ``barecuda.models.llama``: the GPU decoder (one CUDA graph launch per token).

See docs/inference.md.
"""
__all__ = ["gguf", "tokenizer", "reference", "llama"]


def __getattr__(name: str):  # PEP 562: submodules on first use
    if name in __all__:
        import importlib
        return importlib.import_module(f"barecuda.models.{name}")
    raise AttributeError(f"module 'barecuda.models' has no attribute {name!r}")
