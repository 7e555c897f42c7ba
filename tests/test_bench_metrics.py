"""fast_p, speedup statistics and KernelBench's-rule counts on hand-made results whose answers are known, and how the
report and the terminal summary give them."""
import io
import json
import math

import pytest
from rich.console import Console

from kernelrl.bench.cli import print_summary
from kernelrl.bench.metrics import FAST_P, Summary, best_of_samples, by_level, fast_p, geomean, summarize
from kernelrl.bench.report import markdown, summary_dict
from kernelrl.bench.result import TaskResult, from_verdict
from kernelrl.verdict import Flag, Timing, Verdict


def ok(task, speedup, level="level1"):
    return TaskResult(task=task, level=level, status="ok", speedup=speedup, eager_speedup=speedup)


def failed(task, status, level="level1"):
    return TaskResult(task=task, level=level, status=status)


RESULTS = [ok("a", 3.0), ok("b", 1.0), ok("c", 0.6), failed("d", "incorrect"), failed("e", "missing"),
           ok("f", 2.0, level="level2"), failed("g", "compile_error", level="level2"),
           failed("h", "rejected", level="level2")]


def test_fast_p_divides_by_all_tasks_including_missing_and_failed():
    assert fast_p(RESULTS, 0.0) == pytest.approx(4 / 8)
    assert fast_p(RESULTS, 0.5) == pytest.approx(4 / 8)
    assert fast_p(RESULTS, 0.8) == pytest.approx(3 / 8)


def test_fast_p_needs_strictly_more_than_p():
    assert fast_p(RESULTS, 1.0) == pytest.approx(2 / 8)  # the 1.0x candidate is not faster than 1x
    assert fast_p(RESULTS, 2.0) == pytest.approx(1 / 8)  # nor the 2.0x one than 2x


def test_fast_p_of_no_tasks_is_zero():
    assert fast_p([], 1.0) == 0.0


def test_speedup_statistics_cover_correct_candidates_only():
    s = summarize(RESULTS)
    assert (s.total, s.correct) == (8, 4)
    assert s.mean_speedup == pytest.approx((3.0 + 1.0 + 0.6 + 2.0) / 4)
    assert s.median_speedup == pytest.approx((1.0 + 2.0) / 2)
    assert s.geomean_speedup == pytest.approx((3.0 * 1.0 * 0.6 * 2.0) ** 0.25)


def test_statistics_are_absent_when_nothing_is_correct():
    s = summarize([failed("x", "incorrect"), failed("y", "missing")])
    assert s.correct == 0 and s.fast_p[0.0] == 0.0
    assert s.geomean_speedup is None and s.mean_speedup is None and s.median_speedup is None


def test_counts_by_status():
    assert summarize(RESULTS).counts == {"compile_error": 1, "incorrect": 1, "missing": 1, "ok": 4,
                                         "rejected": 1}


def test_summary_has_every_threshold():
    assert tuple(summarize(RESULTS).fast_p) == FAST_P == (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


def test_levels_are_summarised_separately_in_numeric_order():
    results = RESULTS + [ok("z", 5.0, level="level10")]
    levels = by_level(results)
    assert list(levels) == ["level1", "level2", "level10"]
    assert levels["level2"].total == 3 and levels["level2"].fast_p[1.5] == pytest.approx(1 / 3)
    assert levels["level1"].fast_p[0.0] == pytest.approx(3 / 5)


def test_summary_json_uses_string_thresholds_and_round_trips():
    s = summarize(RESULTS)
    d = json.loads(json.dumps(s.to_dict()))
    assert set(d["fast_p"]) == {"0", "0.5", "0.8", "1", "1.5", "2"}
    assert Summary.from_dict(d) == s


def test_geomean_of_known_values():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None


def test_a_failed_result_cannot_carry_a_speedup():
    with pytest.raises(ValueError):
        TaskResult(task="t", level="", status="incorrect", speedup=1.2)
    with pytest.raises(ValueError):
        TaskResult(task="t", level="", status="no_such_status")


def _t(us: float, method: str = "perf_counter") -> Timing:
    return Timing.from_samples([us, us], method)


def test_task_result_round_trips_through_json_with_its_verdict():
    v = Verdict(status="ok", task="t", speedup=1.5, speedup_method="perf_counter", reference=_t(3.0))
    r = from_verdict("level1/t", "level1", v, "eager", reference=_t(3.0))
    assert TaskResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    assert r.method == "perf_counter" and r.reference_us == 3.0


def test_compile_speedup_is_derived_from_the_reference_times_when_the_verdict_has_none():
    v = Verdict(status="ok", task="t", speedup=2.0, speedup_method="perf_counter")
    r = from_verdict("t", "", v, "compile", reference=_t(100.0), reference_compiled=_t(50.0))
    assert r.compile_speedup == pytest.approx(1.0) and r.speedup == pytest.approx(1.0)
    assert r.eager_speedup == pytest.approx(2.0)


def test_no_compile_speedup_is_derived_across_timing_methods():
    # A device-time speedup scaled by a ratio of per-call latencies would mix two different measures.
    v = Verdict(status="ok", task="t", speedup=2.0, speedup_method="cuda_graph",
                reference_graph=_t(90.0, "cuda_graph"), candidate_graph=_t(45.0, "cuda_graph"))
    r = from_verdict("t", "", v, "compile", reference=_t(100.0, "cuda_events"),
                     reference_compiled=_t(50.0, "cuda_events"))
    assert r.compile_speedup is None and r.speedup is None and r.eager_speedup == pytest.approx(2.0)
    assert r.method == "cuda_graph" and r.reference_us == 90.0 and r.candidate_us == 45.0
    same = from_verdict("t", "", v, "compile", reference=_t(100.0, "cuda_graph"),
                        reference_compiled=_t(50.0, "cuda_graph"))
    assert same.compile_speedup == pytest.approx(1.0)


def test_the_verdicts_own_compile_speedup_wins():
    v = Verdict(status="ok", task="t", speedup=2.0, compile_speedup=1.7, speedup_method="perf_counter")
    r = from_verdict("t", "", v, "compile", reference=_t(100.0), reference_compiled=_t(50.0))
    assert r.speedup == pytest.approx(1.7)


def test_a_failed_verdict_gives_no_speedup_over_any_baseline():
    v = Verdict(status="incorrect", task="t")
    for baseline in ("eager", "compile"):
        r = from_verdict("t", "", v, baseline, reference=_t(100.0), reference_compiled=_t(50.0))
        assert r.speedup is None and r.compile_speedup is None and not r.correct
    assert math.isclose(fast_p([r], 0.0), 0.0)


SLACK = Flag(check="absolute_slack", hack=None, severity="warn",
             message="output 0: relative error 0.9 at [3]: correct by KernelBench's rule only through its absolute "
                     "tolerance")


def _judged(task: str, status: str, policy: str, *flags: Flag) -> TaskResult:
    v = Verdict(status=status, task=task, policy=policy, flags=flags, speedup=1.1 if status == "ok" else None,
                speedup_method="perf_counter" if status == "ok" else None)
    return from_verdict(f"level1/{task}", "level1", v, "eager")


def _reported(results: list[TaskResult], policy: str) -> tuple[dict, str, str]:
    """The summary, the markdown report and the terminal summary of `results`."""
    summary = summary_dict(results, "eager", policy=policy)
    console = Console(record=True, width=132, file=io.StringIO())
    print_summary(summary, console)
    return summary, markdown(summary, results), console.export_text()


def test_under_the_kernelbench_policy_correct_tasks_are_counted_with_and_without_absolute_slack():
    results = [_judged("a", "ok", "kernelbench"), _judged("b", "ok", "kernelbench", SLACK),
               _judged("c", "ok", "kernelbench", SLACK, Flag("precision", "TF32", severity="warn")),
               _judged("d", "incorrect", "kernelbench"),
               TaskResult(task="level1/e", level="level1", status="missing", policy="kernelbench")]
    summary, report, terminal = _reported(results, "kernelbench")
    assert summary["kernelbench_rule"] == {"tasks": 5, "correct": 3, "correct_without_absolute_slack": 1}
    assert "correct by KernelBench's rule 3, correct without absolute slack 1" in terminal
    assert "Correct by KernelBench's rule 3, correct without absolute slack 1." in report
    row = {line.split(" | ")[0]: line for line in report.splitlines() if line.startswith("| level1/")}
    assert row["| level1/b"].endswith("| absolute slack |") and "absolute slack" not in row["| level1/a"]


def test_the_counts_name_their_tasks_when_only_some_were_judged_under_the_kernelbench_policy():
    results = [_judged("a", "ok", "kernelbench", SLACK), _judged("b", "ok", "strict")]
    summary, report, terminal = _reported(results, "strict")
    assert summary["kernelbench_rule"] == {"tasks": 1, "correct": 1, "correct_without_absolute_slack": 0}
    assert "correct without absolute slack 0 (of the 1 tasks under the kernelbench policy)" in terminal


def test_a_strict_run_reports_no_kernelbench_counts():
    summary, report, terminal = _reported([_judged("a", "ok", "strict"), _judged("b", "incorrect", "strict")],
                                          "strict")
    assert "kernelbench_rule" not in summary
    assert "KernelBench's rule" not in report and "KernelBench's rule" not in terminal


def test_the_report_names_the_tasks_whose_output_does_not_depend_on_their_inputs():
    prop = Flag("task_property", "the task's output does not depend on its inputs", severity="warn")
    results = [_judged("a", "ok", "strict"), _judged("b", "ok", "strict", prop)]
    _, report, _ = _reported(results, "strict")
    assert "Tasks whose output does not depend on their inputs" in report and ": level1/b." in report
    row = {line.split(" | ")[0]: line for line in report.splitlines() if line.startswith("| level1/")}
    assert "output independent of the inputs" in row["| level1/b"]
    assert "output independent" not in row["| level1/a"]


def test_the_best_of_a_tasks_samples_is_its_fastest_correct_candidate_else_its_first_result():
    group = [failed("a", "incorrect"), ok("a", 1.2), ok("a", 2.5), ok("a", 0.9), failed("b", "compile_error"),
             failed("b", "incorrect")]
    group = [TaskResult(**{**r.to_dict(), "sample": i, "verdict": None}) for i, r in enumerate(group)]
    assert [(r.task, r.sample) for r in best_of_samples(group)] == [("a", 2), ("b", 4)]


def test_a_run_of_every_sample_reports_all_candidates_and_the_best_of_each_task():
    group = [TaskResult(**{**r.to_dict(), "sample": i % 2, "verdict": None})
             for i, r in enumerate([ok("a", 3.0), failed("a", "incorrect"), failed("b", "incorrect"), ok("b", 0.6)])]
    summary = summary_dict(group, "eager")
    assert (summary["total"], summary["correct"], summary["fast_p"]["1"]) == (4, 2, 0.25)
    best = summary["best_of_samples"]
    assert (best["total"], best["correct"], best["fast_p"]["1"], list(best["levels"])) == (2, 2, 0.5, ["level1"])
    md = markdown(summary, group)
    assert "best of each task's samples: 2 of 2 tasks correct" in md and "| a#1 | incorrect |" in md
    terminal = io.StringIO()
    print_summary(summary, Console(file=terminal, width=200))
    assert "best of each task's samples: 2 of 2 tasks correct, fast_0.5 1.00" in terminal.getvalue()
    assert "best_of_samples" not in summary_dict([ok("a", 1.0)], "eager")
