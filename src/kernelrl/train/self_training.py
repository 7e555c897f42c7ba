"""Stage 2: self-training. Sample from the current policy, keep what the evaluator calls correct (reward 1/0),
fine-tune on it; repeat for the configured rounds. Sampling and judging overlap: each generation batch goes to
the evaluators while the next one is sampled."""
from __future__ import annotations

import random
import statistics
from collections import Counter

from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.checkpoints import RunState, save_merged, save_policy
from kernelrl.train.config import TrainConfig
from kernelrl.train.data import Example
from kernelrl.train.generate import sample_replies, sample_replies_vllm
from kernelrl.train.metrics import MetricsLog
from kernelrl.train.prompts import contrastive_prompt, plain_prompt
from kernelrl.train.reward import Judged, RewardPool, Rollout
from kernelrl.train.sft import fine_tune
from kernelrl.train.shaping import binary_reward

PROPOSER = "train:self_training"


def collect(model, tokenizer, store: Store, tasks: list[Task], pool: RewardPool, cfg: TrainConfig,
            round_index: int) -> list[tuple[Rollout, Judged]]:
    """Sample `samples_per_task` replies per task and judge them, judging while sampling continues."""
    s = cfg.self_training
    rng = random.Random(cfg.seed * 1000 + round_index)
    # Half the prompts show the task alone (as in stage 1), half show verified variants (as in stage 3).
    prompts = []
    for task in tasks:
        prompts.append((task, plain_prompt(task)))
        prompts.append((task, contrastive_prompt(store, task, rng, k=cfg.rl.exemplars,
                                                 strategy=cfg.rl.exemplar_strategy, tau=cfg.rl.tau,
                                                 max_failures=cfg.rl.max_failures)))
    per_prompt = max(1, s.samples_per_task // 2)
    messages = [p.messages for _, p in prompts]
    if cfg.use_vllm:
        merged = save_merged(model, tokenizer, f"{cfg.out}/checkpoints/self_training/round-{round_index + 1}/merged")
        replies = sample_replies_vllm(str(merged), tokenizer, messages, n=per_prompt,
                                      max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                                      seed=cfg.seed + round_index, top_p=s.top_p,
                                      gpu_memory_utilization=cfg.vllm_gpu_memory)
    else:
        replies = sample_replies(model, tokenizer, messages, n=per_prompt, max_new_tokens=s.max_new_tokens,
                                 temperature=s.temperature, batch=s.generation_batch, seed=cfg.seed + round_index,
                                 top_p=s.top_p)
    pending = []
    for i, reply in replies:
        task, prompt = prompts[i]
        rollout = Rollout(task=task, reply=reply, prompt=prompt.messages, parent_ids=prompt.parent_ids)
        pending.append((rollout, pool.submit(rollout, PROPOSER)))
    return [(r, f.result()) for r, f in pending]


def run_self_training(model, tokenizer, store: Store, tasks: list[Task], pool: RewardPool, cfg: TrainConfig,
                      log: MetricsLog, state: RunState):
    """Stage 2, resuming after the rounds `state` says are done; returns the model."""
    s = cfg.self_training
    step = 0
    for r in range(state.rounds_done, s.rounds):
        judged = collect(model, tokenizer, store, tasks, pool, cfg, r)
        rewards = [binary_reward(j.outcome) for _, j in judged]
        statuses = Counter(j.status for _, j in judged)
        speedups = [j.speedup for _, j in judged if j.speedup is not None]
        kept = _dedupe([Example(j.task, ro.prompt, ro.reply, j.speedup, j.candidate_id)
                        for ro, j in judged if j.status == "ok"])
        step += 1
        log.write("self_training", step=step, reward=statistics.fmean(rewards) if rewards else 0.0,
                  round=r + 1, samples=len(judged), kept=len(kept), evaluated=sum(j.evaluated for _, j in judged),
                  best_speedup=max(speedups) if speedups else None, statuses=dict(statuses))
        if kept:
            model, steps = fine_tune(model, tokenizer, kept, s, cfg,
                                     f"{cfg.out}/checkpoints/self_training/round-{r + 1}/trainer", log,
                                     "self_training", step_offset=step,
                                     extra={"round": r + 1})
            step += steps
        folder = save_policy(model, tokenizer, f"{cfg.out}/checkpoints/self_training/round-{r + 1}")
        state.mark_round(folder)
    return model


def _dedupe(examples: list[Example]) -> list[Example]:
    seen, out = set(), []
    for e in examples:
        key = (e.task, e.completion)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out
