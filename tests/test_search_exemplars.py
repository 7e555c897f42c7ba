"""Exemplar selection (CUDA-L1 score buckets and alternatives) and per-task score normalisation."""
import random
from collections import Counter

import pytest

from kernelrl.search.exemplars import (Exemplar, bucket_weights, bucketize, normalize_scores, score,
                                       select_exemplars)


def pool(*speedups):
    return [Exemplar(source=f"# variant {i}", speedup=s, candidate_id=i) for i, s in enumerate(speedups)]


def test_normalised_scores_are_standardised_and_clipped():
    out = normalize_scores([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0])
    assert out[-1] == 1.5 and out[0] == pytest.approx(-1 / 3)


def test_equal_scores_normalise_to_zero():
    assert normalize_scores([2.0, 2.0]) == [0.0, 0.0] and normalize_scores([]) == []


def test_buckets_split_the_score_range_evenly():
    buckets = bucketize(pool(1.0, 1.1, 4.0, 16.0), n_buckets=2)
    assert [[e.speedup for e in b] for b in buckets] == [[1.0, 1.1], [4.0, 16.0]]


def test_faster_buckets_are_drawn_more_often_and_temperature_flattens_it():
    buckets = bucketize(pool(0.5, 1.0, 2.0, 8.0), n_buckets=4)
    cold, hot = bucket_weights(buckets, tau=0.5), bucket_weights(buckets, tau=100.0)
    assert cold == sorted(cold) and cold[-1] > 0.8
    assert max(hot) - min(hot) < 0.05 and sum(cold) == pytest.approx(1.0)


def test_bucket_strategy_shows_two_variants_from_different_buckets():
    p = pool(0.5, 0.55, 1.0, 1.05, 2.0, 2.1, 4.0, 4.2)
    buckets = bucketize(p, 4)
    which = {id(e): i for i, b in enumerate(buckets) for e in b}
    rng = random.Random(1)
    for _ in range(200):
        a, b = select_exemplars(p, k=2, strategy="bucket", rng=rng, tau=1.0, n_buckets=4)
        assert which[id(a)] != which[id(b)] and a.speedup <= b.speedup


def test_bucket_strategy_favours_fast_variants():
    p = pool(0.5, 1.0, 2.0, 8.0)
    rng = random.Random(0)
    shown = Counter(e.speedup for _ in range(500) for e in select_exemplars(p, 2, "bucket", rng, tau=0.5,
                                                                           n_buckets=4))
    assert shown[8.0] > shown[2.0] > shown[0.5]


def test_best_strategy_takes_the_fastest():
    assert [e.speedup for e in select_exemplars(pool(1, 3, 2, 5), 2, "best")] == [3, 5]


def test_diverse_strategy_spans_slowest_to_fastest():
    assert [e.speedup for e in select_exemplars(pool(1, 3, 2, 5, 4), 3, "diverse")] == [1, 3, 5]


def test_a_small_pool_is_shown_whole_and_duplicates_once():
    p = pool(1.0, 2.0) + [Exemplar(source="# variant 0", speedup=1.0)]
    assert len(select_exemplars(p, 3, "bucket")) == 2


def test_unknown_strategy_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="bucket, best, random, diverse"):
        select_exemplars(pool(1, 2), 1, "greedy")


def test_scores_are_log2_speedups():
    assert score(4.0) == 2.0 and score(0.5) == -1.0
