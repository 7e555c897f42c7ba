"""benchmarks/real_corpus.py on the small KernelBench-shaped suite in tests/data/corpus: the candidates it writes, the
kinds it draws for each reference, and the evaluator's verdict on the kinds a CPU runs."""
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelrl.bench.suite import discover
from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.task import Candidate, Task

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "real_corpus.py"
SUITE = Path(__file__).parent / "data" / "corpus"
KINDS = {"plain", "compile", "cuda_graph", "triton", "cuda"}
sys.path.insert(0, str(SCRIPT.parent))  # the script's own imports (corpus_ops, eval_throughput) live beside it
real_corpus = importlib.import_module("real_corpus")


def reference(task: str):
    return real_corpus.read(Task.from_file(SUITE / f"{task}.py"))


def generate(out: Path, *args: str) -> dict:
    res = subprocess.run([sys.executable, str(SCRIPT), str(SUITE), str(out), *args], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads((out / "corpus.json").read_text())


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    out = tmp_path_factory.mktemp("groups")
    return out, generate(out, "--per-task", "8", "--seed", "0")


def kinds_of(manifest: dict, task: str) -> set[str]:
    return {c["kind"] for c in manifest["tasks"][task]}


def test_every_task_gets_a_group_named_as_kernelbench_generation_runs_name_their_samples(groups):
    out, manifest = groups
    assert len(manifest["tasks"]) == 6 and sum(manifest["kinds"].values()) == 48
    tasks = discover(SUITE, out, samples="all").tasks
    assert len(tasks) == 48
    for st in tasks:
        entry = manifest["tasks"][st.name][st.sample]
        assert Path(st.candidate_path).name == entry["file"]
        level, pid = re.match(r"level(\d+)/(\d+)_", st.name).groups()
        assert entry["file"] == f"level_{level}_problem_{pid}_sample_{st.sample}_kernel.py"


def test_the_corpus_mixes_every_kind_with_kernels_about_a_third(groups):
    _, manifest = groups
    counts = manifest["kinds"]
    assert set(counts) == KINDS and all(counts.values())
    assert 0.2 <= (counts["triton"] + counts["cuda"]) / sum(counts.values()) <= 0.5


def test_kinds_follow_what_the_reference_allows(groups):
    assert real_corpus.kinds_for(reference("level1/3_Argmax")) == ("plain", "compile", "cuda_graph")  # integers
    assert real_corpus.kinds_for(reference("level3/1_RNNHidden")) == ("plain", "triton", "cuda")  # state kept
    _, manifest = groups
    assert not kinds_of(manifest, "level1/3_Argmax") & {"triton", "cuda"}
    assert not kinds_of(manifest, "level3/1_RNNHidden") & {"compile", "cuda_graph"}


@pytest.mark.parametrize("task, op, cuda", [
    ("level1/1_ReLU", "relu", "fmaxf(v, 0.f)"),
    ("level2/1_Gemm_Multiply_LeakyReLU", "leaky_relu", "v > 0.f ? v : v * 0.1f"),
    ("level2/2_Conv2d_Scale", "div", "v / 2.0f")])
def test_a_kernel_applies_the_op_the_forward_ends_in_with_the_constants_the_program_is_built_with(task, op, cuda):
    tail = reference(task).tail_op  # the slope and the divisor come from get_init_inputs
    assert (tail.name, tail.cuda) == (op, cuda)


def test_a_forward_that_ends_in_no_activation_has_its_output_written_by_the_kernel(groups):
    assert reference("level1/2_Matmul").tail_op is None
    _, manifest = groups
    ops = {task: {c["op"] for c in cs if c["op"]} for task, cs in manifest["tasks"].items()}
    assert ops["level1/2_Matmul"] <= {"copy"} and ops["level1/1_ReLU"] <= {"relu"}


def test_every_file_is_a_candidate_of_its_kind_with_kernels_of_its_own(groups):
    out, manifest = groups
    names = []
    for entries in manifest["tasks"].values():
        for c in entries:
            cand = Candidate.from_file(out / c["file"])
            assert cand.language == {"triton": "triton", "cuda": "cuda"}.get(c["kind"], "python"), c
            found = re.findall(r"def (\w+_kernel_\w+)\(|__global__ void (\w+)\(|load_inline\(name=\"(\w+)\"",
                               cand.source)
            names += [name for spots in found for name in spots if name]
    assert names and len(names) == len(set(names))  # a cold build for every kernel: no two share a name


def test_a_seed_draws_the_same_corpus_again_and_another_seed_another(tmp_path, groups):
    _, manifest = groups
    again = generate(tmp_path / "again", "--per-task", "8", "--seed", "0")
    other = generate(tmp_path / "other", "--per-task", "8", "--seed", "1")
    assert again["tasks"] == manifest["tasks"] and other["tasks"] != manifest["tasks"]


def test_every_k_gives_candidates_to_every_k_th_task_of_the_suite_only(tmp_path, groups):
    _, manifest = groups
    names = [st.name for st in discover(SUITE).tasks]
    sparse = generate(tmp_path / "sparse", "--per-task", "8", "--every", "4")
    assert sorted(sparse["tasks"]) == sorted(names[::4]) and len(sparse["tasks"]) == 2
    assert all(sparse["tasks"][n] == manifest["tasks"][n] for n in sparse["tasks"])  # the same draws as the whole
    res = subprocess.run([sys.executable, str(SCRIPT), str(SUITE), str(tmp_path / "bad"), "--every", "0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--every" in res.stderr


def test_one_candidate_of_each_kind_a_cpu_runs_is_judged_ok(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    task = "level2/1_Gemm_Multiply_LeakyReLU"
    ref = reference(task)
    config = EvalConfig(device="cpu", correctness_trials=2, timing_rounds=2, calls_per_round=5, timing_precision=0,
                        recheck_speedup=1e9, cache_dir=str(tmp_path / "cache"))
    with Evaluator(config) as ev:
        verdicts = {}
        for kind in ("plain", "cuda_graph", "compile"):
            made, source = real_corpus.candidate(ref, kind, "l2_p1_s0")
            assert made == kind
            verdicts[kind] = ev.evaluate(ref.task, Candidate.from_source(source))
    assert {k: (v.status, v.message) for k, v in verdicts.items()} == {k: ("ok", "") for k in verdicts}
