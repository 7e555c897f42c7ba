"""benchmarks/timing_rounds.py: the evaluator's stopping rules for timing rounds, replayed on two runs' kept rounds."""
from pathlib import Path

from kernelrl.bench.result import TaskResult
from kernelrl.bench.resume import RESULTS_FILE, ResultLog
from kernelrl.verdict import Timing, Verdict
from scripts import load_script

timing_rounds = load_script("timing_rounds")


def timing(rounds: list[float], method: str) -> Timing:
    return Timing.from_samples(list(rounds), method, rounds_us=list(rounds))


def graphed(task: str, ref: list[float], cand: list[float], eager=None) -> TaskResult:
    """A verdict whose speedup is graph replay over these rounds; `eager`: its eager rounds (reference, candidate)."""
    speedup = sorted(ref)[len(ref) // 2] / sorted(cand)[len(cand) // 2]
    eager_ref, eager_cand = eager or (ref, cand)
    verdict = Verdict(status="ok", speedup=speedup, speedup_method="cuda_graph",
                      reference_graph=timing(ref, "cuda_graph"), candidate_graph=timing(cand, "cuda_graph"),
                      reference=timing(eager_ref, "cuda_events"), candidate_timing=timing(eager_cand, "cuda_events"))
    return TaskResult(task=task, level="level1", status="ok", speedup=speedup, verdict=verdict)


def run(path: Path, rows: list[TaskResult]) -> Path:
    log = ResultLog(path / RESULTS_FILE)
    for r in rows:
        log.append(r.task, r)
    return path


def test_three_rounds_that_agree_stop_a_run_and_rounds_that_disagree_go_on(tmp_path):
    steady = [100.0] * 5, [50.0] * 5  # precise from the second round on
    split = [100.0] * 5, [50.0, 55.0, 60.0, 50.0, 50.0]  # rounds that disagree: every round kept is taken
    a = run(tmp_path / "a", [graphed("level1/steady", *steady), graphed("level1/split", *split)])
    b = run(tmp_path / "b", [graphed("level1/steady", [100.0] * 5, [50.5] * 5), graphed("level1/split", *split)])
    ra = timing_rounds.rounds_of(timing_rounds.kept_results(a))
    rb = timing_rounds.rounds_of(timing_rounds.kept_results(b))
    assert timing_rounds.stop(*steady, least=3, precision=0.004) == 3
    assert timing_rounds.stop(*split, least=3, precision=0.004) == 5
    three, five = timing_rounds.compare(ra, rb, 3, 0.004), timing_rounds.compare(ra, rb, 5, 0.004)
    assert (three["rounds"], five["rounds"]) == ((3 + 3 + 5 + 5) / 4, 5.0)
    assert three["max"] == five["max"] == abs(50 / 50.5 - 1)  # the steady task's two runs, 1% apart either way


def test_eager_rounds_are_cut_at_the_most_asked_for_and_read_from_the_eager_timings(tmp_path):
    noisy = [100.0] * 8, [50.0, 70.0] * 4  # never within 2%: every round up to the most
    rows = [graphed("level1/t", [100.0] * 5, [50.0] * 5, eager=noisy)]
    eager = timing_rounds.rounds_of(timing_rounds.kept_results(run(tmp_path / "a", rows)), "eager")
    assert eager["level1/t"][:2] == (list(noisy[0]), list(noisy[1]))
    assert timing_rounds.stop(*noisy, least=3, precision=0.02) == 8
    assert timing_rounds.stop(*noisy, least=3, precision=0.02, most=5) == 5
    assert timing_rounds.compare(eager, eager, 3, 0.02, most=5)["rounds"] == 5


def test_a_report_of_both_rules_is_written(tmp_path, capsys):
    rows = [graphed("level1/t", [100.0] * 5, [50.0] * 5)]
    a, b = run(tmp_path / "a", rows), run(tmp_path / "b", rows)
    out = tmp_path / "t.md"
    assert timing_rounds.main([str(a), str(b), "--least", "5,3", "--eager-most", "5", "--out", str(out)]) == 0
    report = out.read_text()
    assert "| 5 | 1 | 5.00 | 0.00% |" in report and "| 3 | 1 | 3.00 | 0.00% |" in report  # graph replay
    assert "| most rounds |" in report and "| 5 | 1 | 3.00 | 0.00% |" in report  # eager: precise at its least, 3


def test_a_kept_run_packed_with_xz_reads_as_its_results_jsonl(tmp_path):
    import lzma

    steady = [100.0] * 5, [50.0] * 5
    a = run(tmp_path / "a", [graphed("level1/steady", *steady)])
    plain = timing_rounds.kept_results(a)
    packed = tmp_path / "packed"
    packed.mkdir()
    (packed / (RESULTS_FILE + ".xz")).write_bytes(lzma.compress((a / RESULTS_FILE).read_bytes()))
    kept = timing_rounds.kept_results(packed)
    assert list(kept) == list(plain) and [r.speedup for r in kept.values()] == [2.0]
