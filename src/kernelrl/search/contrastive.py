"""The contrastive prompt from the store: the verdicts so far, exemplars with measured speedups, recent failures.

`kernelrl optimize` and the training stages both build their prompts here, so the two never drift apart.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from kernelrl.search.exemplars import select_exemplars
from kernelrl.search.prompt import Outcome, PromptConfig, build_messages
from kernelrl.search.store import Store
from kernelrl.task import Task


@dataclass(frozen=True)
class Prompt:
    """Chat messages for one proposal and the store ids of the exemplars they show."""

    messages: list
    parent_ids: tuple[int, ...] = ()


def contrastive_prompt(store: Store, task: Task, rng: random.Random, k: int = 2, strategy: str = "bucket",
                       tau: float = 1.0, max_failures: int = 3, config: PromptConfig = PromptConfig(),
                       exclude: frozenset[str] = frozenset(), n_buckets: int = 5, max_verdicts: int = 0) -> Prompt:
    """Exemplars drawn from the task's verified variants (minus sources in `exclude`), recent failures and, with
    `max_verdicts`, a line for each verdict in the store (at most that many)."""
    pool = [e for e in store.exemplar_pool(task) if e.source not in exclude]
    exemplars = select_exemplars(pool, k=k, strategy=strategy, rng=rng, tau=tau, n_buckets=n_buckets)
    failures = store.recent_failures(task, n=max_failures) if max_failures > 0 else []
    outcomes, left_out = bound_outcomes(store.outcomes(task), max_verdicts) if max_verdicts > 0 else ([], 0)
    messages = build_messages(task, exemplars, failures, config, outcomes, left_out)
    return Prompt(messages=messages, parent_ids=tuple(e.candidate_id for e in exemplars if e.candidate_id))


def bound_outcomes(outcomes: list[Outcome], n: int) -> tuple[list[Outcome], int]:
    """At most n outcomes, in their order: the fastest half of n and the most recent rest; and how many were cut."""
    if len(outcomes) <= n:
        return list(outcomes), 0
    fastest = sorted((o for o in outcomes if o.status == "ok" and o.speedup is not None),
                     key=lambda o: o.speedup, reverse=True)[:n // 2]
    keep = {o.candidate_id for o in fastest}
    for o in reversed(outcomes):
        if len(keep) >= n:
            break
        keep.add(o.candidate_id)
    return [o for o in outcomes if o.candidate_id in keep], len(outcomes) - len(keep)
