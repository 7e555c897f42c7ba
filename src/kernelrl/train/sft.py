"""Stage 1: supervised fine-tuning on the store's verified programs (TRL SFTTrainer; LoRA via PEFT)."""
from __future__ import annotations

import random

from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.config import SFTSettings, SelfTrainingSettings, TrainConfig
from kernelrl.train.data import Example, sft_examples
from kernelrl.train.metrics import MetricsCallback, MetricsLog
from kernelrl.train.trainer_args import common_args


class StageError(RuntimeError):
    """A stage that cannot run with what it was given, with what to do about it."""


def fine_tune(model, tokenizer, examples: list[Example], settings: SFTSettings | SelfTrainingSettings,
              cfg: TrainConfig, output_dir: str, log: MetricsLog, stage: str, step_offset: int = 0,
              save_steps: int | None = None, resume: str | None = None, extra: dict | None = None):
    """Train `model` on prompt→reply pairs with TRL's SFTTrainer (loss on the reply only); returns the model."""
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        **common_args(cfg, output_dir, save_steps=save_steps),
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        max_length=settings.max_length,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=0,
        completion_only_loss=True,
        shuffle_dataset=True,
    )
    dataset = Dataset.from_list([e.to_row() for e in examples])
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=[MetricsCallback(log, stage, step_offset, extra)])
    trainer.remove_callback(PrinterCallback)  # metrics.jsonl has every step; keep stdout for the summary
    trainer.train(resume_from_checkpoint=resume or None)
    return trainer.model, trainer.state.global_step


def run_sft(model, tokenizer, store: Store, tasks: list[Task], cfg: TrainConfig, log: MetricsLog,
            resume: str | None = None):
    """Stage 1 on the store's fastest verified programs per task; returns (model, examples used)."""
    s = cfg.sft
    examples = sft_examples(store, tasks, max_per_task=s.max_per_task, augment=s.augment,
                            rng=random.Random(cfg.seed), exemplars=cfg.rl.exemplars,
                            strategy=cfg.rl.exemplar_strategy, tau=cfg.rl.tau, min_speedup=s.min_speedup)
    if not examples:
        raise StageError(f"stage sft: the store {cfg.store_path} holds no verified program for any of the "
                         f"{len(tasks)} tasks; seed it (tasks.seeds_dir, tasks.seed_proposers, or `kernelrl "
                         "optimize` into the same store) or disable the stage")
    model, _ = fine_tune(model, tokenizer, examples, s, cfg, f"{cfg.out}/checkpoints/sft/trainer", log, "sft",
                         save_steps=s.save_steps or None, resume=resume)
    return model, examples
