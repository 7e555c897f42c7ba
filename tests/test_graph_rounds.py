"""benchmarks/graph_rounds.py: the evaluator's stopping rule for graph replay, replayed on two runs' kept rounds."""
import importlib.util
from pathlib import Path

from kernelrl.bench.result import TaskResult
from kernelrl.bench.resume import RESULTS_FILE, ResultLog
from kernelrl.verdict import Timing, Verdict

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "graph_rounds.py"
spec = importlib.util.spec_from_file_location("graph_rounds", SCRIPT)
graph_rounds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(graph_rounds)


def graphed(task: str, ref: list[float], cand: list[float]) -> TaskResult:
    def timing(rounds):
        return Timing.from_samples(list(rounds), "cuda_graph", rounds_us=list(rounds))
    speedup = (sorted(ref)[len(ref) // 2]) / (sorted(cand)[len(cand) // 2])
    verdict = Verdict(status="ok", speedup=speedup, speedup_method="cuda_graph", reference_graph=timing(ref),
                      candidate_graph=timing(cand))
    return TaskResult(task=task, level="level1", status="ok", speedup=speedup, verdict=verdict)


def run(path: Path, rows: list[TaskResult]) -> Path:
    log = ResultLog(path / RESULTS_FILE)
    for r in rows:
        log.append(r.task, r)
    return path


def test_three_rounds_that_agree_stop_a_run_and_rounds_that_disagree_go_on(tmp_path):
    steady = [100.0] * 5, [50.0] * 5  # precise from the second round on
    late = [100.0] * 5, [50.0, 55.0, 60.0, 50.0, 50.0]  # rounds that disagree: every round kept is taken
    a = run(tmp_path / "a", [graphed("level1/steady", *steady), graphed("level1/late", *late)])
    b = run(tmp_path / "b", [graphed("level1/steady", [100.0] * 5, [50.5] * 5), graphed("level1/late", *late)])
    ra, rb = graph_rounds.rounds_of(graph_rounds.kept_results(a)), graph_rounds.rounds_of(graph_rounds.kept_results(b))
    assert graph_rounds.stop(*steady, least=3, precision=0.004) == 3
    assert graph_rounds.stop(*late, least=3, precision=0.004) == 5
    three, five = graph_rounds.compare(ra, rb, 3, 0.004), graph_rounds.compare(ra, rb, 5, 0.004)
    assert (three["rounds"], five["rounds"]) == ((3 + 3 + 5 + 5) / 4, 5.0)
    assert three["max"] == five["max"] == abs(50 / 50.5 - 1)  # the steady task's two runs, 1% apart either way


def test_a_table_of_each_least_is_written(tmp_path, capsys):
    rows = [graphed("level1/t", [100.0] * 5, [50.0] * 5)]
    a, b = run(tmp_path / "a", rows), run(tmp_path / "b", rows)
    assert graph_rounds.main([str(a), str(b), "--least", "5,3", "--out", str(tmp_path / "t.md")]) == 0
    table = (tmp_path / "t.md").read_text()
    assert "| 5 | 1 | 5.00 | 0.00% |" in table and "| 3 | 1 | 3.00 | 0.00% |" in table
