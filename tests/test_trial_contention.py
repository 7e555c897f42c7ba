"""benchmarks/trial_contention.py: the candidates it judges, from a task or from a real-like corpus."""
import subprocess
import sys
from pathlib import Path

from kernelrl.task import Task
from scripts import BENCHMARKS, load_script

trial_contention = load_script("trial_contention")
SUITE = Path(__file__).parent / "data" / "corpus"


def test_a_task_is_judged_by_its_identity_candidate_or_by_its_corpus_candidates_of_the_kinds_asked(tmp_path):
    res = subprocess.run([sys.executable, str(BENCHMARKS / "real_corpus.py"), str(SUITE), str(tmp_path),
                          "--per-task", "8", "--seed", "0"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    task = Task.from_file(SUITE / "level1" / "1_ReLU.py")
    (name, identity), = trial_contention.candidates("level1/1_ReLU.py", task, None, set(), 2)
    assert name == "level1/1_ReLU.py" and "ModelNew" in identity.source
    plain = trial_contention.candidates("level1/1_ReLU.py", task, tmp_path, {"plain"}, 3)
    assert plain and len(plain) <= 3 and all(" plain " in n for n, _ in plain)
    assert all(c.source == (tmp_path / n.split()[-1]).read_text() for n, c in plain)
    assert len(trial_contention.candidates("level1/1_ReLU.py", task, tmp_path, {"plain", "triton", "compile",
                                                                                 "cuda_graph", "cuda"}, 8)) == 8
