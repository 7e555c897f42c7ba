"""Stage 3: contrastive RL. TRL's GRPOTrainer on contrastive prompts built live from the store; the reward is
the evaluator's verdict, shaped per task (CUDA-L1: (r − μ)/σ clipped, failures and hacks at the bottom). Every
verdict goes back into the store, so later prompts show better exemplars."""
from __future__ import annotations

import itertools
import random
import time
from collections import Counter

from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.config import ConfigError, TrainConfig
from kernelrl.train.metrics import MetricsCallback, MetricsLog
from kernelrl.train.prompts import contrastive_prompt
from kernelrl.train.reward import RewardPool, Rollout
from kernelrl.train.shaping import shape_rewards
from kernelrl.train.trainer_args import common_args

PROPOSER = "train:contrastive_rl"


class EvaluatorReward:
    """A TRL reward function: judges each completion with the evaluator pool and shapes the verdicts."""

    __name__ = "evaluator"  # TRL names the logged reward column after the function

    def __init__(self, store: Store, tasks: list[Task], pool: RewardPool, cfg: TrainConfig):
        self.store, self.pool, self.cfg = store, pool, cfg
        self.tasks = {t.name: t for t in tasks}
        self.judged = 0

    def __call__(self, prompts, completions, task, parent_ids=None, log_metric=None, **_) -> list[float | None]:
        parent_ids = parent_ids or [()] * len(completions)
        rollouts = [Rollout(task=self.tasks[name], reply=completion_text(c), prompt=_messages(p),
                            parent_ids=tuple(pids))
                    for p, c, name, pids in zip(prompts, completions, task, parent_ids)]
        t0 = time.monotonic()
        judged = self.pool.judge(rollouts, PROPOSER)
        judge_s = time.monotonic() - t0
        self.judged += len(judged)
        population = {name: [e.speedup for e in self.store.exemplar_pool(self.tasks[name])] for name in set(task)}
        rewards: list[float | None] = list(shape_rewards([j.outcome for j in judged], population, self.cfg.reward))
        for i, j in enumerate(judged):
            if j.status == "error":
                rewards[i] = None  # the evaluator failed, not the program: no signal either way
        if log_metric is not None:
            counts = Counter(j.status for j in judged)
            log_metric("kernelrl/correct", counts["ok"] / len(judged))
            log_metric("kernelrl/rejected", counts["rejected"] / len(judged))
            log_metric("kernelrl/no_code", counts["no_code"] / len(judged))
            log_metric("kernelrl/judge_seconds", judge_s)
            log_metric("kernelrl/evaluated", float(sum(j.evaluated for j in judged)))
            speedups = [j.speedup for j in judged if j.speedup is not None]
            if speedups:
                log_metric("kernelrl/best_speedup", max(speedups))
        return rewards


# Live prompt sources by key: `datasets` fingerprints a generator's arguments by pickling them, and a store
# (an open SQLite connection) does not pickle, so the generator receives only this key.
_SOURCES: dict[str, tuple] = {}


def _rows(source: str):
    """Rows {prompt, task, parent_ids} forever; each prompt is built from the store when it is drawn."""
    store, tasks, cfg = _SOURCES[source]
    rng = random.Random(cfg.seed)
    order = list(tasks)
    for _ in itertools.count():
        rng.shuffle(order)
        for task in order:
            p = contrastive_prompt(store, task, rng, k=cfg.rl.exemplars, strategy=cfg.rl.exemplar_strategy,
                                   tau=cfg.rl.tau, max_failures=cfg.rl.max_failures)
            yield {"prompt": p.messages, "task": task.name, "parent_ids": list(p.parent_ids)}


def prompt_stream(store: Store, tasks: list[Task], cfg: TrainConfig):
    """An endless IterableDataset of contrastive prompts, built from the store as they are drawn."""
    from datasets import IterableDataset

    key = f"{cfg.out}:{id(store)}"
    _SOURCES[key] = (store, tasks, cfg)
    return IterableDataset.from_generator(_rows, gen_kwargs={"source": key})


def run_contrastive_rl(model, tokenizer, store: Store, tasks: list[Task], pool: RewardPool, cfg: TrainConfig,
                       log: MetricsLog, resume: str | None = None):
    """Stage 3 for `rl.steps` optimiser steps; returns (model, reward function with its counters)."""
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    r = cfg.rl
    if cfg.use_vllm:
        from kernelrl.train.generate import vllm_available
        if not vllm_available():
            raise ConfigError("use_vllm = true but vLLM is not installed; `pip install vllm` or set it false")
    completions_per_step = r.prompts_per_step * r.num_generations
    micro = r.micro_batch or r.num_generations
    if completions_per_step % micro:
        raise ValueError(f"rl.micro_batch = {micro} must divide prompts_per_step × num_generations = "
                         f"{completions_per_step}")
    args = GRPOConfig(
        **common_args(cfg, f"{cfg.out}/checkpoints/contrastive_rl/trainer", save_steps=r.save_steps or None),
        max_steps=r.steps,
        learning_rate=r.learning_rate,
        lr_scheduler_type="constant",
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=completions_per_step // micro,
        num_generations=r.num_generations,
        max_completion_length=r.max_completion_length,
        temperature=r.temperature,
        top_p=r.top_p,
        beta=r.beta,
        loss_type=r.loss_type,
        shuffle_dataset=False,
        use_vllm=cfg.use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory,
        mask_truncated_completions=False,
    )
    dataset = prompt_stream(store, tasks, cfg)
    reward = EvaluatorReward(store, tasks, pool, cfg)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[MetricsCallback(log, "contrastive_rl")])
    trainer.remove_callback(PrinterCallback)
    trainer.train(resume_from_checkpoint=resume or None)
    return trainer.model, reward


def completion_text(completion) -> str:
    """The reply in a TRL completion: plain text, or the assistant turns of a conversational one."""
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") for m in completion if m.get("role") == "assistant")
    return str(completion)


def _messages(prompt):
    return prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
