"""The evaluator on CUDA: statuses, a load_inline CUDA kernel, a Triton kernel, and a side-stream cheat."""
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.task import Candidate, Task

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parent / "data" / "eval_gpu"


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    cfg = EvalConfig(device="cuda", timing_rounds=3, timing_precision=0, calls_per_round=10, timeout_s=300,
                     cache_dir=str(tmp_path_factory.mktemp("cache")))
    with Evaluator(cfg) as e:
        yield e


@pytest.fixture(scope="module")
def task():
    return Task.from_file(DATA / "softmax_rows.py")


def judge(ev, task, name):
    return ev.evaluate(task, Candidate.from_file(DATA / f"{name}.py"))


def test_cuda_load_inline_kernel_is_ok_and_timed_with_events(ev, task):
    v = judge(ev, task, "softmax_cuda")
    assert v.status == "ok", v.message
    assert v.candidate_timing.method == "cuda_events"
    assert v.speedup > 0


def test_triton_kernel_is_ok(ev, task):
    v = judge(ev, task, "softmax_triton")
    assert v.status == "ok", v.message


def test_side_stream_work_is_caught(ev, task):
    v = judge(ev, task, "softmax_side_stream")
    assert v.status == "rejected", v.to_json()
    assert "side_stream" in v.hacks


def test_fp16_shortcut_is_incorrect(ev, task):
    assert judge(ev, task, "softmax_wrong").status == "incorrect"


def test_syntax_error_on_cuda_is_compile_error(ev, task):
    assert judge(ev, task, "syntax_error").status == "compile_error"


def test_illegal_address_is_runtime_error_and_next_candidate_is_fine(ev, task):
    v = judge(ev, task, "softmax_illegal")
    assert v.status == "runtime_error", v.to_json()
    assert judge(ev, task, "softmax_triton").status == "ok"


def test_hang_on_cuda_times_out(task, tmp_path):
    with Evaluator(EvalConfig(device="cuda", timeout_s=40, cache_dir=str(tmp_path))) as e:
        assert e.evaluate(task, Candidate.from_file(DATA / "hang.py")).status == "timeout"


def test_graph_replay_is_timed_when_both_programs_capture(ev, task):
    v = judge(ev, task, "softmax_cuda")
    assert v.status == "ok", v.message
    assert v.candidate_graph is not None and v.candidate_graph.method == "cuda_graph"
    assert v.graph_speedup and v.graph_speedup > 0


def test_the_reference_worker_times_on_the_cores_beside_the_gpu(ev, task):
    import os

    assert judge(ev, task, "softmax_triton").status == "ok"
    if not ev._cpus:
        pytest.skip("this machine has too few cores (or no affinity) to set any aside")
    ref = next(iter(ev._refs.values()))[0]
    assert os.sched_getaffinity(ref.proc.pid) == set(ev._cpus)  # it has timed; builds ran on every core
