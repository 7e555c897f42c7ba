"""Supervised examples (prompt → reply) from the store: verified candidates, best first, deduplicated."""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from kernelrl.search.parse import SECTIONS, parse_reply
from kernelrl.search.prompt import PromptConfig
from kernelrl.search.store import CandidateRecord, Store
from kernelrl.task import Task
from kernelrl.train.prompts import contrastive_prompt, plain_prompt


@dataclass(frozen=True)
class Example:
    """One supervised pair: chat messages in, the assistant's reply out, and where it came from."""

    task: str
    prompt: list
    completion: str
    speedup: float | None = None
    candidate_id: int | None = None

    def to_row(self) -> dict:
        """The conversational prompt-completion row TRL's SFTTrainer reads."""
        return {"prompt": self.prompt, "completion": [{"role": "assistant", "content": self.completion}]}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Example":
        return cls(**d)


def reply_for(rec: CandidateRecord) -> str:
    """The reply to train on: the stored LLM reply when it yields this very source, else a synthesised one."""
    if rec.reply and parse_reply(rec.reply).code == _tidy(rec.source):
        return rec.reply
    device = rec.verdict.device if rec.verdict else "the target device"
    return (f"**{SECTIONS[0]}**\nThis program was measured at {rec.speedup:.3f}x the reference's speed on "
            f"{device}.\n\n**{SECTIONS[1]}**\nIt computes the same outputs as the reference with the "
            f"operations below.\n\n**{SECTIONS[2]}**\n```python\n{_tidy(rec.source)}```\n")


def sft_examples(store: Store, tasks: list[Task], max_per_task: int = 2, augment: int = 0,
                 rng: random.Random | None = None, config: PromptConfig = PromptConfig(),
                 exemplars: int = 2, strategy: str = "bucket", tau: float = 1.0,
                 min_speedup: float = 0.0) -> list[Example]:
    """Per task, its `max_per_task` fastest verified distinct programs (at least `min_speedup` × the
    reference), each with the plain prompt plus `augment` copies whose contrastive prompts show other verified
    variants (never the answer itself)."""
    rng = rng or random.Random(0)
    out: list[Example] = []
    for task in tasks:
        seen: set[str] = set()
        for rec in store.best_candidates(task, n=max_per_task * 4):
            if rec.speedup is None or rec.speedup < min_speedup:
                break  # fastest first: every later one is slower still
            key = _normalised(rec.source)
            if key in seen:
                continue  # the same program up to blank lines and trailing spaces
            seen.add(key)
            reply = reply_for(rec)
            out.append(Example(task.name, plain_prompt(task, config).messages, reply, rec.speedup, rec.id))
            for _ in range(augment):
                p = contrastive_prompt(store, task, rng, k=exemplars, strategy=strategy, tau=tau, max_failures=0,
                                       config=config, exclude=frozenset({rec.source}))
                out.append(Example(task.name, p.messages, reply, rec.speedup, rec.id))
            if len(seen) >= max_per_task:
                break
    return out


def _tidy(code: str) -> str:
    return code.strip("\n").rstrip() + "\n"


def _normalised(source: str) -> str:
    """The source up to trailing spaces and blank lines."""
    return "\n".join(ln.rstrip() for ln in source.splitlines() if ln.strip())
