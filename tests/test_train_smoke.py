"""`kernelrl train --smoke`: all three stages end to end on CPU, a tiny model, the real evaluator as reward."""
import json
import shutil
from collections import defaultdict

import pytest
import torch
from typer.testing import CliRunner

from kernelrl.search.store import Store
from kernelrl.cli import app
from kernelrl.train.config import smoke_config
from kernelrl.train.metrics import read_metrics
from kernelrl.train.model import load_model
from kernelrl.train.pipeline import run


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    result = CliRunner().invoke(app, ["train", "--smoke", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.rindex("{\n  \"out\""):])
    return out, summary


def test_every_stage_runs_and_the_summary_says_so(smoke_run):
    out, summary = smoke_run
    assert summary["stages_run"] == ["sft", "self_training", "contrastive_rl"]
    assert (out / "final" / "config.json").exists() and (out / "state.json").exists()


def test_training_changed_the_weights(smoke_run):
    out, _ = smoke_run
    base, final = load_model(out / "base"), load_model(out / "final")
    changed = [n for (n, p), q in zip(final.named_parameters(), base.parameters()) if not torch.equal(p, q)]
    assert changed


def test_metrics_are_logged_per_stage_with_loss_or_reward(smoke_run):
    out, _ = smoke_run
    records = read_metrics(out / "metrics.jsonl")
    by_stage = defaultdict(list)
    for r in records:
        assert "loss" in r or "reward" in r, r
        by_stage[r["stage"]].append(r)
    assert set(by_stage) == {"sft", "self_training", "contrastive_rl"}
    assert all("loss" in r for r in by_stage["sft"])
    assert any("reward" in r for r in by_stage["self_training"])
    assert all("reward" in r and "loss" in r for r in by_stage["contrastive_rl"])
    first, last = by_stage["sft"][0]["loss"], by_stage["sft"][-1]["loss"]
    assert last < first


def test_every_rollout_was_judged_and_rewards_come_from_evaluator_verdicts(smoke_run):
    out, _ = smoke_run
    with Store(out / "store.db") as store:
        rollouts = [c for t in store.tasks() for c in store.candidates(t) if c.proposer.startswith("train:")]
        assert {c.proposer for c in rollouts} == {"train:self_training", "train:contrastive_rl"}
        assert all(c.status != "pending" and c.verdict is not None for c in rollouts)
        # Programs (not empty replies) were run by the evaluator: timed references, measured wall time.
        run_by_evaluator = [c for c in rollouts if c.verdict.seconds > 0]
        assert run_by_evaluator
        for c in run_by_evaluator:
            assert c.verdict.device == "cpu" and (c.status != "ok" or c.verdict.speedup > 0)


def test_rl_rewards_logged_match_the_shaping_range(smoke_run):
    out, _ = smoke_run
    rewards = [r["reward"] for r in read_metrics(out / "metrics.jsonl") if r["stage"] == "contrastive_rl"]
    assert rewards and all(-2.0 <= x <= 1.5 for x in rewards)


def test_a_finished_run_resumes_without_redoing_any_stage(smoke_run):
    out, _ = smoke_run
    summary = run(smoke_config(out, device="cpu"), say=lambda s: None)
    assert summary.stages_run == () and summary.evaluations == 0
    assert set(summary.stages_skipped) == {"sft", "self_training", "contrastive_rl"}


def test_the_cli_refuses_neither_or_both_of_config_and_smoke(tmp_path):
    assert CliRunner().invoke(app, ["train", "--out", str(tmp_path)]).exit_code != 0
    toml = tmp_path / "t.toml"
    toml.write_text("")
    assert CliRunner().invoke(app, ["train", "--smoke", "--config", str(toml)]).exit_code != 0


def test_a_config_naming_a_missing_task_folder_fails_with_an_actionable_message(tmp_path):
    toml = tmp_path / "t.toml"
    toml.write_text(f'out = "{tmp_path / "run"}"\n[tasks]\ndir = "{tmp_path / "no-such-tasks"}"\n')
    result = CliRunner().invoke(app, ["train", "--config", str(toml)])
    assert result.exit_code == 2 and "no such tasks directory" in result.output


def test_a_run_stopped_during_its_last_stage_resumes_that_stage_from_its_checkpoint(smoke_run, tmp_path):
    out, _ = smoke_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    state = json.loads((copy / "state.json").read_text().replace(str(out), str(copy)))
    del state["completed"]["contrastive_rl"]  # as if killed after GRPO's last checkpoint, before the stage ended
    (copy / "state.json").write_text(json.dumps(state))
    before = len(read_metrics(copy / "metrics.jsonl"))
    summary = run(smoke_config(copy, device="cpu"), say=lambda s: None)
    assert summary.stages_run == ("contrastive_rl",) and summary.evaluations == 0
    assert len(read_metrics(copy / "metrics.jsonl")) == before  # the checkpoint was at the last step


def test_a_run_killed_mid_stage_resumes_from_the_trainer_checkpoint_and_finishes_the_stage(smoke_run, tmp_path):
    out, _ = smoke_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    state = json.loads((copy / "state.json").read_text().replace(str(out), str(copy)))
    del state["completed"]["contrastive_rl"]
    (copy / "state.json").write_text(json.dumps(state))
    trainer = copy / "checkpoints" / "contrastive_rl" / "trainer"
    shutil.rmtree(trainer / "checkpoint-3")  # killed after step 2's checkpoint
    summary = run(smoke_config(copy, device="cpu"), say=lambda s: None)
    assert summary.stages_run == ("contrastive_rl",)
    steps = [r["step"] for r in read_metrics(copy / "metrics.jsonl") if r["stage"] == "contrastive_rl"]
    assert steps == [1, 2, 3, 3]  # the first run's three steps, then step 3 again after the resume
