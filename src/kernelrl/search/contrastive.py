"""The contrastive prompt from the store: exemplars with measured speedups plus recent failures.

`kernelrl optimize` and the training stages both build their prompts here, so the two never drift apart.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from kernelrl.search.exemplars import select_exemplars
from kernelrl.search.prompt import PromptConfig, build_messages
from kernelrl.search.store import Store
from kernelrl.task import Task


@dataclass(frozen=True)
class Prompt:
    """Chat messages for one proposal and the store ids of the exemplars they show."""

    messages: list
    parent_ids: tuple[int, ...] = ()


def contrastive_prompt(store: Store, task: Task, rng: random.Random, k: int = 2, strategy: str = "bucket",
                       tau: float = 1.0, max_failures: int = 3, config: PromptConfig = PromptConfig(),
                       exclude: frozenset[str] = frozenset(), n_buckets: int = 5) -> Prompt:
    """Exemplars drawn from the task's verified variants (minus sources in `exclude`) and recent failures."""
    pool = [e for e in store.exemplar_pool(task) if e.source not in exclude]
    exemplars = select_exemplars(pool, k=k, strategy=strategy, rng=rng, tau=tau, n_buckets=n_buckets)
    failures = store.recent_failures(task, n=max_failures) if max_failures > 0 else []
    messages = build_messages(task, exemplars, failures, config)
    return Prompt(messages=messages, parent_ids=tuple(e.candidate_id for e in exemplars if e.candidate_id))
