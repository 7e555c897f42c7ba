"""The whole run: tasks and store, seeding, the base policy, the three stages in order (skipping finished
ones), the merged final model and OUT/summary.json."""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.checkpoints import (RunState, checkpoint_step, export_merged, last_trainer_checkpoint,
                                        load_policy, save_policy)
from kernelrl.train.config import STAGES, ConfigError, TrainConfig
from kernelrl.train.data import sft_examples
from kernelrl.train.metrics import MetricsLog
from kernelrl.train.model import build_tiny_model, build_tokenizer
from kernelrl.train.prompts import contrastive_prompt, plain_prompt
from kernelrl.train.reward import RewardPool
from kernelrl.train.seed import seed_store
from kernelrl.train.tasks import load_tasks


@dataclass(frozen=True)
class TrainSummary:
    """What a run did: stages run and skipped, evaluations made, where the final model and metrics are."""

    out: str
    stages_run: tuple[str, ...] = ()
    stages_skipped: tuple[str, ...] = ()
    evaluations: int = 0            # programs the evaluator judged during this invocation
    seeded: dict = field(default_factory=dict)  # seed status -> count
    stage_seconds: dict = field(default_factory=dict)  # stage -> wall time of this invocation (s)
    final_model: str = ""
    metrics: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def run(cfg: TrainConfig, say: Callable[[str], None] = print) -> TrainSummary:
    """Run every enabled, unfinished stage of `cfg`; safe to call again after an interruption."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("kernelrl train runs the policy in one process (use several evaluator devices to "
                           "scale the reward, and use_vllm for generation); launch it with `kernelrl train`, "
                           "not with accelerate/torchrun")
    t0 = time.time()
    out = cfg.out_path
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
    if cfg.tasks.size:
        os.environ["KERNELRL_SIZE"] = cfg.tasks.size  # read by task files inside the evaluator's workers
    _seed_everything(cfg.seed)
    tasks = load_tasks(cfg.tasks.dir, cfg.tasks.names)
    say(f"{len(tasks)} tasks from {cfg.tasks.dir}; store {cfg.store_path}")
    store = Store(cfg.store_path)
    log = MetricsLog(out / "metrics.jsonl", out / "tensorboard" if cfg.tensorboard else None)
    state = RunState.load(out)
    ran, skipped, stage_seconds = [], [], {}
    model_name = cfg.model.path or "tiny"
    try:
        scheduler, device = None, cfg.evaluator.devices[0]
        if cfg.evaluator.service:
            scheduler, device = _service(cfg.evaluator.service, say)
        elif cfg.evaluator.ray:
            scheduler, device = _ray(cfg.evaluator, say)
        with RewardPool(store, cfg.evaluator.devices, cfg.evaluator.eval, proposer="train",
                        model=model_name, scheduler=scheduler) as pool:
            seeded = seed_store(store, tasks, pool, cfg.tasks, device)
            seeded_counts = _count(j.status for j in seeded)
            say(f"seeded the store: {seeded_counts}")
            for j in seeded:
                if j.status != "ok" and j.verdict is not None:
                    say(f"  seed for {j.task} did not pass: {j.status}: {j.verdict.message[:300]}")
            if not state.base:
                state.base = str(prepare_base(cfg, store, tasks))
                state.save()
            model, tokenizer = load_policy(state.base, state.latest_policy(STAGES), cfg.lora, cfg.model.dtype)
            model = _to_policy_device(model, cfg)
            for stage in STAGES:
                if not cfg.enabled(stage) or state.done(stage):
                    skipped.append(stage)
                    continue
                say(f"stage {stage} …")
                t_stage = time.time()
                model = _run_stage(stage, model, tokenizer, store, tasks, pool, cfg, log, state)
                stage_seconds[stage] = round(time.time() - t_stage, 1)
                folder = save_policy(model, tokenizer, out / "checkpoints" / stage / "final")
                state.mark(stage, folder)
                ran.append(stage)
            evaluations = pool.evaluations
        latest = state.latest_policy(STAGES)
        final = ""
        if latest:
            final = str(export_merged(state.base, latest, out / "final", cfg.lora, cfg.model.dtype))
    finally:
        log.close()
        store.close()
    summary = TrainSummary(out=str(out), stages_run=tuple(ran), stages_skipped=tuple(skipped),
                           evaluations=evaluations, seeded=seeded_counts, stage_seconds=stage_seconds,
                           final_model=final,
                           metrics=str(out / "metrics.jsonl"), seconds=round(time.time() - t0, 1))
    (out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=2))
    return summary


def prepare_base(cfg: TrainConfig, store: Store, tasks: list[Task]) -> Path:
    """The base model folder: `model.path`, or a tiny random model (tokenizer fit to this run's texts) saved
    in OUT/base."""
    if cfg.model.path:
        return Path(cfg.model.path)
    base = cfg.out_path / "base"
    if (base / "config.json").exists():
        return base
    rng = random.Random(cfg.seed)
    texts = []
    for task in tasks:
        for m in plain_prompt(task).messages + contrastive_prompt(store, task, rng).messages:
            texts.append(m["content"])
    texts += [e.completion for e in sft_examples(store, tasks, max_per_task=8)]
    tokenizer = build_tokenizer(texts, cfg.model.tiny.vocab_size)
    model = build_tiny_model(cfg.model.tiny, tokenizer)
    return save_policy(model, tokenizer, base)


def _run_stage(stage, model, tokenizer, store, tasks, pool, cfg, log, state):
    resume = last_trainer_checkpoint(cfg.out_path / "checkpoints" / stage / "trainer")
    max_steps = {"sft": cfg.sft.max_steps, "contrastive_rl": cfg.rl.steps}.get(stage, -1)
    if resume and 0 < max_steps <= checkpoint_step(resume):
        # Stopped after the last step's checkpoint: take its weights (a trainer resumed there would step on).
        model, _ = load_policy(state.base, resume, cfg.lora, cfg.model.dtype)
        return _to_policy_device(model, cfg)
    if stage == "sft":
        from kernelrl.train.sft import run_sft
        model, _ = run_sft(model, tokenizer, store, tasks, cfg, log, resume=resume)
    elif stage == "self_training":
        from kernelrl.train.self_training import run_self_training
        model = run_self_training(model, tokenizer, store, tasks, pool, cfg, log, state)
    else:
        from kernelrl.train.contrastive_rl import run_contrastive_rl
        model, _ = run_contrastive_rl(model, tokenizer, store, tasks, pool, cfg, log, resume=resume)
    return model


def _service(url: str, say: Callable[[str], None]):
    """A scheduler over the reward service at `url`, and the first device it judges on (ServiceError if down)."""
    from kernelrl.client import Client, RemoteScheduler

    client = Client(url)
    devices = client.health().get("devices") or ["cpu"]
    say(f"rewards from the service at {url} (devices {', '.join(devices)})")
    return RemoteScheduler(client), devices[0]


def _ray(settings, say: Callable[[str], None]):
    """A RayScheduler on the cluster `settings.ray` names, and the kind of device it judges on."""
    from kernelrl.evaluate.config import EvalConfig
    from kernelrl.scale import make_scheduler

    scheduler = make_scheduler(EvalConfig().with_(**settings.eval), ray=settings.ray)
    say(f"rewards from the Ray cluster {settings.ray} ({scheduler.capacity} jobs at once on "
        f"{scheduler.device_kind})")
    return scheduler, scheduler.device_kind


def _to_policy_device(model, cfg: TrainConfig):
    import torch

    if cfg.policy_device != "cpu" and torch.cuda.is_available():
        return model.to("cuda")
    return model


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def _count(items) -> dict:
    counts: dict[str, int] = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    return counts
