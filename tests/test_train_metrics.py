"""metrics.jsonl: one strict-JSON object per logged step, tagged with its stage."""
import json
from types import SimpleNamespace

import pytest

from kernelrl.train.metrics import MetricsCallback, MetricsLog, read_metrics


def test_each_record_is_one_json_line_with_its_stage_and_step(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.write("sft", step=3, loss=1.25)
    log.write("contrastive_rl", step=1, reward=-0.5, loss=0.1)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["stage"] for x in lines] == ["sft", "contrastive_rl"]
    assert read_metrics(tmp_path / "metrics.jsonl")[0] | {"time": 0} == {"stage": "sft", "step": 3, "loss": 1.25,
                                                                         "time": 0}


def test_non_finite_numbers_are_left_out_so_the_file_stays_strict_json(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    log.write("sft", step=1, loss=float("nan"), grad_norm=float("inf"), reward=0.5)
    text = (tmp_path / "m.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["reward"] == 0.5


def test_steps_count_up_per_stage_when_not_given(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for stage in ("self_training", "self_training", "sft"):
        log.write(stage, reward=1.0)
    assert [(r["stage"], r["step"]) for r in read_metrics(tmp_path / "m.jsonl")] == [
        ("self_training", 1), ("self_training", 2), ("sft", 1)]


def test_the_trainer_callback_forwards_step_logs_and_skips_the_final_summary(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    cb = MetricsCallback(log, "contrastive_rl", step_offset=10)
    state = SimpleNamespace(global_step=2)
    cb.on_log(None, state, None, logs={"loss": 0.2, "reward": -1.0, "kernelrl/correct": 0.25, "epoch": 1})
    cb.on_log(None, state, None, logs={"train_runtime": 5.0, "train_loss": 0.3})
    [r] = read_metrics(tmp_path / "m.jsonl")
    assert (r["stage"], r["step"], r["loss"], r["reward"], r["correct"]) == ("contrastive_rl", 12, 0.2, -1.0, 0.25)


def test_with_tensorboard_installed_each_stage_gets_its_own_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(tmp_path / "m.jsonl", tmp_path / "tb")
    log.write("sft", step=1, loss=2.0)
    log.write("contrastive_rl", step=1, reward=-0.5)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert {"sft/loss", "contrastive_rl/reward"} <= set(acc.Tags()["scalars"])
