"""Training metrics: one JSON object per logged step in OUT/metrics.jsonl, and TensorBoard when installed."""
from __future__ import annotations

import importlib.util
import json
import math
import threading
import time
from pathlib import Path

from transformers import TrainerCallback

# Keys copied from the trainers' logs (TRL's GRPO logs the mean reward as "reward").
KEYS = ("loss", "reward", "reward_std", "grad_norm", "learning_rate", "entropy", "mean_token_accuracy",
        "completions/mean_length", "frac_reward_zero_std", "step_time")


def tensorboard_available() -> bool:
    """Whether a TensorBoard writer can be created (the `tensorboard` package is installed)."""
    return importlib.util.find_spec("tensorboard") is not None


class MetricsLog:
    """Appends one JSON line per record to `path`; mirrors numbers to TensorBoard under `tb_dir` when given."""

    def __init__(self, path: str | Path, tb_dir: str | Path | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._tb = None
        if tb_dir is not None and tensorboard_available():
            from torch.utils.tensorboard import SummaryWriter
            self._tb = SummaryWriter(str(tb_dir))
        self._steps: dict[str, int] = {}

    def write(self, stage: str, step: int | None = None, **values) -> dict:
        """Record one step of `stage`; non-finite numbers are dropped; returns the record written."""
        if step is None:
            step = self._steps.get(stage, 0) + 1
        self._steps[stage] = step
        record = {"stage": stage, "step": int(step), "time": round(time.time(), 3)}
        for k, v in values.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if math.isfinite(v):
                    record[k] = v
            elif v is not None:
                record[k] = v
        with self._lock:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if self._tb is not None:
                for k, v in record.items():
                    if k not in ("stage", "step", "time") and isinstance(v, (int, float)):
                        self._tb.add_scalar(f"{stage}/{k}", v, step)
                self._tb.flush()
        return record

    def close(self):
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | Path) -> list[dict]:
    """All records of a metrics.jsonl file, in order."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


class MetricsCallback(TrainerCallback):
    """Forwards a TRL/transformers trainer's per-step logs to a MetricsLog under one stage name."""

    def __init__(self, log: MetricsLog, stage: str, step_offset: int = 0, extra: dict | None = None):
        self.log, self.stage, self.offset, self.extra = log, stage, step_offset, dict(extra or {})

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        values = {k: logs[k] for k in KEYS if k in logs}
        values.update({k.split("/", 1)[1]: v for k, v in logs.items() if k.startswith("kernelrl/")})
        if "loss" not in values and "reward" not in values:
            return  # the end-of-training summary (train_loss, runtime) is not a step
        self.log.write(self.stage, step=self.offset + state.global_step, **values, **self.extra)
