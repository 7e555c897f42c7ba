"""The policy: a base causal LM + tokenizer from a local path, or a tiny random one built in code.

Nothing here downloads anything: `from_pretrained` is always called with `local_files_only=True`, and the tiny
model's tokenizer is a byte-level BPE trained on the run's own texts (so any text encodes, and code compresses).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

# ChatML: the template most open code models (Qwen2.5-Coder, DeepSeek-Coder-V2 chat) use.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|pad|>", "<|im_start|>", "<|im_end|>")


class ModelError(RuntimeError):
    """A model or tokenizer that cannot be loaded, with what to do about it."""


@dataclass(frozen=True)
class TinySpec:
    """Shape of a tiny randomly initialised Qwen2-style causal LM (for smoke runs and tests)."""

    hidden_size: int = 64
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    vocab_size: int = 2048          # BPE merges learned from the run's texts up to this size
    max_positions: int = 8192       # tokens
    # Weight init std; larger than the usual 0.02 so a tiny tied-embedding model (and its LoRA adapters)
    # can reach confident next-token distributions within a few dozen steps.
    initializer_range: float = 0.2
    seed: int = 0


# Shapes of common open code models (random weights, for throughput measurements without downloads); the
# vocabulary is always the locally trained tokenizer's, so embeddings are far smaller than the real models'.
SHAPES = {
    "tiny": TinySpec(),
    "qwen2.5-0.5b": TinySpec(hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14, num_kv_heads=2,
                             initializer_range=0.02),
    "qwen2.5-1.5b": TinySpec(hidden_size=1536, intermediate_size=8960, num_layers=28, num_heads=12, num_kv_heads=2,
                             initializer_range=0.02),
    "qwen2.5-7b": TinySpec(hidden_size=3584, intermediate_size=18944, num_layers=28, num_heads=28, num_kv_heads=4,
                           initializer_range=0.02),
}


def build_tokenizer(texts: Iterable[str], vocab_size: int = 2048):
    """A byte-level BPE tokenizer trained locally on `texts`, with a ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts) or [""], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|im_end|>",
                                   bos_token=None, padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(spec: TinySpec, tokenizer):
    """A randomly initialised Qwen2ForCausalLM of shape `spec`, sized to `tokenizer`'s vocabulary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads, max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None, initializer_range=spec.initializer_range,
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def load_tokenizer(path: str | Path):
    """The tokenizer saved at a local `path`; left padding, a pad token and a chat template guaranteed."""
    from transformers import AutoTokenizer

    p = _local_dir(path)
    try:
        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError) as e:
        raise ModelError(f"{p}: cannot load a tokenizer: {e}") from e
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if not tok.chat_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def load_model(path: str | Path, dtype: str = "auto"):
    """The causal LM saved at a local `path` (weights in `dtype`: auto, float32, bfloat16 or float16)."""
    import torch
    from transformers import AutoModelForCausalLM

    p = _local_dir(path)
    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    try:
        return AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ModelError(f"{p}: cannot load a causal LM: {e}") from e


def count_parameters(model) -> int:
    """Number of parameters (trainable or not)."""
    return sum(p.numel() for p in model.parameters())


def _local_dir(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelError(f"{p}: no such model directory; training loads models only from local folders "
                         "(download one first, e.g. `huggingface-cli download Qwen/Qwen2.5-Coder-1.5B-Instruct "
                         "--local-dir DIR`, then set model.path = DIR)")
    return p
