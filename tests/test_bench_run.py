"""A real bench run (CPU evaluator, sandboxed workers) over a small suite whose verdicts are known.

tests/data/bench holds five tasks: a correct candidate far faster than its (Python-loop) reference, a correct
candidate 50x slower than its reference, a wrong one, one that does not compile and a task without one.
"""
import json
import os
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelrl.bench.baselines import BaselineCache, environment_key
from kernelrl.bench.cli import bench_command
from kernelrl.bench.metrics import summarize
from kernelrl.bench.runner import BenchConfig, run_suite, run_task
from kernelrl.bench.suite import discover
from kernelrl.evaluate import EvalConfig, Evaluator

DATA = Path(__file__).parent / "data" / "bench"


def fast_config(cache_dir: Path) -> EvalConfig:
    # Fewer rounds keep the test short; no re-measurement of big speedups, whose fresh-worker timing on a
    # busy 2-core machine is not what this test is about.
    return EvalConfig(device="cpu", correctness_trials=2, timing_rounds=3, calls_per_round=10,
                      recheck_speedup=1e9, cache_dir=str(cache_dir))


@pytest.fixture(scope="module", autouse=True)
def one_thread_workers():
    # Workers inherit OMP_NUM_THREADS: on an oversubscribed 2-core machine a parallel region can wait
    # milliseconds for a descheduled thread, which would drown the speed differences these tests rely on.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("cache")
    suite = discover(DATA / "suite", DATA / "candidates")
    cache = BaselineCache(cache_dir / "baselines.sqlite")
    config = BenchConfig(devices=("cpu",), eval=fast_config(cache_dir))
    results = run_suite(suite, config, cache)
    return suite, config, cache, {r.task: r for r in results}


def test_every_task_gets_the_status_its_candidate_deserves(run):
    _, _, _, results = run
    assert {t: r.status for t, r in results.items()} == {
        "level1/row_sum": "ok", "level1/scale_relu": "ok", "level1/softsign": "missing",
        "level2/linear_tanh": "incorrect", "level2/double_relu": "compile_error"}


def test_fast_p_and_counts_of_the_run(run):
    _, _, _, results = run
    s = summarize(results.values())
    assert (s.total, s.correct) == (5, 2)
    assert s.counts == {"compile_error": 1, "incorrect": 1, "missing": 1, "ok": 2}
    # The loop-free row sum is far faster than its reference; the 50x-repeated candidate far slower.
    assert s.fast_p == {0.0: 0.4, 0.5: 0.2, 0.8: 0.2, 1.0: 0.2, 1.5: 0.2, 2.0: 0.2}


def test_levels_are_reported_from_folder_names(run):
    _, _, _, results = run
    assert {r.level for r in results.values()} == {"level1", "level2"}


def test_a_reference_is_timed_apart_only_where_no_verdict_timed_it(run):
    _, _, cache, results = run
    # The two ok candidates' verdicts timed their references; the missing, incorrect and unbuildable ones did not.
    assert len(cache) == 3
    assert all(r.reference_us and r.reference_us > 0 for r in results.values())
    for task in ("level1/row_sum", "level1/scale_relu"):
        assert results[task].reference_us == results[task].verdict.timings[0].median_us


def test_a_second_run_reuses_cached_reference_timings(run):
    suite, config, cache, results = run
    task = next(t for t in suite.tasks if t.name == "level1/softsign")
    with Evaluator(config.eval) as ev:
        again = run_task(ev, task, config, cache, environment_key("cpu", config.eval))
    # Re-timing could never reproduce the same float; the cached value comes back exactly.
    assert again.status == "missing" and again.reference_us == results["level1/softsign"].reference_us


def test_cached_timings_belong_to_one_environment(tmp_path):
    cfg = EvalConfig()
    assert environment_key("cpu", cfg) != environment_key("cpu", cfg.with_(calls_per_round=7))
    cache = BaselineCache(tmp_path / "b.sqlite")
    from kernelrl.verdict import Timing
    t = Timing.from_samples([5.0, 7.0], "perf_counter")
    cache.put("digest", "env-a", False, t, task="x")
    assert cache.get("digest", "env-a", False) == t
    assert cache.get("digest", "env-b", False) is None and cache.get("digest", "env-a", True) is None


def test_the_command_prints_a_json_summary_and_writes_the_report(tmp_path):
    suite = tmp_path / "suite" / "level1"
    cands = tmp_path / "cands" / "level1"
    suite.mkdir(parents=True)
    cands.mkdir(parents=True)
    for name in ("scale_relu.py", "softsign.py"):
        shutil.copy(DATA / "suite" / "level1" / name, suite / name)
    shutil.copy(DATA / "candidates" / "level1" / "scale_relu.py", cands / "scale_relu.py")
    app = typer.Typer()
    app.command()(bench_command)
    out = tmp_path / "report"
    res = CliRunner().invoke(app, [str(tmp_path / "suite"), "--candidates", str(tmp_path / "cands"),
                                   "--device", "cpu", "--json", "--out", str(out), "--trials", "1",
                                   "--rounds", "2", "--calls", "5", "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert {"total", "correct", "fast_p", "geomean_speedup", "mean_speedup", "median_speedup",
            "tasks"} <= set(summary)
    assert (summary["total"], summary["correct"]) == (2, 1)
    assert summary["fast_p"]["0"] == 0.5 and summary["fast_p"]["1"] == 0.0
    assert [t["status"] for t in summary["tasks"]] == ["ok", "missing"]
    assert summary["tasks"][0]["verdict"]["status"] == "ok"
    for name in ("summary.json", "results.csv", "report.md", "speedups.png"):
        assert (out / name).stat().st_size > 0
    assert "level1/scale_relu" in (out / "results.csv").read_text()
    assert "fast_1.5" in (out / "report.md").read_text()


def test_the_command_explains_a_missing_suite(tmp_path):
    app = typer.Typer()
    app.command()(bench_command)
    res = CliRunner().invoke(app, [str(tmp_path / "nope"), "--device", "cpu"])
    assert res.exit_code == 2 and "no such suite directory" in res.output


BROKEN_REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("this reference cannot be built")

    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''
SOFTSIGN_CAND = '''import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x / (1 + x.abs())
'''


def _bench(*args: str):
    app = typer.Typer()
    app.command()(bench_command)
    return CliRunner().invoke(app, [*args, "--device", "cpu", "--trials", "1", "--rounds", "2", "--calls", "5"])


def _kernelbench_like(tmp_path: Path) -> tuple[Path, Path]:
    """A suite laid out as KernelBench is: problems named by id, a broken reference, a file that is none."""
    suite, run = tmp_path / "suite", tmp_path / "run"
    (suite / "level1").mkdir(parents=True)
    (suite / "level2").mkdir(parents=True)
    run.mkdir()
    shutil.copy(DATA / "suite" / "level1" / "softsign.py", suite / "level1" / "1_Softsign.py")
    (suite / "level1" / "2_Broken.py").write_text(BROKEN_REF)
    bad_metadata = BROKEN_REF.replace("import torch\n", "KERNELRL = {'policy': 'fast'}\nimport torch\n", 1)
    (suite / "level2" / "1_Bad_metadata.py").write_text(bad_metadata)
    (run / "level_1_problem_2_sample_0_kernel.py").write_text(SOFTSIGN_CAND)
    return suite, run


def test_a_reference_that_cannot_run_or_load_gets_its_reason_in_the_report(tmp_path):
    suite, run = _kernelbench_like(tmp_path)
    out = tmp_path / "out"
    res = _bench(str(suite), "--candidates", str(run), "--json", "--out", str(out), "--no-time-references",
                 "--cache-dir", str(tmp_path / "cache"))
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    by_task = {t["task"]: t for t in summary["tasks"]}
    assert by_task["level1/1_Softsign"]["status"] == "missing"
    broken = by_task["level1/2_Broken"]
    assert broken["status"] == "reference_error"
    assert "this reference cannot be built" in broken["message"]
    assert summary["skipped"] == [{"file": "level2/1_Bad_metadata.py",
                                   "reason": "task metadata: policy must be one of strict, kernelbench, not 'fast'"}]
    report = (out / "report.md").read_text()
    assert "this reference cannot be built" in report and "level2/1_Bad_metadata.py" in report


def test_a_rerun_with_resume_runs_only_what_is_not_finished(tmp_path):
    suite, run = _kernelbench_like(tmp_path)
    out, cache = tmp_path / "out", str(tmp_path / "cache")
    args = [str(suite), "--candidates", str(run), "--json", "--out", str(out), "--no-time-references",
            "--cache-dir", cache]
    first = _bench(*args)
    assert first.exit_code == 0, first.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    again = _bench(*args, "--resume")
    assert again.exit_code == 0, again.output
    assert "resuming: 2 of 2 tasks already finished" in again.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 2  # nothing ran again
    # A new candidate file is new work; the broken reference's result stands.
    (run / "level1").mkdir()
    (run / "level1" / "1_my_softsign.py").write_text(SOFTSIGN_CAND)
    third = _bench(*args, "--resume")
    assert third.exit_code == 0, third.output
    summary = json.loads(third.stdout.strip().splitlines()[-1])
    assert [(t["task"], t["status"]) for t in summary["tasks"]] == [("level1/1_Softsign", "ok"),
                                                                    ("level1/2_Broken", "reference_error")]
    assert len((out / "results.jsonl").read_text().splitlines()) == 3
    # Each run that finished a task left a line: its wall time and tasks, for per-hour rates over resumed runs.
    # The first judged nothing: one task had no candidate, the other's reference could not run.
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["tasks"], r["judged"], r["missing"], r["reference_error"]) for r in runs] == [(2, 0, 1, 1),
                                                                                             (1, 1, 0, 0)]
    assert runs[0]["per_hour"] == 0 and runs[1]["wall_s"] > 0 and runs[1]["per_hour"] > 0


def test_a_runs_line_rates_judged_tasks_only_and_counts_missing_and_invalid_candidates_apart(tmp_path):
    suite, cands = tmp_path / "suite" / "level1", tmp_path / "cands" / "level1"
    suite.mkdir(parents=True)
    cands.mkdir(parents=True)
    for name in ("1_Softsign.py", "2_Softsign.py", "3_Softsign.py"):
        shutil.copy(DATA / "suite" / "level1" / "softsign.py", suite / name)
    (cands / "1_Softsign.py").write_text(SOFTSIGN_CAND)
    (cands / "2_Softsign.py").write_text("import torch\n")  # no ModelNew: not a candidate
    out = tmp_path / "out"
    res = _bench(str(tmp_path / "suite"), "--candidates", str(tmp_path / "cands"), "--out", str(out),
                 "--no-time-references", "--cache-dir", str(tmp_path / "cache"))
    assert res.exit_code == 0, res.output
    [line] = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert {k: line[k] for k in ("tasks", "judged", "missing", "invalid", "reference_error")} == {
        "tasks": 3, "judged": 1, "missing": 1, "invalid": 1, "reference_error": 0}
    # wall_s is rounded to 0.1 s: the rate from it is within that rounding of the one recorded
    assert 3600 / (line["wall_s"] + 0.05) <= line["per_hour"] <= 3600 / max(line["wall_s"] - 0.05, 1e-9)
    assert "kernelbench_rule" not in line  # a strict run
    # the host's CPU over the run (every process on the cores this one may use): it judged on them, so not idle
    assert 0 < line["cpu_busy"] <= 1 and line["cores"] == len(os.sched_getaffinity(0))


def test_cpu_busy_is_the_busy_share_of_the_cores_time_between_two_readings():
    from kernelrl.bench.runs import cpu_busy, cpu_times

    before, after = {0: (1.0, 10.0), 1: (2.0, 10.0)}, {0: (6.0, 20.0), 1: (2.0, 20.0), 2: (9.0, 9.0)}
    assert cpu_busy(before, after) == 0.25  # core 0 busy half its 10 s, core 1 idle; core 2 not read before
    assert cpu_busy(before, before) is None
    now = cpu_times()
    assert set(now) == set(os.sched_getaffinity(0)) and all(0 <= b <= t for b, t in now.values())


@pytest.mark.parametrize("group", [1, 3])
def test_every_sample_of_a_group_is_judged_in_order_and_resumed_by_its_own_key(tmp_path, group):
    (tmp_path / "suite" / "level1").mkdir(parents=True)
    shutil.copy(DATA / "suite" / "level1" / "softsign.py", tmp_path / "suite" / "level1" / "1_Softsign.py")
    wrong = SOFTSIGN_CAND.replace("1 + x.abs()", "2 + x.abs()")
    for sample, source in enumerate([SOFTSIGN_CAND, wrong, SOFTSIGN_CAND]):  # two samples of the same source
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / f"level_1_problem_1_sample_{sample}_kernel.py").write_text(source)
    out = tmp_path / "out"
    args = [str(tmp_path / "suite"), "--candidates", str(tmp_path / "run"), "--samples", "all", "--json", "--out",
            str(out), "--no-time-references", "--cache-dir", str(tmp_path / "cache"), "--group", str(group)]
    res = _bench(*args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(t["task"], t["sample"], t["status"]) for t in summary["tasks"]] == [
        ("level1/1_Softsign", 0, "ok"), ("level1/1_Softsign", 1, "incorrect"), ("level1/1_Softsign", 2, "ok")]
    assert (summary["total"], summary["best_of_samples"]["total"], summary["best_of_samples"]["correct"]) == (3, 1, 1)
    [line] = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert (line["tasks"], line["candidates"], line["judged"]) == (1, 3, 3) and line.get("group", 1) == group
    again = _bench(*args, "--resume")
    assert again.exit_code == 0, again.output
    assert "resuming: 3 of 3 tasks already finished" in again.output
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


def test_levels_run_apart_add_up_to_one_report(tmp_path):
    suite = tmp_path / "suite"
    for rel in ("level1/1_Softsign.py", "level2/1_Softsign.py"):
        (suite / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / "suite" / "level1" / "softsign.py", suite / rel)
    out = tmp_path / "out"
    args = [str(suite), "--json", "--out", str(out), "--no-time-references", "--cache-dir", str(tmp_path / "c")]
    assert _bench(*args, "--level", "1").exit_code == 0
    res = _bench(*args, "--level", "2", "--resume")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert [t["task"] for t in summary["tasks"]] == ["level1/1_Softsign", "level2/1_Softsign"]
    assert list(summary["levels"]) == ["level1", "level2"]


def test_a_time_limit_leaves_tasks_for_a_resumed_run(tmp_path):
    suite, run = _kernelbench_like(tmp_path)
    res = _bench(str(suite), "--candidates", str(run), "--out", str(tmp_path / "out"), "--time-limit", "0.000001",
                 "--cache-dir", str(tmp_path / "cache"))
    assert res.exit_code == 0, res.output
    assert "2 tasks not started; run again with --resume" in res.output


@pytest.mark.parametrize("args, needle", [(["--resume"], "--resume needs --out"),
                                          (["--policy", "loose"], "--policy must be one of strict, kernelbench"),
                                          (["--level", "9"], "no tasks in level '9'"),
                                          (["--cpu-lanes", "0"], "--cpu-lanes must be at least 1"),
                                          (["--cpu-lanes", "4", "--ray", "auto"], "with --ray each GPU's actor"),
                                          (["--first-call-lanes", "-1"], "--first-call-lanes must be 0 or more"),
                                          (["--first-call-lanes", "2", "--ray", "auto"],
                                           "with --ray each GPU's actor"),
                                          (["--references-ahead", "--ray", "auto"], "with --ray each GPU's actor")])
def test_bad_bench_options_are_one_line_errors(tmp_path, args, needle):
    res = _bench(str(DATA / "suite"), *args)
    assert res.exit_code == 2 and needle in res.output, res.output


def test_a_run_stopped_by_sigterm_records_what_it_judged_and_can_be_resumed(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    suite, cands = tmp_path / "suite" / "level1", tmp_path / "cands" / "level1"
    suite.mkdir(parents=True)
    cands.mkdir(parents=True)
    for i in range(1, 9):
        shutil.copy(DATA / "suite" / "level1" / "softsign.py", suite / f"{i}_Softsign.py")
        (cands / f"{i}_Softsign.py").write_text(SOFTSIGN_CAND)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "kernelrl.cli", "bench", str(tmp_path / "suite"), "--candidates",
            str(tmp_path / "cands"), "--out", str(out), "--no-time-references", "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, COLUMNS="200"))
    log = out / "results.jsonl"
    deadline = time.monotonic() + 240
    while not (log.exists() and log.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[0]  # still running: eight tasks take longer than one
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, text
    assert "interrupted" in text
    [line] = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    judged = log.read_text().count("\n")
    assert line["interrupted"] is True and 1 <= line["judged"] == judged < 8 and line["wall_s"] > 0
    again = _bench(str(tmp_path / "suite"), "--candidates", str(tmp_path / "cands"), "--out", str(out),
                   "--no-time-references", "--cache-dir", str(tmp_path / "cache"), "--resume")
    assert again.exit_code == 0, again.output
    assert f"resuming: {judged} of 8 tasks already finished" in again.output
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2 and log.read_text().count("\n") == 8
