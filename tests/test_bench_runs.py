"""benchmarks/bench_runs.py: a bench output folder's rate, GPU-stage phases and speedups, on folders made here."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_runs.py"
spec = importlib.util.spec_from_file_location("bench_runs", SCRIPT)
bench_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_runs)


def verdict_row(task, level, speedup, correctness, graphs, replays=25, status="ok"):
    phases = {"reference": 4.0, "start_and_build": 4.0, "correctness": correctness, "timing": 1.0, "graphs": graphs,
              "finish": 0.5}
    return {"key": task, "result": {"task": task, "level": level, "status": status, "speedup": speedup,
                                    "verdict": {"phases": phases, "reference_graph": {"n": replays}}}}


def write_run(path: Path, rows: list[dict], runs: list[dict]) -> Path:
    path.mkdir()
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    return path


def test_the_rate_is_all_slices_tasks_over_their_summed_wall_and_the_phases_are_means_a_task(tmp_path):
    run = write_run(tmp_path / "run", [verdict_row("level1/a", "level1", 0.99, 2.0, 3.0, replays=75),
                                       verdict_row("level1/b", "level1", 1.01, 4.0, 1.0),
                                       verdict_row("level2/c", "level2", 1.00, 0.5, 2.0, replays=60)],
                    [{"wall_s": 20.0, "tasks": 2, "device_busy": {"cuda": 0.9}},
                     {"wall_s": 16.0, "tasks": 1, "device_busy": {"cuda": 0.8}}])
    s = bench_runs.summarise(*bench_runs.load(run))
    assert s["per_hour"] == pytest.approx(3600 * 3 / 36.0)  # not the mean of the slices' rates (360 and 225)
    assert s["correctness"] == pytest.approx(6.5 / 3) and s["graphs"] == pytest.approx(2.0)
    assert s["stage"] == pytest.approx((6.5 + 3 + 6 + 1.5) / 3)  # correctness, timing, graphs, finish
    assert s["stage_per_hour"] == pytest.approx(3600 * 3 / 17.0)
    assert s["speedups"] == (0.99, 1.00, 1.01) and s["long_graphs"] == 2 and s["busy"] == (0.8, 0.9)


def test_a_level_row_leaves_the_wall_clock_out_and_failed_verdicts_out_of_the_speedups(tmp_path, capsys):
    run = write_run(tmp_path / "run", [verdict_row("level1/a", "level1", 1.02, 2.0, 3.0),
                                       verdict_row("level1/b", "level1", 0.5, 1.0, 1.0, status="incorrect"),
                                       verdict_row("level2/c", "level2", 1.00, 0.5, 2.0)],
                    [{"wall_s": 36.0, "tasks": 3}])
    bench_runs.main([str(run), "--by-level"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| run", "| run level1", "| run level2"]
    level1 = lines[3].split(" | ")
    assert level1[2:5] == ["", "", ""]  # wall clock, per hour, busy
    assert "1.020, 1.020, 1.020" in lines[3] and "3 tasks in 36.0 s (1 run)" in lines[2]


def test_a_folder_without_results_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no results.jsonl"):
        bench_runs.load(tmp_path)
