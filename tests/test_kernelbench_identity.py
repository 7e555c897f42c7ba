"""Identity candidates (a reference judged against itself) and the calibration report of
benchmarks/kernelbench_identity.py, on small KernelBench-shaped folders made here."""
import ast
import csv
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import typer
from typer.testing import CliRunner

from kernelrl.bench.cli import bench_command
from kernelrl.bench.resume import RESULTS_FILE, ResultLog
from kernelrl.bench.result import TaskResult
from kernelrl.bench.suite import discover
from kernelrl.task import Task, identity_candidate
from kernelrl.verdict import Flag, Verdict

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kernelbench_identity.py"
REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Model that doubles its input. # Model in a docstring stays
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * 2  # Model in a comment stays


def make():
    return Model()  # a helper that builds it is renamed with it


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


def test_the_identity_candidate_renames_model_wherever_code_uses_it():
    source = identity_candidate(Task.from_source(REF, name="double")).source
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    classes = [n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]
    assert classes == ["ModelNew"] and "Model" not in names
    assert "super(ModelNew, self)" in source and "return ModelNew()" in source
    assert "Model that doubles" in source and "# Model in a comment stays" in source


def _suite(root: Path) -> Path:
    for rel in ("level1/1_Double.py", "level2/3_Double.py", "level2/notes.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(REF if rel.endswith("Double.py") else "X = 1\n")
    return root


def _script(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_identity_candidates_are_written_as_kernelbench_generation_runs_name_them(tmp_path):
    suite, cands = _suite(tmp_path / "suite"), tmp_path / "cands"
    r = _script("write", str(suite), str(cands))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in cands.iterdir()) == ["level_1_problem_1_sample_0_kernel.py",
                                                        "level_2_problem_3_sample_0_kernel.py"]
    matched = {t.rel_path: Path(t.candidate_path).name for t in discover(suite, cands).tasks}
    assert matched == {"level1/1_Double.py": "level_1_problem_1_sample_0_kernel.py",
                       "level2/3_Double.py": "level_2_problem_3_sample_0_kernel.py"}


def _result(task: str, status: str, speedup=None, method="cuda_graph", flags=(), message="") -> TaskResult:
    ok = status == "ok"
    verdict = Verdict(status=status, task=task, speedup=speedup if ok else None, speedup_stderr=0.004 if ok else None,
                      speedup_method=method if ok else None, flags=tuple(flags), message=message) if ok else None
    return TaskResult(task=task, level=task.split("/")[0], status=status, speedup=speedup if ok else None,
                      eager_speedup=speedup if ok else None, method=method if ok else None, message=message,
                      verdict=verdict)


def test_the_calibration_report_counts_the_band_and_names_what_graphs_could_not_capture(tmp_path):
    run = tmp_path / "run"
    log = ResultLog(run / RESULTS_FILE)
    not_captured = Flag("cuda_graph", "graph replay not timed (the reference): capture failed: RuntimeError: "
                                      "operation not permitted when stream is capturing", severity="warn")
    for i, r in enumerate([_result("level1/1_A", "ok", 1.004), _result("level1/2_B", "ok", 0.95),
                           _result("level2/1_C", "ok", 1.01, method="cuda_events", flags=[not_captured]),
                           _result("level3/1_D", "reference_error", message="the reference does not run: OOM")]):
        log.append(f"key{i}", r)
    r = _script("report", str(run), str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "out" / "calibration.md").read_text()
    assert "| speedup inside [0.97, 1.03] | 2 of 4 = 50.0% (goal >= 95%: not met) |" in md
    assert "| ok | 3 (1 not ok) |" in md
    assert "| level2/1_C | graph replay not timed (the reference): capture failed: RuntimeError" in md
    assert "| level3/1_D | reference_error | the reference does not run: OOM |" in md
    assert "| level1/2_B | 0.950 | 0.40% | cuda_graph |" in md  # outside the band, with its spread and method
    rows = list(csv.DictReader((tmp_path / "out" / "calibration.csv").open()))
    assert [(row["task"], row["in_band"]) for row in rows] == [("level1/1_A", "True"), ("level1/2_B", "False"),
                                                               ("level2/1_C", "True"), ("level3/1_D", "False")]


def test_a_kept_run_is_reported_from_its_gzipped_results_and_summary(tmp_path):
    plain, kept = tmp_path / "run", tmp_path / "kept"
    for run in (plain, kept):
        ResultLog(run / RESULTS_FILE).append("key0", _result("level1/1_A", "ok", 1.004))
        (run / "summary.json").write_text(json.dumps({"device_names": ["NVIDIA H100 80GB HBM3"],
                                                      "software": {"torch": "2.11.0"}}))
    for name in (RESULTS_FILE, "summary.json"):
        packed = kept / (name + ".gz")
        packed.write_bytes(gzip.compress((kept / name).read_bytes()))
        (kept / name).unlink()
    for run in (plain, kept):
        assert _script("report", str(run), str(run / "out")).returncode == 0
    md = (kept / "out" / "calibration.md").read_text()
    assert md == (plain / "out" / "calibration.md").read_text() and "NVIDIA H100 80GB HBM3" in md


def test_a_report_without_results_says_what_to_run(tmp_path):
    r = _script("report", str(tmp_path / "empty"), str(tmp_path / "out"))
    assert r.returncode != 0 and "run kernelrl bench with --out" in r.stderr and "Traceback" not in r.stderr


def test_identity_candidates_run_through_bench_and_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    suite, cands, run = _suite(tmp_path / "suite"), tmp_path / "cands", tmp_path / "run"
    (suite / "level2" / "3_Double.py").unlink()
    assert _script("write", str(suite), str(cands)).returncode == 0
    app = typer.Typer()
    app.command()(bench_command)
    res = CliRunner().invoke(app, [str(suite), "--candidates", str(cands), "--out", str(run), "--device", "cpu",
                                   "--trials", "1", "--rounds", "2", "--calls", "5", "--json",
                                   "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    assert [t["status"] for t in json.loads(res.stdout.strip().splitlines()[-1])["tasks"]] == ["ok"]
    r = _script("report", str(run), str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "out" / "calibration.md").read_text()
    assert "| tasks judged | 1 |" in md and "| ok | 1 (every task) |" in md
    assert "level1/1_Double" in md and os.path.getsize(tmp_path / "out" / "calibration.csv") > 0
