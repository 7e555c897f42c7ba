"""Stage 3's reward and prompts: TRL's reward-function call judged by the real evaluator; prompts drawn live."""
from dataclasses import replace
from pathlib import Path

import pytest

from kernelrl.search.store import Store
from kernelrl.task import Task
from kernelrl.train.config import smoke_config
from kernelrl.train.contrastive_rl import EvaluatorReward, prompt_stream
from kernelrl.train.reward import RewardPool, Rollout
from kernelrl.train.shaping import RewardShaping

TASKS = Path(__file__).resolve().parents[1] / "src" / "kernelrl" / "train" / "smoke" / "tasks"
RELU = Task.from_file(TASKS / "relu.py")
FAST = dict(correctness_trials=1, warmup=1, timing_rounds=1, timing_precision=0, calls_per_round=3, input_sets=1,
            timeout_s=45.0, build_timeout_s=40.0)


HEAD = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
SEED = HEAD + "        return torch.relu(x)\n"


def reply(body):
    return ("**Performance Analysis**\nx\n\n**Algorithm Design**\ny\n\n**Code Implementation**\n```python\n"
            f"{HEAD}{body}\n```\n")


def as_completion(text):
    return [{"role": "assistant", "content": text}]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """One TRL-style reward call over four rollouts: fast, wrong, cheating, no code."""
    store = Store(tmp_path_factory.mktemp("rl") / "store.db")
    cfg = smoke_config(tmp_path_factory.mktemp("out"))
    with RewardPool(store, ("cpu",), FAST) as pool:
        pool.judge([Rollout(RELU, "", source=SEED)], proposer="seed")  # a second verified speedup for μ, σ
        texts = [reply("        return x.clamp_min(0.0)"), reply("        return x * 2"),
                 reply("        x.relu_()\n        return x"), "no program here"]
        prompt = [{"role": "user", "content": "make relu faster"}]
        metrics = {}
        reward = EvaluatorReward(store, [RELU], pool, cfg)
        rewards = reward(prompts=[prompt] * 4, completions=[as_completion(t) for t in texts], task=["relu"] * 4,
                         parent_ids=[[]] * 4, log_metric=lambda k, v: metrics.__setitem__(k, v))
        rollouts = [c for c in store.candidates(RELU) if c.proposer == "train:contrastive_rl"]
    yield rewards, metrics, rollouts
    store.close()


def test_the_reward_follows_the_verdict_correct_then_wrong_then_caught_hack(judged):
    (fast, wrong, hack, empty), _, _ = judged
    shaping = RewardShaping()
    assert -shaping.clip <= fast <= shaping.clip
    assert wrong == empty == shaping.failure
    assert hack == shaping.rejected < wrong < fast


def test_every_rollout_and_its_verdict_goes_into_the_store_with_its_prompt(judged):
    _, _, rollouts = judged
    assert [c.status for c in rollouts] == ["ok", "incorrect", "rejected", "compile_error"]
    assert all(c.prompt == [{"role": "user", "content": "make relu faster"}] for c in rollouts)
    assert "input_mutation" in rollouts[2].verdict.hacks


def test_the_share_of_correct_and_rejected_rollouts_is_logged(judged):
    _, metrics, _ = judged
    assert metrics["kernelrl/correct"] == 0.25 and metrics["kernelrl/rejected"] == 0.25
    assert metrics["kernelrl/no_code"] == 0.25 and metrics["kernelrl/best_speedup"] > 0


def test_prompts_are_built_when_drawn_so_new_verdicts_show_up_as_exemplars(tmp_path):
    from kernelrl.verdict import Timing, Verdict

    cfg = smoke_config(tmp_path)
    cfg = cfg.with_(rl=replace(cfg.rl, exemplars=1, exemplar_strategy="best", max_failures=0))
    with Store(tmp_path / "store.db") as store:
        store.add_task(RELU)
        rows = iter(prompt_stream(store, [RELU], cfg))
        assert "Earlier variants" not in next(rows)["prompt"][1]["content"]
        source = HEAD + "        return x.relu()\n"
        rec = store.add_candidate(RELU, source, "seed")
        t = Timing.from_samples([1.0], "perf_counter")
        store.record_verdict(RELU, rec.digest, Verdict(status="ok", speedup=7.5, reference=t, candidate_timing=t))
        row = next(rows)
        assert "speedup 7.500x" in row["prompt"][1]["content"] and row["parent_ids"] == [rec.id]
        assert row["task"] == "relu"


def test_identical_rollouts_in_a_group_share_one_evaluation(tmp_path):
    with Store(tmp_path / "s.db") as store, RewardPool(store, ("cpu",), FAST) as pool:
        cfg = smoke_config(tmp_path)
        rewards = EvaluatorReward(store, [RELU], pool, cfg)(
            prompts=[[{"role": "user", "content": "p"}]] * 3,
            completions=[as_completion(reply("        return torch.clamp(x, min=0)"))] * 3, task=["relu"] * 3)
        assert pool.evaluations == 1 and len(set(rewards)) == 1
