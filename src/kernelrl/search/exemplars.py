"""Which earlier variants a prompt shows, and how speedups become per-task scores.

CUDA-L1's selection: put the verified variants of a task into score buckets, draw buckets with
probability softmax((bucket mean − global mean)/τ), and show one variant from each of two different
buckets, so the model sees a contrast. Alternatives: best-k, random, diverse (spread over the range).
All functions here are pure (randomness comes in as a seeded `random.Random`).
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass

STRATEGIES = ("bucket", "best", "random", "diverse")
SCORE_CLIP = 1.5


@dataclass(frozen=True)
class Exemplar:
    """A verified variant of the task shown in a prompt: its code and measured speedup (× over reference)."""

    source: str
    speedup: float
    candidate_id: int | None = None
    proposer: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Exemplar":
        return cls(**d)


def normalize_scores(rewards: list[float], clip: float = SCORE_CLIP) -> list[float]:
    """Per-task score normalisation: (r − μ)/σ clipped to [−clip, clip]; all zeros when σ is 0."""
    if not rewards:
        return []
    mu = statistics.fmean(rewards)
    sigma = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    if sigma == 0.0 or not math.isfinite(sigma):
        return [0.0 for _ in rewards]
    return [max(-clip, min(clip, (r - mu) / sigma)) for r in rewards]


def score(speedup: float) -> float:
    """The score buckets are cut on: log2 of the speedup, so 2× up and 2× down are equally far apart."""
    return math.log2(max(speedup, 1e-9))


def bucketize(pool: list[Exemplar], n_buckets: int) -> list[list[Exemplar]]:
    """Split the pool into up to n_buckets equal-width score ranges; empty ranges are dropped."""
    if not pool:
        return []
    scores = [score(e.speedup) for e in pool]
    lo, hi = min(scores), max(scores)
    if hi - lo < 1e-12 or n_buckets <= 1:
        return [list(pool)]
    width = (hi - lo) / n_buckets
    buckets: list[list[Exemplar]] = [[] for _ in range(n_buckets)]
    for e, s in zip(pool, scores):
        buckets[min(int((s - lo) / width), n_buckets - 1)].append(e)
    return [b for b in buckets if b]


def bucket_weights(buckets: list[list[Exemplar]], tau: float) -> list[float]:
    """Sampling probability of each bucket: softmax((bucket mean − global mean)/τ) over scores."""
    if tau <= 0:
        raise ValueError(f"temperature τ must be > 0, got {tau}")
    all_scores = [score(e.speedup) for b in buckets for e in b]
    mu = statistics.fmean(all_scores)
    logits = [(statistics.fmean(score(e.speedup) for e in b) - mu) / tau for b in buckets]
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [x / total for x in exps]


def select_exemplars(pool: list[Exemplar], k: int = 2, strategy: str = "bucket", rng: random.Random | None = None,
                     tau: float = 1.0, n_buckets: int = 5) -> list[Exemplar]:
    """Pick up to k exemplars from the verified pool, ordered slowest to fastest."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown exemplar strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
    rng = rng or random.Random(0)
    pool = _dedupe(pool)
    if k <= 0 or not pool:
        return []
    if len(pool) <= k:
        chosen = list(pool)
    elif strategy == "best":
        chosen = sorted(pool, key=lambda e: e.speedup, reverse=True)[:k]
    elif strategy == "random":
        chosen = rng.sample(pool, k)
    elif strategy == "diverse":
        chosen = _diverse(pool, k)
    else:
        chosen = _bucket_sample(pool, k, rng, tau, n_buckets)
    return sorted(chosen, key=lambda e: e.speedup)


def _bucket_sample(pool: list[Exemplar], k: int, rng: random.Random, tau: float, n_buckets: int) -> list[Exemplar]:
    buckets = bucketize(pool, n_buckets)
    chosen: list[Exemplar] = []
    if len(buckets) >= 2:
        # Draw distinct buckets without replacement, re-normalising the softmax each time.
        remaining = list(range(len(buckets)))
        weights = bucket_weights(buckets, tau)
        while remaining and len(chosen) < k:
            i = rng.choices(remaining, weights=[weights[j] for j in remaining])[0]
            remaining.remove(i)
            chosen.append(rng.choice(buckets[i]))
    # Fewer buckets than k (all scores alike): fill from the rest of the pool.
    rest = [e for e in pool if e not in chosen]
    while len(chosen) < k and rest:
        chosen.append(rest.pop(rng.randrange(len(rest))))
    return chosen


def _diverse(pool: list[Exemplar], k: int) -> list[Exemplar]:
    """Evenly spaced over the sorted speedups: always the slowest and the fastest when k >= 2."""
    ranked = sorted(pool, key=lambda e: e.speedup)
    if k == 1:
        return [ranked[-1]]
    idx = sorted({round(i * (len(ranked) - 1) / (k - 1)) for i in range(k)})
    return [ranked[i] for i in idx]


def _dedupe(pool: list[Exemplar]) -> list[Exemplar]:
    seen: set[str] = set()
    out = []
    for e in pool:
        if e.source not in seen:
            seen.add(e.source)
            out.append(e)
    return out
