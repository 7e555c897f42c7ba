"""Judging rollouts with the real evaluator on CPU: bad programs become verdicts, never exceptions."""
from pathlib import Path

import pytest

from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.reward import RewardPool, Rollout

TASKS = Path(__file__).resolve().parents[1] / "src" / "kernelrl" / "train" / "smoke" / "tasks"
RELU = Task.from_file(TASKS / "relu.py")
FAST = dict(correctness_trials=1, warmup=1, timing_rounds=1, timing_precision=0, calls_per_round=3, input_sets=1,
            timeout_s=45.0, build_timeout_s=40.0)


def reply(body):
    return ("**Performance Analysis**\nmemory bound.\n\n**Algorithm Design**\none pass.\n\n"
            "**Code Implementation**\n```python\nimport torch\nimport torch.nn as nn\n\n"
            f"class ModelNew(nn.Module):\n    def forward(self, x):\n{body}\n```\n")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("reward") / "store.db")
    with RewardPool(store, ("cpu",), FAST, proposer="test", model="tiny") as p:
        yield p
    store.close()


def test_a_correct_program_gets_an_ok_verdict_with_a_speedup_recorded_in_the_store(pool):
    [j] = pool.judge([Rollout(RELU, reply("        return x.clamp_min(0.0)"))])
    assert j.status == "ok" and j.speedup > 0 and j.evaluated
    rec = pool.store.candidate(j.candidate_id)
    assert rec.status == "ok" and rec.verdict.device == "cpu" and rec.proposer == "test" and rec.model == "tiny"


def test_a_program_that_crashes_is_a_runtime_error_and_the_next_one_is_still_judged(pool):
    crash, fine = pool.judge([Rollout(RELU, reply("        raise RuntimeError('boom')")),
                              Rollout(RELU, reply("        return torch.relu(x) + 0.0"))])
    assert crash.status == "runtime_error" and "boom" in crash.verdict.message
    assert fine.status == "ok"


def test_a_wrong_program_is_judged_incorrect(pool):
    [j] = pool.judge([Rollout(RELU, reply("        return x"))])
    assert j.status == "incorrect" and j.speedup is None


def test_a_reply_without_code_is_recorded_without_running_the_evaluator(pool):
    before = pool.evaluations
    [j] = pool.judge([Rollout(RELU, "I would use a faster kernel.")])
    assert j.status == "no_code" and pool.evaluations == before
    assert pool.store.candidate(j.candidate_id).parse_error


def test_the_same_program_proposed_twice_at_once_is_evaluated_once(pool):
    before = pool.evaluations
    body = "        return torch.maximum(x, torch.zeros_like(x))"
    a, b = pool.judge([Rollout(RELU, reply(body)), Rollout(RELU, reply(body) + "\nThat is all.")])
    assert pool.evaluations == before + 1
    assert a.status == b.status == "ok" and a.speedup == b.speedup and a.candidate_id != b.candidate_id


def test_a_program_that_hangs_times_out_as_a_verdict(tmp_path):
    with Store(tmp_path / "s.db") as store, RewardPool(store, ("cpu",), {**FAST, "timeout_s": 20.0}) as pool:
        [j] = pool.judge([Rollout(RELU, reply("        import time\n        time.sleep(600)\n        return x"))])
    assert j.status == "timeout"
