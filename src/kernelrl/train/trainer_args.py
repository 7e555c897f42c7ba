"""TRL trainer settings every stage shares: device, precision, seed, logging, checkpoint cadence."""
from __future__ import annotations

from kernelrl.train.config import TrainConfig


def common_args(cfg: TrainConfig, output_dir: str, save_steps: int | None = None) -> dict:
    """Keyword arguments for SFTConfig/GRPOConfig; `save_steps` None saves no mid-stage checkpoints."""
    import torch

    on_cpu = cfg.policy_device == "cpu" or not torch.cuda.is_available()
    bf16 = (not on_cpu) and torch.cuda.is_bf16_supported()
    return dict(
        output_dir=output_dir,
        use_cpu=on_cpu,
        bf16=bf16,
        fp16=False,
        seed=cfg.seed,
        data_seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        report_to=[],  # metrics.MetricsLog writes metrics.jsonl and TensorBoard for every stage
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        save_total_limit=2,
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
