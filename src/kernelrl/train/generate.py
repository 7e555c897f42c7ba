"""Sampling replies from the current policy, batch by batch, so judging can start before sampling ends."""
from __future__ import annotations

import importlib.util
from typing import Iterator


def vllm_available() -> bool:
    """Whether vLLM is installed (generation and GRPO rollouts can then use it)."""
    return importlib.util.find_spec("vllm") is not None


def sample_replies(model, tokenizer, prompts: list[list[dict]], n: int, max_new_tokens: int,
                   temperature: float = 1.0, batch: int = 8, seed: int = 0,
                   top_p: float = 1.0) -> Iterator[tuple[int, str]]:
    """Yield (prompt index, reply) for `n` samples of every prompt, one generation batch at a time."""
    import torch

    jobs = [i for i in range(len(prompts)) for _ in range(n)]
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    try:
        for start in range(0, len(jobs), batch):
            chunk = jobs[start:start + batch]
            enc = tokenizer([texts[i] for i in chunk], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(device) for k, v in enc.items()}
            with torch.no_grad():
                out = model.generate(**enc, do_sample=temperature > 0, temperature=max(temperature, 1e-5),
                                     top_p=top_p, top_k=None, max_new_tokens=max_new_tokens,
                                     pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            width = enc["input_ids"].shape[1]
            for i, row in zip(chunk, out):
                yield i, tokenizer.decode(row[width:], skip_special_tokens=True)
    finally:
        model.train(was_training)


def sample_replies_vllm(model_dir: str, tokenizer, prompts: list[list[dict]], n: int, max_new_tokens: int,
                        temperature: float = 1.0, seed: int = 0, top_p: float = 1.0,
                        gpu_memory_utilization: float = 0.5) -> Iterator[tuple[int, str]]:
    """Yield (prompt index, reply) from vLLM serving the merged policy saved in `model_dir`."""
    if not vllm_available():
        from kernelrl.train.config import ConfigError
        raise ConfigError("vLLM generation was asked for but vLLM is not installed; `pip install vllm` or set "
                          "use_vllm = false")
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_dir, seed=seed, gpu_memory_utilization=gpu_memory_utilization)
    params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed)
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    try:
        for i, result in enumerate(llm.generate(texts, params)):
            for o in result.outputs:
                yield i, o.text
    finally:
        del llm
