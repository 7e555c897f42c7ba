"""Training on the GPU: a smoke run of all three stages with the GPU evaluator, and throughput probes.

Usage (from the repository root, on the GPU machine):
    python benchmarks/train_device.py OUT_DIR [--device cuda:0] [--rl-steps 6] [--shapes qwen2.5-0.5b,qwen2.5-1.5b]
                                      [--skip-pipeline] [--skip-throughput]
Writes OUT_DIR/run/ (metrics.jsonl, store.db, checkpoints), OUT_DIR/train_device.json and OUT_DIR/train_device.md.

1. pipeline: `kernelrl train`'s smoke preset on the GPU (tiny random model built locally, the smoke tasks, the
   evaluator with its default settings on the GPU), with more RL steps; per-stage wall time, evaluator seconds
   per judged program, GRPO step time.
2. throughput: random-weight models of real shapes and vocabulary size (no download), bf16 + LoRA r=64:
   generation tokens/s (HF generate, one GRPO group of 8 rollouts) and LoRA training tokens/s.
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch

from kernelrl.search.store import Store
from kernelrl.train.config import EvaluatorSettings, smoke_config
from kernelrl.train.metrics import read_metrics
from kernelrl.train.model import SHAPES, build_tiny_model, load_tokenizer
from kernelrl.train.pipeline import run

QWEN_VOCAB = 151936  # Qwen2.5's vocabulary size


def pipeline(out: Path, device: str, rl_steps: int) -> dict:
    cfg = smoke_config(out / "run", device=device)
    cfg = cfg.with_(rl=replace(cfg.rl, steps=rl_steps, prompts_per_step=2),
                    self_training=replace(cfg.self_training, samples_per_task=8, generation_batch=8),
                    evaluator=EvaluatorSettings(devices=(device,), eval={}))  # the evaluator's defaults
    t0 = time.monotonic()
    summary = run(cfg)
    wall = time.monotonic() - t0
    stages = defaultdict(list)
    for r in read_metrics(out / "run" / "metrics.jsonl"):
        stages[r["stage"]].append(r)
    rl = stages.get("contrastive_rl", [])
    with Store(out / "run" / "store.db") as store:
        judged = [c.verdict for t in store.tasks() for c in store.candidates(t) if c.verdict and c.verdict.seconds > 0]
    seconds = sorted({(v.candidate, v.seconds) for v in judged})
    return {
        "device": device, "summary": summary.to_dict(), "wall_s": round(wall, 1), "stage_s": summary.stage_seconds,
        "evaluations": len(seconds),
        "eval_seconds_median": round(statistics.median(s for _, s in seconds), 2) if seconds else None,
        "eval_seconds_max": round(max(s for _, s in seconds), 2) if seconds else None,
        "rl_step_time_s": [round(r.get("step_time", 0.0), 2) for r in rl],
        "rl_judge_s": [round(r.get("judge_seconds", 0.0), 2) for r in rl],
        "rl_reward": [round(r["reward"], 3) for r in rl if "reward" in r],
        "rl_correct": [r.get("correct") for r in rl],
        "sft_loss_first_last": [stages["sft"][0].get("loss"), stages["sft"][-1].get("loss")] if stages["sft"] else [],
    }


def throughput(shape: str, tokenizer, device: str, prompt_tokens: int, new_tokens: int, group: int,
               train_tokens: int, micro_batch: int) -> dict:
    from peft import LoraConfig, get_peft_model

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    model = build_tiny_model(replace(SHAPES[shape], max_positions=max(8192, train_tokens)), tokenizer)
    # The real models' vocabulary (its embedding and output layer cost as much as a few blocks); sampled ids
    # beyond the local tokenizer are never decoded here, only counted.
    model.resize_token_embeddings(QWEN_VOCAB)
    model = model.to(device=device, dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(10, len(tokenizer), (group, prompt_tokens), device=device)
    model.eval()
    with torch.no_grad():
        model.generate(ids[:, :64], max_new_tokens=8, min_new_tokens=8, do_sample=True)  # warm-up
        torch.cuda.synchronize(device)
        t0 = time.monotonic()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=True, temperature=1.0,
                             pad_token_id=tokenizer.pad_token_id)
        torch.cuda.synchronize(device)
        gen_s = time.monotonic() - t0
    generated = (out.shape[1] - prompt_tokens) * group
    lora = get_peft_model(model, LoraConfig(r=64, lora_alpha=128, target_modules="all-linear", task_type="CAUSAL_LM"))
    lora.train()
    lora.gradient_checkpointing_enable()
    lora.enable_input_require_grads()
    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-5)
    batch = torch.randint(10, len(tokenizer), (micro_batch, train_tokens), device=device)

    def step():
        loss = lora(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up
    torch.cuda.synchronize(device)
    t0 = time.monotonic()
    steps = 3
    for _ in range(steps):
        step()
    torch.cuda.synchronize(device)
    train_s = (time.monotonic() - t0) / steps
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    return {"shape": shape, "params_M": round(params / 1e6, 1), "vocab": QWEN_VOCAB,
            "gen_group": group, "gen_prompt_tokens": prompt_tokens, "gen_new_tokens": new_tokens,
            "gen_s": round(gen_s, 2), "gen_tokens_per_s": round(generated / gen_s, 1),
            "train_micro_batch": micro_batch, "train_seq_tokens": train_tokens, "train_step_s": round(train_s, 3),
            "train_tokens_per_s": round(micro_batch * train_tokens / train_s, 1), "peak_mem_gib": round(peak, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--rl-steps", type=int, default=6)
    ap.add_argument("--shapes", default="qwen2.5-0.5b,qwen2.5-1.5b")
    ap.add_argument("--prompt-tokens", type=int, default=1500)
    ap.add_argument("--new-tokens", type=int, default=1024)
    ap.add_argument("--train-tokens", type=int, default=4096)
    ap.add_argument("--skip-pipeline", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(args.device) if torch.cuda.is_available() else "cpu",
              "torch": torch.__version__, "python": platform.python_version(), "date": time.strftime("%F %T")}
    for lib in ("transformers", "trl", "peft"):
        result[lib] = __import__(lib).__version__
    if not args.skip_pipeline:
        result["pipeline"] = pipeline(args.out, args.device, args.rl_steps)
        _write(args.out, result)
    if not args.skip_throughput:
        tok_dir = args.out / "run" / "base"
        if not tok_dir.exists():
            raise SystemExit(f"{tok_dir}: no tokenizer yet; run without --skip-pipeline first")
        tokenizer = load_tokenizer(tok_dir)
        result["throughput"] = []
        for shape in [s for s in args.shapes.split(",") if s]:
            result["throughput"].append(throughput(shape, tokenizer, args.device, args.prompt_tokens,
                                                   args.new_tokens, 8, args.train_tokens, 2))
            gc.collect()  # the previous shape's model and optimiser go before the next is built
            _write(args.out, result)
    _write(args.out, result)
    print(json.dumps(result, indent=2))


def _write(out: Path, result: dict) -> None:
    (out / "train_device.json").write_text(json.dumps(result, indent=2))
    lines = [f"# Training on {result['device']}", "",
             f"torch {result['torch']}, transformers {result['transformers']}, trl {result['trl']}, "
             f"peft {result['peft']}; {result['date']}", ""]
    p = result.get("pipeline")
    if p:
        lines += [f"## Smoke run of all three stages (tiny random model, evaluator on {p['device']})", "",
                  f"- wall time {p['wall_s']} s (seeding and model building included); per stage (s): {p['stage_s']}",
                  f"- programs evaluated: {p['evaluations']}; evaluator seconds per program: median "
                  f"{p['eval_seconds_median']}, max {p['eval_seconds_max']}",
                  f"- GRPO step times (s): {p['rl_step_time_s']}, of which judging (s): {p['rl_judge_s']}; "
                  f"mean rewards: {p['rl_reward']}",
                  f"- SFT loss first → last: {p['sft_loss_first_last']}", ""]
    if result.get("throughput"):
        lines += ["## Throughput of real model shapes (random bf16 weights, LoRA r=64, HF generate)", "",
                  "| shape | params (M) | generate tok/s (group of 8) | LoRA train tok/s | train step (s) | peak GiB |",
                  "|---|---|---|---|---|---|"]
        for t in result["throughput"]:
            lines.append(f"| {t['shape']} | {t['params_M']} | {t['gen_tokens_per_s']} | {t['train_tokens_per_s']} | "
                         f"{t['train_step_s']} | {t['peak_mem_gib']} |")
    (out / "train_device.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
