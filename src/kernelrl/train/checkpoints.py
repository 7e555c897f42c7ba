"""Checkpoints: the policy saved after each stage (and round), and OUT/state.json saying what is finished.

A resumed run reads state.json, skips finished stages (and finished self-training rounds) and starts from the
last saved policy; inside a stage, TRL's own `checkpoint-N` folders resume the optimiser mid-stage.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

STATE_FILE = "state.json"


class StateError(RuntimeError):
    """A run folder whose state cannot be read, with what to do about it."""


@dataclass
class RunState:
    """What a run has finished: stage -> policy folder saved at its end, rounds done, the base model folder."""

    path: Path
    base: str = ""
    completed: dict = field(default_factory=dict)      # stage -> folder
    rounds_done: int = 0                               # self-training rounds finished
    round_dirs: list = field(default_factory=list)     # policy folder after each finished round

    @classmethod
    def load(cls, out: str | Path) -> "RunState":
        p = Path(out) / STATE_FILE
        if not p.exists():
            return cls(path=p)
        try:
            d = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise StateError(f"{p}: unreadable run state ({e}); delete it to restart every stage") from e
        return cls(path=p, base=d.get("base", ""), completed=dict(d.get("completed", {})),
                   rounds_done=int(d.get("rounds_done", 0)), round_dirs=list(d.get("round_dirs", [])))

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"base": self.base, "completed": self.completed, "rounds_done": self.rounds_done,
                                   "round_dirs": self.round_dirs}, indent=2))
        os.replace(tmp, self.path)  # atomic: a kill never leaves half a state file

    def done(self, stage: str) -> bool:
        return stage in self.completed

    def mark(self, stage: str, folder: str | Path) -> None:
        self.completed[stage] = str(folder)
        self.save()

    def mark_round(self, folder: str | Path) -> None:
        self.rounds_done += 1
        self.round_dirs.append(str(folder))
        self.save()

    def latest_policy(self, order: tuple[str, ...]) -> str | None:
        """The policy folder of the last finished stage in `order` (or of the last finished round)."""
        latest = None
        for stage in order:
            if stage in self.completed:
                latest = self.completed[stage]
            elif stage == "self_training" and self.round_dirs:
                latest = self.round_dirs[-1]
        return latest


def last_trainer_checkpoint(folder: str | Path) -> str | None:
    """The newest `checkpoint-N` folder a TRL/transformers trainer left in `folder`, if any."""
    p = Path(folder)
    if not p.is_dir():
        return None
    found = [(int(m.group(1)), c) for c in p.iterdir() if (m := re.fullmatch(r"checkpoint-(\d+)", c.name))]
    return str(max(found)[1]) if found else None


def checkpoint_step(checkpoint: str | Path) -> int:
    """The optimiser step a trainer checkpoint was saved at (0 when unknown)."""
    p = Path(checkpoint) / "trainer_state.json"
    try:
        return int(json.loads(p.read_text()).get("global_step", 0))
    except (OSError, ValueError):
        return 0


def save_policy(model, tokenizer, folder: str | Path) -> Path:
    """Save the trainable policy (a LoRA adapter, or the whole model) and its tokenizer to `folder`."""
    p = Path(folder)
    p.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(p))
    tokenizer.save_pretrained(str(p))
    return p


def load_policy(base: str | Path, folder: str | Path | None, lora, dtype: str = "auto"):
    """The policy to train: base + (saved or fresh) LoRA adapter, or the saved/base full model; and its tokenizer."""
    from kernelrl.train.model import load_model, load_tokenizer

    tokenizer = load_tokenizer(folder if folder and (Path(folder) / "tokenizer_config.json").exists() else base)
    if not lora.enabled:
        return load_model(folder or base, dtype), tokenizer
    from peft import LoraConfig, PeftModel, get_peft_model

    model = load_model(base, dtype)
    if folder and (Path(folder) / "adapter_config.json").exists():
        return PeftModel.from_pretrained(model, str(folder), is_trainable=True), tokenizer
    target = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=target,
                     task_type="CAUSAL_LM")
    return get_peft_model(model, cfg), tokenizer


def save_merged(model, tokenizer, folder: str | Path) -> Path:
    """Save the in-memory policy as a standalone model (a LoRA adapter merged into a copy of its base)."""
    import copy

    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    return save_policy(model, tokenizer, folder)


def export_merged(base: str | Path, folder: str | Path, out: str | Path, lora, dtype: str = "auto") -> Path:
    """A standalone model folder (LoRA merged into the base) that vLLM or `transformers` can serve."""
    model, tokenizer = load_policy(base, folder, lora, dtype)
    if lora.enabled:
        model = model.merge_and_unload()
    return save_policy(model, tokenizer, out)
