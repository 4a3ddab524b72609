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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and stubtest; at run time each loads on first use
    from barecuda.models import gguf, llama, reference, synthetic, tokenizer, torch_llama

__all__ = ["gguf", "tokenizer", "reference", "llama", "synthetic", "torch_llama"]


def __getattr__(name: str) -> Any:  # PEP 562: submodules on first use
    if name in __all__:
        import importlib
        return importlib.import_module(f"barecuda.models.{name}")
    raise AttributeError(f"module 'barecuda.models' has no attribute {name!r}")
