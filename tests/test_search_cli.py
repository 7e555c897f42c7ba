"""`kernelrl optimize` without an LLM: seeds the archive and writes best.py, the report, the plot, the export."""
import json

import typer
from typer.testing import CliRunner

from kernelrl.search.cli import optimize_command

REFERENCE = '''"""Scale and shift a vector."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''


def app() -> typer.Typer:
    a = typer.Typer()
    a.command("optimize")(optimize_command)
    a.command("noop")(lambda: None)  # two commands, so `optimize` is addressed by name as in kernelrl's CLI
    return a


def fast_config(tmp_path):
    path = tmp_path / "optimize.toml"
    path.write_text('[eval]\ncorrectness_trials = 1\nwarmup = 1\ntiming_rounds = 2\ncalls_per_round = 3\n'
                    f'input_sets = 2\ncache_dir = "{tmp_path / "cache"}"\n')
    return path


def test_without_a_model_the_seed_proposers_run_and_the_run_directory_is_written(tmp_path):
    task = tmp_path / "scale_shift.py"
    task.write_text(REFERENCE)
    out = tmp_path / "run"
    r = CliRunner().invoke(app(), ["optimize", str(task), "--proposers", "reference", "--out", str(out),
                                   "--config", str(fast_config(tmp_path)), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "non-LLM proposers only" in r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["proposer"] == "reference" and summary["stats"]["llm_candidates"] == 0
    assert "class ModelNew(Model)" in (out / "best.py").read_text()
    report = (out / "report.md").read_text()
    assert "speedup.png" in report and "Lineage" in report and (out / "speedup.png").stat().st_size > 1000
    assert json.loads((out / "candidates.jsonl").read_text().splitlines()[0])["status"] == "ok"


def test_a_missing_task_file_is_an_error_a_user_can_act_on(tmp_path):
    r = CliRunner().invoke(app(), ["optimize", str(tmp_path / "nope.py"), "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "no such reference file" in r.output


def test_an_unknown_proposer_lists_the_known_ones(tmp_path):
    task = tmp_path / "t.py"
    task.write_text(REFERENCE)
    r = CliRunner().invoke(app(), ["optimize", str(task), "--proposers", "magic", "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "unknown proposer(s) magic" in r.output and "cuda-graph" in r.output


def test_the_policy_flag_judges_the_run_and_the_report_says_which(tmp_path):
    task = tmp_path / "scale_shift.py"
    task.write_text(REFERENCE)
    out = tmp_path / "run"
    r = CliRunner().invoke(app(), ["optimize", str(task), "--proposers", "reference", "--out", str(out),
                                   "--config", str(fast_config(tmp_path)), "--quiet", "--policy", "kernelbench"])
    assert r.exit_code == 0, r.output
    assert "| precision policy | kernelbench |" in (out / "report.md").read_text()
    assert json.loads((out / "summary.json").read_text())["run"]["policy"] == "kernelbench"


def test_an_unknown_policy_names_the_choices(tmp_path):
    task = tmp_path / "t.py"
    task.write_text(REFERENCE)
    r = CliRunner().invoke(app(), ["optimize", str(task), "--policy", "loose", "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "policy must be one of strict, kernelbench, not 'loose'" in r.output


def test_prepare_ahead_judges_through_the_pipelined_scheduler(tmp_path, monkeypatch):
    from kernelrl.scale.local import LocalScheduler

    submitted = []
    submit = LocalScheduler.submit
    monkeypatch.setattr(LocalScheduler, "submit", lambda self, *a, **kw: submitted.append(self.capacity)
                        or submit(self, *a, **kw))
    task = tmp_path / "scale_shift.py"
    task.write_text(REFERENCE)
    out = tmp_path / "run"
    r = CliRunner().invoke(app(), ["optimize", str(task), "--proposers", "reference", "--out", str(out),
                                   "--config", str(fast_config(tmp_path)), "--quiet", "--device", "cpu",
                                   "--prepare-ahead", "1"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "candidates.jsonl").read_text().splitlines()[0])["status"] == "ok"
    # one job, through a pipelined scheduler whose loop keeps as many jobs going as the device may have ahead: at
    # least one being prepared, one prepared and waiting (lookahead 1) and one being judged
    assert len(submitted) == 1 and submitted[0] >= 3


def test_a_negative_prepare_ahead_is_a_one_line_error(tmp_path):
    task = tmp_path / "scale_shift.py"
    task.write_text(REFERENCE)
    r = CliRunner().invoke(app(), ["optimize", str(task), "--prepare-ahead", "-1", "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "--prepare-ahead must be 0 or more" in r.output
