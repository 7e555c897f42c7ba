"""The evaluator on CUDA: statuses, a load_inline CUDA kernel, a Triton kernel, and a side-stream cheat."""
import time
from pathlib import Path

import pytest
import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.evaluator import HARNESS
from kernelrl.sandbox.process import Worker
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
    assert v.candidate_timing.method == "cuda_events" and v.reference.method == "cuda_events"
    assert v.latency_speedup == pytest.approx(v.reference.median_us / v.candidate_timing.median_us)
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


def test_the_speedup_is_device_time_from_graph_replay_when_both_programs_capture(ev, task):
    v = judge(ev, task, "softmax_cuda")
    assert v.status == "ok", v.message
    assert v.candidate_graph is not None and v.candidate_graph.method == "cuda_graph"
    assert v.speedup_method == "cuda_graph" and v.speedup == v.graph_speedup
    assert v.speedup == pytest.approx(v.reference_graph.median_us / v.candidate_graph.median_us)
    assert v.speedup_stderr is not None and v.latency_speedup is not None
    # Replay leaves out the host's launch work, so a device time is under the same program's eager latency.
    assert v.candidate_graph.median_us < v.candidate_timing.median_us


def test_a_candidate_that_cannot_be_captured_is_compared_by_latency(ev, task):
    v = judge(ev, task, "softmax_synchronizes")
    assert v.status == "ok", v.message
    assert v.speedup_method == "cuda_events" and v.speedup == v.latency_speedup and v.graph_speedup is None
    assert any(f.check == "cuda_graph" and f.severity == "warn" for f in v.flags)


def test_the_latency_basis_compares_eager_calls(task, tmp_path):
    cfg = EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, calls_per_round=10, timeout_s=300,
                     cache_dir=str(tmp_path), timing_basis="latency", compare_compile=True)
    with Evaluator(cfg) as e:
        v = e.evaluate(task, Candidate.from_file(DATA / "softmax_triton.py"))
    assert v.status == "ok", v.message
    assert v.speedup_method == "cuda_events" and v.speedup == v.latency_speedup
    assert v.compile_speedup == pytest.approx(v.reference_compiled.median_us / v.candidate_timing.median_us)
    assert v.graph_speedup is not None  # still measured and reported


def test_the_compile_speedup_is_measured_by_the_same_method_as_the_speedup(task, tmp_path):
    cfg = EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, calls_per_round=10, timeout_s=300,
                     cache_dir=str(tmp_path), compare_compile=True)
    with Evaluator(cfg) as e:
        v = e.evaluate(task, Candidate.from_file(DATA / "softmax_triton.py"))
        ref_graph = e.time_reference(task)
    assert v.status == "ok", v.message
    assert v.speedup_method == "cuda_graph" and v.reference_compiled_graph is not None
    assert v.compile_speedup == pytest.approx(v.reference_compiled_graph.median_us / v.candidate_graph.median_us)
    assert ref_graph.method == "cuda_graph"  # bench baselines are timed the way verdicts compare


def test_the_reference_worker_times_on_the_cores_beside_the_gpu(ev, task):
    import os

    assert judge(ev, task, "softmax_triton").status == "ok"
    if not ev._cpus:
        pytest.skip("this machine has too few cores (or no affinity) to set any aside")
    ref = next(iter(ev._refs.values()))[0]
    assert os.sched_getaffinity(ref.proc.pid) == set(ev._cpus)  # it has timed; builds ran on every core


def _elementwise_task(numel: int) -> str:
    return ("import torch\nimport torch.nn as nn\n"
            "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
            f"def get_inputs():\n    return [torch.randn({numel})]\n"
            "def get_init_inputs():\n    return []\n")


def test_a_worker_gives_idle_device_memory_back_between_requests(tmp_path):
    size = torch.cuda.get_device_properties(0).total_memory // 24  # a trial holds 3x: inputs, their copy, outputs
    init = {"role": "reference", "device": "cuda:0", "seed": 7, "task_source": _elementwise_task(size // 4)}
    with Worker(HARNESS, scratch_root=tmp_path, init=init) as w:
        w.request({"op": "ready"}, 300)
        free0 = torch.cuda.mem_get_info(0)[0]
        header, outs = w.request({"op": "trial", "seed": 11, "full": True}, 300)
        assert header["type"] == "trial" and outs["out0"].numel() == size // 4
        held = []
        for _ in range(50):  # the worker gives its cache back once the reply is out
            held.append(free0 - torch.cuda.mem_get_info(0)[0])
            if held[-1] < size // 2:
                break
            time.sleep(0.1)
        assert held[-1] < size // 2, f"the worker still holds {held[-1] / 2**30:.1f} GiB after its reply"


def test_a_task_whose_trials_would_fill_the_gpu_side_by_side_is_judged_ok(tmp_path):
    numel = torch.cuda.get_device_properties(0).total_memory // 12 // 4  # inputs and outputs each 1/12 of the GPU
    task = Task.from_source(_elementwise_task(numel), name="big_relu")
    cand = Candidate.from_source(task.source.replace("class Model(", "class ModelNew("))
    with Evaluator(EvalConfig(device="cuda", timing_rounds=3, timing_precision=0, timeout_s=600,
                              cache_dir=str(tmp_path))) as ev:
        v = ev.evaluate(task, cand)
    assert v.status == "ok", v.message


def test_trials_that_run_out_of_memory_beside_other_work_run_again_with_the_device_alone(tmp_path):
    """Correctness shares the device with untimed work beside it (probes, first calls): a trial that runs out of
    memory there is not the program's fault, and runs again once the device is the job's alone. Here the memory
    taken beside it is a block this process holds until the GPU stage asks for the device alone."""
    numel = torch.cuda.get_device_properties(0).total_memory // 60 // 4  # trials of a fifth of the GPU: shared
    task = Task.from_source(_elementwise_task(numel), name="relu_sixtieth")
    cand = Candidate.from_source(task.source.replace("class Model(", "class ModelNew("))
    with Evaluator(EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, timeout_s=600,
                              cache_dir=str(tmp_path))) as ev:
        assert ev._shares(ev._reference(task)[1])
        p = ev.prepare(task, cand)
        # room for one of a trial's three tensors (inputs, their kept copy, outputs) and the lent reply buffers
        beside = [torch.empty(torch.cuda.mem_get_info(0)[0] - 3 * numel * 4, dtype=torch.uint8, device="cuda")]
        alone, asked = ev._stage.to_exclusive, []

        def to_exclusive():
            asked.append(ev._phases.seen.get("correctness"))  # None: asked before the trials had passed
            beside.clear()  # the work beside it ends before the device is the GPU stage's alone
            torch.cuda.empty_cache()
            alone()

        ev._stage.to_exclusive = to_exclusive
        v = ev.judge(p)
    assert v.status == "ok", v.message
    assert asked[0] is None, "the trials did not run out of memory beside the block: nothing was shown"


def test_a_torch_compile_candidate_gets_its_verdict_again_from_the_build_cache_of_an_earlier_one(tmp_path):
    """torch.compile's generated code names its Triton kernels by absolute path: a build copied into another
    worker's folder pointed at the first one's, which confinement refuses (runtime_error on the second judgement)."""
    honest = Path(__file__).parent / "honest"
    t, c = Task.from_file(honest / "tasks" / "elementwise_chain.py"), Candidate.from_file(honest / "compiled_chain.py")
    statuses = []
    for _ in range(2):  # the second evaluator finds the first one's build in the cache
        with Evaluator(EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, cache_dir=str(tmp_path))) as e:
            v = e.evaluate(t, c)
            statuses.append((v.status, v.message))
    assert statuses == [("ok", "")] * 2


def test_a_compiled_candidate_makes_its_first_call_before_the_gpu_stage(tmp_path):
    """torch.compile compiles a program's kernels at its first call: made in the CPU stage, beside untimed work
    (`Evaluator._first_call`), it no longer holds the GPU stage, and the trials that follow judge it as before."""
    honest = Path(__file__).parent / "honest"
    t, c = Task.from_file(honest / "tasks" / "elementwise_chain.py"), Candidate.from_file(honest / "compiled_chain.py")
    with Evaluator(EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, cache_dir=str(tmp_path))) as e:
        v = e.evaluate(t, c)
    assert v.status == "ok", v.message
    assert v.phases["first_call"] > v.phases["correctness"], v.phases  # the compile went before the GPU stage
    assert 0 < v.phases["compiling"] <= v.phases["first_call"], v.phases  # with the device given back meanwhile


def test_a_triton_candidate_gives_the_device_back_while_its_kernels_compile_at_its_first_call(tmp_path):
    """Triton compiles a kernel at its first launch, seconds of CPU work: the first call gives the device back
    meanwhile (Triton's JIT hooks, `compilegate._triton_hooks`), as a torch.compile candidate's does."""
    honest = Path(__file__).parent / "honest"
    t, c = Task.from_file(honest / "tasks" / "softmax.py"), Candidate.from_file(honest / "triton_softmax.py")
    with Evaluator(EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, cache_dir=str(tmp_path))) as e:
        v = e.evaluate(t, c)
    assert v.status == "ok", v.message
    assert 0 < v.phases["compiling"] <= v.phases["first_call"], v.phases


def test_a_large_torch_compile_candidate_compiles_its_kernels_in_its_confined_worker(tmp_path):
    """Inductor hands kernels to a pool of compile processes once the pool is up; one started after the worker's
    confinement cannot open the GPU, and two honest compiled level-3 models were runtime_error for it."""
    t = Task.from_file(DATA / "conv_stack.py")
    c = Candidate.from_file(DATA / "conv_stack_compiled.py")
    with Evaluator(EvalConfig(device="cuda", timing_rounds=2, timing_precision=0, cache_dir=str(tmp_path))) as e:
        v = e.evaluate(t, c)
    assert v.status == "ok", v.message


def test_a_reference_that_carries_state_is_ok_against_itself_job_after_job_on_the_gpu(ev):
    from kernelrl.task import identity_candidate

    state = Path(__file__).parent / "data" / "state"
    for name in ("rnn_stateful", "rnn_hidden_stateful"):
        t = Task.from_file(state / f"{name}.py")
        for _ in range(2):
            v = ev.evaluate(t, identity_candidate(t))
            assert v.status == "ok", (name, v.message)
            assert "first_call" not in v.phases  # a call ahead of the reference would be a call ahead of its state


@pytest.mark.parametrize("name, eager_rounds", [("softmax_cuda", 2), ("softmax_synchronizes", 6)])
def test_eager_latency_is_measured_to_its_own_precision_where_graph_replay_gives_the_speedup(
        tmp_path, task, name, eager_rounds):
    # the speedup's precision is never reached (every round taken), the latency's at once: eager rounds stop at
    # latency_rounds where graphs are replayed, and go on to every round where they cannot be
    cfg = EvalConfig(device="cuda", timing_rounds=4, latency_rounds=2, max_timing_rounds=6, timing_precision=1e-12,
                     latency_precision=10.0, calls_per_round=10, round_us=1.0, min_calls_per_round=10,
                     timeout_s=300, cache_dir=str(tmp_path))
    with Evaluator(cfg) as e:
        v = judge(e, task, name)
    assert v.status == "ok", v.message
    assert v.candidate_timing.n == eager_rounds * 10
    if v.speedup_method == "cuda_graph":
        assert v.candidate_graph.n == 6 * 10
