"""benchmarks/bench_runs.py: a bench output folder's rate, GPU-stage phases and speedups, on folders made here."""
import gzip
import json
from pathlib import Path

import pytest

from kernelrl.bench.result import TaskResult
from kernelrl.bench.resume import RESULTS_FILE, ResultLog
from kernelrl.verdict import Timing, Verdict
from scripts import load_script

bench_runs = load_script("bench_runs")


def verdict_row(task, level, speedup, correctness, graphs, replays=25, status="ok", recheck=0.0):
    phases = {"reference": 4.0, "start_and_build": 4.0, "correctness": correctness, "timing": 1.0, "graphs": graphs,
              "finish": 0.5}
    if recheck:
        phases["recheck"] = recheck
    graph = Timing(100.0, 100.0, 99.0, 101.0, 0.5, replays, "cuda_graph")
    ok = status == "ok"
    verdict = Verdict(status=status, speedup=speedup if ok else None, reference_graph=graph, phases=phases)
    return TaskResult(task=task, level=level, status=status, speedup=speedup if ok else None, verdict=verdict)


def write_run(path: Path, rows: list[TaskResult], runs: list[dict]) -> Path:
    log = ResultLog(path / RESULTS_FILE)
    for r in rows:
        log.append(r.task, r)
    (path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    return path


def test_the_rate_is_all_slices_tasks_over_their_summed_wall_and_the_phases_are_means_a_task(tmp_path):
    run = write_run(tmp_path / "run", [verdict_row("level1/a", "level1", 0.99, 2.0, 3.0, replays=75, recheck=3.0),
                                       verdict_row("level1/b", "level1", 1.01, 4.0, 1.0),
                                       verdict_row("level2/c", "level2", 1.00, 0.5, 2.0, replays=60)],
                    [{"wall_s": 20.0, "tasks": 2, "judged": 2, "device_busy": {"cuda": 0.9}, "cpu_busy": 0.5},
                     {"wall_s": 16.0, "tasks": 2, "judged": 1, "device_busy": {"cuda": 0.8}}])  # one had no candidate
    s = bench_runs.summarise(*bench_runs.load(run))
    assert s["per_hour"] == pytest.approx(3600 * 3 / 36.0)  # judged ones only; not the mean of the slices' rates
    assert s["correctness"] == pytest.approx(6.5 / 3) and s["graphs"] == pytest.approx(2.0)
    # correctness, timing, graphs, the re-measurement, finish: all of the GPU stage
    assert s["stage"] == pytest.approx((6.5 + 3 + 6 + 3 + 1.5) / 3) and s["recheck"] == pytest.approx(1.0)
    assert s["stage_per_hour"] == pytest.approx(3600 * 3 / 20.0)
    assert s["speedups"] == (0.99, 1.00, 1.01) and s["long_graphs"] == 2 and s["busy"] == (0.8, 0.9)
    assert s["busy_share"] == pytest.approx((0.9 * 20 + 0.8 * 16) / 36)  # slices weighted by their wall clock
    assert s["cpu_busy"] == 0.5  # over the slices that read the host's CPU only
    assert "; CPU 50% |" in bench_runs.table([("run", s)])


def test_a_level_row_leaves_the_wall_clock_out_and_failed_verdicts_out_of_the_speedups(tmp_path, capsys):
    run = write_run(tmp_path / "run", [verdict_row("level1/a", "level1", 1.02, 2.0, 3.0),
                                       verdict_row("level1/b", "level1", 0.5, 1.0, 1.0, status="incorrect"),
                                       verdict_row("level2/c", "level2", 1.00, 0.5, 2.0)],
                    [{"wall_s": 36.0, "tasks": 3, "judged": 3}])
    bench_runs.main([str(run), "--by-level"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| run", "| run level1", "| run level2"]
    level1 = lines[3].split(" | ")
    assert level1[2:5] == ["", "", ""]  # wall clock, per hour, busy
    assert "1.020, 1.020, 1.020" in lines[3] and "3 judged in 36.0 s (1 run)" in lines[2]


def test_a_corpus_gives_a_row_for_each_kind_of_candidate(tmp_path, capsys):
    rows = [verdict_row("level1/a", "level1", 1.5, 1.0, 1.0), verdict_row("level1/b", "level1", 0.5, 1.0, 1.0),
            verdict_row("level2/c", "level2", 1.0, 1.0, 1.0, status="incorrect")]
    files = {"level1/a": "level_1_problem_1_sample_0_kernel.py", "level1/b": "level_1_problem_2_sample_0_kernel.py",
             "level2/c": "level_2_problem_1_sample_0_kernel.py"}
    rows = [TaskResult(**{**r.to_dict(), "candidate": f"/tmp/corpus/{files[r.task]}", "verdict": r.verdict})
            for r in rows]
    run = write_run(tmp_path / "run", rows, [{"wall_s": 30.0, "tasks": 3, "judged": 3}])
    kinds = {"level1/a": "cuda", "level1/b": "plain", "level2/c": "cuda"}
    (tmp_path / "corpus.json").write_text(json.dumps({"tasks": {
        task: [{"sample": 0, "kind": kinds[task], "op": None, "file": f}] for task, f in files.items()}}))
    bench_runs.main([str(run), "--corpus", str(tmp_path / "corpus.json")])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[:2] for line in lines[2:]] == [["| run", "3"], ["| run cuda", "2"], ["| run plain", "1"]]
    assert "1.500, 1.500, 1.500" in lines[3] and "0.500, 0.500, 0.500" in lines[4]


def test_tasks_without_a_verdict_are_named_beside_the_rate_and_left_out_of_it(tmp_path, capsys):
    run = write_run(tmp_path / "run", [verdict_row("level1/a", "level1", 1.0, 1.0, 1.0)],
                    [{"wall_s": 10.0, "tasks": 3, "judged": 1, "missing": 1, "invalid": 1, "reference_error": 0},
                     {"wall_s": 8.0, "tasks": 1, "judged": 0, "missing": 1}])
    s = bench_runs.summarise(*bench_runs.load(run))
    assert s["per_hour"] == pytest.approx(3600 * 1 / 18.0) and s["unjudged"] == {"missing": 2, "invalid": 1}
    bench_runs.main([str(run)])
    assert "1 judged in 18.0 s (2 runs); not judged: 2 missing, 1 invalid" in capsys.readouterr().out


def test_a_task_judged_again_counts_once_with_its_last_verdict_and_a_line_cut_short_is_skipped(tmp_path):
    run = write_run(tmp_path / "run", [verdict_row("level1/a", "level1", 0.5, 9.0, 9.0),
                                       verdict_row("level1/a", "level1", 1.0, 1.0, 1.0)], [])
    with (run / RESULTS_FILE).open("a") as f:
        f.write('{"key": "level1/b", "result": {"task": "lev')  # a run killed while writing
    s = bench_runs.summarise(*bench_runs.load(run))
    assert s["tasks"] == 1 and s["correctness"] == 1.0 and s["speedups"] == (1.0, 1.0, 1.0)


def test_a_kept_folder_is_read_from_its_gzipped_results(tmp_path):
    rows = [verdict_row("level1/a", "level1", 1.0, 1.0, 1.0), verdict_row("level2/b", "level2", 1.01, 2.0, 1.0)]
    runs = [{"wall_s": 10.0, "tasks": 2, "judged": 2}]
    plain, kept = write_run(tmp_path / "plain", rows, runs), write_run(tmp_path / "kept", rows, runs)
    (kept / (RESULTS_FILE + ".gz")).write_bytes(gzip.compress((kept / RESULTS_FILE).read_bytes()))
    (kept / RESULTS_FILE).unlink()
    assert bench_runs.summarise(*bench_runs.load(kept)) == bench_runs.summarise(*bench_runs.load(plain))


def test_a_folder_without_results_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no results.jsonl"):
        bench_runs.load(tmp_path)
