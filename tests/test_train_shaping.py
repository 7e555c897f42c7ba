"""Reward shaping for RL: verdict outcomes become rewards by CUDA-L1's per-task normalisation."""
import math

import pytest

from kernelrl.train.shaping import Outcome, RewardShaping, binary_reward, shape_rewards, task_stats


def test_a_faster_program_than_the_task_average_earns_a_positive_reward():
    population = {"relu": [1.0, 1.2, 1.4]}
    fast, slow = shape_rewards([Outcome("relu", "ok", 1.4), Outcome("relu", "ok", 1.0)], population)
    assert fast > 0 > slow


def test_rewards_are_normalised_per_task_not_across_tasks():
    # The same speedup is excellent for one task and poor for another.
    population = {"easy": [1.0, 1.1, 1.2], "hard": [3.0, 4.0, 5.0]}
    easy, hard = shape_rewards([Outcome("easy", "ok", 1.2), Outcome("hard", "ok", 1.2)], population)
    assert easy > 0 and hard < 0


def test_the_normalised_reward_is_z_score_of_the_speedup():
    population = {"t": [1.0, 2.0, 3.0]}
    mu, sigma = 2.0, math.sqrt(2 / 3)
    [r] = shape_rewards([Outcome("t", "ok", 2.5)], population)
    assert r == pytest.approx((2.5 - mu) / sigma)


def test_rewards_are_clipped_to_the_configured_range():
    population = {"t": [1.0, 1.0, 1.01, 50.0]}
    shaping = RewardShaping(clip=1.5)
    rewards = shape_rewards([Outcome("t", "ok", 50.0), Outcome("t", "ok", 1.0)], population, shaping)
    assert max(rewards) <= 1.5 and min(rewards) >= -1.5
    [top] = shape_rewards([Outcome("t", "ok", 1e6)], {"t": [1.0] * 9 + [1e6]}, shaping)  # z = 3
    assert top == 1.5


def test_every_failure_scores_at_or_below_the_slowest_correct_program():
    population = {"t": [0.1, 1.0, 2.0]}
    outcomes = [Outcome("t", "ok", 0.1)] + [Outcome("t", s) for s in
                                              ("incorrect", "compile_error", "runtime_error", "timeout", "no_code")]
    slowest_ok, *failures = shape_rewards(outcomes, population)
    assert all(f <= slowest_ok for f in failures)
    assert set(failures) == {RewardShaping().failure}


def test_a_caught_reward_hack_scores_below_every_honest_failure():
    rejected, incorrect = shape_rewards([Outcome("t", "rejected"), Outcome("t", "incorrect")], {"t": [1.0]})
    assert rejected < incorrect


def test_shaping_that_would_reward_failures_above_correct_programs_is_refused():
    with pytest.raises(ValueError, match="failure"):
        RewardShaping(clip=1.5, failure=-1.0)
    with pytest.raises(ValueError, match="rejected"):
        RewardShaping(failure=-2.0, rejected=-1.5)


def test_log2_shaping_weighs_a_halving_and_a_doubling_equally():
    shaping = RewardShaping(transform="log2", clip=10.0, failure=-10.0, rejected=-11.0)
    up, down = shape_rewards([Outcome("t", "ok", 2.0), Outcome("t", "ok", 0.5)], {"t": [0.5, 1.0, 2.0]}, shaping)
    assert up == pytest.approx(-down)


def test_a_single_known_speedup_does_not_divide_by_zero():
    mu, sigma = task_stats([1.3], sigma_floor=0.05)
    assert (mu, sigma) == (1.3, 0.05)
    [r] = shape_rewards([Outcome("t", "ok", 1.3)], {"t": [1.3]})
    assert r == 0.0


def test_without_statistics_the_reward_is_measured_against_the_reference():
    shaping = RewardShaping(normalise=False)
    faster, slower = shape_rewards([Outcome("t", "ok", 1.5), Outcome("t", "ok", 0.8)], {}, shaping)
    assert faster == pytest.approx(0.5) and slower == pytest.approx(-0.2)


def test_self_training_reward_is_one_for_correct_and_zero_otherwise():
    assert binary_reward(Outcome("t", "ok", 0.3)) == 1.0
    assert [binary_reward(Outcome("t", s)) for s in ("incorrect", "rejected", "no_code")] == [0.0, 0.0, 0.0]
