"""The evaluator's verdicts on real candidates, one status each, on the CPU."""
import json
import subprocess
import threading
import sys
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig, EvaluationError, Evaluator
from kernelrl.task import Candidate, Task, TaskError
from kernelrl.verdict import Verdict

DATA = Path(__file__).parent / "data" / "eval"
FAST = dict(device="cpu", correctness_trials=3, timing_rounds=2, timing_precision=0, calls_per_round=5, warmup=1,
            timeout_s=120)


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with Evaluator(EvalConfig(cache_dir=str(cache), **FAST)) as e:
        yield e


@pytest.fixture(scope="module")
def task():
    return Task.from_file(DATA / "scale_add.py")


def judge(ev, task, name):
    return ev.evaluate(task, Candidate.from_file(DATA / f"{name}.py"))


def test_correct_candidate_is_ok_with_a_speedup(ev, task):
    v = judge(ev, task, "correct")
    assert v.status == "ok", v.message
    assert v.speedup is not None and v.speedup > 0
    assert v.reference.n == v.candidate_timing.n == 10
    assert v.error.trials == 3 + 1 and v.error.mismatched == 0  # three trials and a repeat of the first


def test_a_kept_reference_worker_rests_after_each_job_and_serves_the_next(ev, task):
    judge(ev, task, "correct")
    ref = ev._refs[task.digest][0]  # kept for the task's next candidate
    sent, send = [], ref.send

    def spy(op):
        sent.append(op["op"])
        return send(op)

    ref.send = spy
    try:
        assert judge(ev, task, "correct").status == "ok"
    finally:
        del ref.send
    assert sent[-1] == "rest" and sent.count("rest") == 1  # its inputs and cached memory dropped once judged
    assert "time" in sent and "trial" in sent


def test_the_candidate_builds_while_its_reference_starts(ev):
    """The reference takes five seconds to build, the candidate two: the candidate's build is done by the time the
    reference has started (built after it, it would take two seconds more)."""
    t = Task.from_file(DATA / "slow_build_ref.py")
    v = ev.evaluate(t, Candidate.from_file(DATA / "slow_build.py"))
    assert v.status == "ok", v.message
    assert v.phases["reference"] >= 5.0 and v.phases["start_and_build"] < 2.0, v.phases


def test_a_candidate_loaded_under_a_seed_its_reference_no_longer_has_is_loaded_again(ev, task, monkeypatch):
    """A reference replaced while the candidate loaded (evicted and started again) has another seed: the candidate,
    whose parameters come from the seed as the reference's do, is loaded again under the new one."""
    seed = ev._reference_seed
    monkeypatch.setattr(ev, "_reference_seed", lambda t: seed(t) + 1)
    assert judge(ev, task, "correct").status == "ok"


def test_a_candidate_prepared_while_its_reference_starts_loads_once_under_that_references_seed(tmp_path,
                                                                                               monkeypatch):
    """A group's candidates are prepared together: those that ask for the reference's seed while it starts get the
    seed it starts under, so that none is loaded again under another (`Evaluator._renew_candidate`)."""
    t = Task.from_file(DATA / "scale_add.py")
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as e:
        probed, starting = e._probed, threading.Event()

        def slow_start(task, init, alone):
            starting.set()
            time.sleep(0.5)
            return probed(task, init, alone)

        monkeypatch.setattr(e, "_probed", slow_start)
        renewed = []
        renew = e._renew_candidate
        monkeypatch.setattr(e, "_renew_candidate", lambda p, left: renewed.append(p) or renew(p, left))
        first = threading.Thread(target=lambda: e.release(e.prepare(t, Candidate.from_file(DATA / "correct.py"))))
        first.start()
        assert starting.wait(60)
        p = e.prepare(t, Candidate.from_file(DATA / "correct.py"))  # asks for the seed while the reference starts
        first.join()
        assert p.state["init"]["seed"] == e._reference_seed(t)
        assert not renewed
        assert e.judge(p).status == "ok"


@pytest.mark.parametrize("in_turn", [False, True])
def test_trials_too_big_to_run_side_by_side_run_the_reference_first_with_the_same_verdicts(ev, task, monkeypatch,
                                                                                            in_turn):
    judge(ev, task, "correct")  # the reference worker started and kept
    ref = ev._refs[task.digest][0]
    order, ref_send, send = [], ref.send, ev._send

    def spy_ref(op):
        order.append(("reference", op["op"]))
        return ref_send(op)

    def spy(worker, op, what):
        order.append(("candidate", op["op"]))
        return send(worker, op, what)

    monkeypatch.setattr(ref, "send", spy_ref)
    monkeypatch.setattr(ev, "_send", spy)
    monkeypatch.setattr(Evaluator, "_trials_in_turn", lambda self: in_turn)
    assert judge(ev, task, "correct").status == "ok"
    trials = [who for who, op in order if op == "trial"]
    first = "reference" if in_turn else "candidate"
    assert trials == [first, ({"reference", "candidate"} - {first}).pop()] * 4, order  # 3 trials and a repeat
    assert judge(ev, task, "wrong").status == "incorrect"
    assert judge(ev, task, "segfault").status == "runtime_error"
    assert judge(ev, task, "correct").status == "ok"  # the kept reference stayed in step


def test_trials_that_run_out_of_device_memory_in_the_evaluator_beside_other_work_run_again_alone(ev, task,
                                                                                                monkeypatch):
    """The evaluator's own allocations in the trials (the outputs it receives and compares) can find the device
    full of the work beside them: not the program's fault, so the trials run again with the device alone, as where a
    worker runs out (here the CPU's lock shares the device as a GPU's does, and the first comparison runs out)."""
    import torch

    judge(ev, task, "correct")
    monkeypatch.setattr(ev._gpu, "sharing", True)
    monkeypatch.setattr(Evaluator, "_shares", lambda self, state: True)
    compare, shared = Evaluator._compare_outputs, []

    def compare_once_out_of_memory(self, *args, **kw):
        shared.append(self._stage.shared)
        if len(shared) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB.")
        return compare(self, *args, **kw)

    monkeypatch.setattr(Evaluator, "_compare_outputs", compare_once_out_of_memory)
    v = judge(ev, task, "correct")
    assert v.status == "ok", v.message
    assert shared[0] and len(shared) == 3 and not any(shared[1:])  # both full trials again, with the device alone


def test_wrong_candidate_is_incorrect(ev, task):
    v = judge(ev, task, "wrong")
    assert v.status == "incorrect"
    assert v.speedup is None
    assert "outside tolerance" in v.message


@pytest.mark.parametrize("name", ["wrong", "raises"])
def test_a_verdict_decided_in_the_trials_counts_their_time_as_correctness_not_finish(ev, task, name):
    # `finish` is the report and the worker's close alone: a phase table reads where the GPU stage goes
    v = judge(ev, task, name)
    assert v.status in ("incorrect", "runtime_error") and "correctness" in v.phases, v.phases
    assert "timing" not in v.phases


def test_a_wrong_output_is_told_from_the_rounded_exact_result_without_its_float64_bytes(ev, task):
    judge(ev, task, "correct")  # the task's reference worker, kept for its next candidate
    ref = ev._refs[task.digest][0]
    asked, send = [], ref.send

    def spy(op):
        asked.append(dict(op))
        return send(op)

    ref.send = spy
    try:
        v = judge(ev, task, "wrong")
    finally:
        del ref.send
    assert v.status == "incorrect"
    assert "against the exact (float64) result: output 0: less accurate than the fp32 reference: relative L2 " \
           "error at least" in v.message
    exact = [op for op in asked if op["op"] == "exact"]
    assert len(exact) == 1 and exact[0]["rounded"] is True  # the float64 outputs were never asked for


def test_syntax_error_is_compile_error_with_the_line(ev, task):
    v = judge(ev, task, "syntax_error")
    assert v.status == "compile_error"
    assert "line 6" in v.message


def test_cpp_compile_error_is_trimmed_to_the_error(ev, task):
    v = judge(ev, task, "cpp_error")
    assert v.status == "compile_error"
    assert "undeclared_identifier" in v.message
    assert len(v.message) < 5000


def test_cpp_extension_candidate_is_ok(ev, task):
    v = judge(ev, task, "cpp_correct")
    assert v.status == "ok", v.message


def test_segfault_is_runtime_error_and_the_evaluator_survives(ev, task):
    v = judge(ev, task, "segfault")
    assert v.status == "runtime_error"
    assert "SIGSEGV" in v.message
    assert judge(ev, task, "correct").status == "ok"


def test_exception_is_runtime_error_naming_the_line(ev, task):
    v = judge(ev, task, "raises")
    assert v.status == "runtime_error"
    assert "shape mismatch in my kernel" in v.message and "line 9" in v.message


def test_hang_is_bounded_by_the_timeout(task, tmp_path):
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **dict(FAST, timeout_s=25))) as e:
        v = e.evaluate(task, Candidate.from_file(DATA / "hang.py"))
    assert v.status == "timeout"
    assert v.seconds < 60


def test_early_exit_is_rejected_not_believed(ev, task):
    v = judge(ev, task, "early_exit")
    assert v.status == "rejected"
    assert "forged_result" in v.hacks


def test_verdict_round_trips_through_json(ev, task):
    v = judge(ev, task, "correct")
    assert Verdict.from_json(v.to_json()) == v


def test_workers_run_confined_with_no_secrets(ev, task, monkeypatch):
    v = judge(ev, task, "correct")
    assert v.confinement.get("env_secrets") == 0
    assert v.confinement.get("landlock") is True


def test_missing_modelnew_is_a_usage_error():
    with pytest.raises(TaskError, match="ModelNew"):
        Candidate.from_file(DATA / "no_modelnew.py")


def test_reference_without_get_inputs_is_a_usage_error(tmp_path):
    p = tmp_path / "ref.py"
    p.write_text("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n")
    with pytest.raises(TaskError, match="get_inputs"):
        Task.from_file(p)


def test_unavailable_device_is_a_clear_error():
    with pytest.raises(EvaluationError, match="not available|unsupported|unknown"):
        Evaluator(EvalConfig(device="cuda:7" if not __import__("torch").cuda.is_available() else "tpu"))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_eval_json_prints_one_verdict(tmp_path):
    r = run_cli("eval", str(DATA / "scale_add.py"), str(DATA / "correct.py"), "--json", "--rounds", "2",
                "--calls", "5", "--trials", "2")
    assert r.returncode == 0, r.stderr
    v = Verdict.from_dict(json.loads(r.stdout))
    assert v.status == "ok"


def test_cli_table_and_nonzero_exit_for_incorrect():
    r = run_cli("eval", str(DATA / "scale_add.py"), str(DATA / "wrong.py"), "--rounds", "1", "--calls", "2",
                "--trials", "2")
    assert r.returncode == 1
    assert "incorrect" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (["nope.py", "also_nope.py"], "no such reference file"),
    ([str(DATA / "scale_add.py"), str(DATA / "no_modelnew.py")], "ModelNew"),
    ([str(DATA / "correct.py"), str(DATA / "correct.py")], "Model, get_inputs, get_init_inputs"),
    ([str(DATA / "broken_import_ref.py"), str(DATA / "correct.py")], "No module named 'not_a_module' (reference line 3"),
])
def test_cli_usage_errors_are_one_line(args, needle):
    r = run_cli("eval", *args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_unavailable_device_is_one_line():
    if __import__("torch").cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = run_cli("eval", str(DATA / "scale_add.py"), str(DATA / "correct.py"), "--device", "cuda")
    assert r.returncode == 2 and "not available" in r.stderr and "Traceback" not in r.stderr


def test_tuple_outputs_with_integer_indices_are_compared_exactly(ev):
    t = Task.from_file(DATA / "tuple_argmax.py")
    v = ev.evaluate(t, Candidate.from_file(DATA / "tuple_argmax_cand.py"))
    assert v.status == "ok", v.message


def test_a_candidate_may_write_into_the_inputs_the_reference_writes_into(ev):
    t = Task.from_file(DATA / "inplace_ref.py")
    v = ev.evaluate(t, Candidate.from_file(DATA / "inplace_cand.py"))
    assert v.status == "ok", v.message
    assert not any(f.severity == "reject" for f in v.flags)


def test_builds_are_cached_per_source_and_worker_slots_cleaned_up(task, tmp_path):
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as e:
        for name in ("cpp_correct", "correct"):
            assert e.evaluate(task, Candidate.from_file(DATA / f"{name}.py")).status == "ok"
        digest = Candidate.from_file(DATA / "cpp_correct.py").digest
        built = list((tmp_path / "build").glob(f"{digest}-*/torch_extensions/*/*.so"))
        assert len(built) == 1
        assert len(list((tmp_path / "slots").iterdir())) == 1  # only the spare waiting for the next candidate
    assert not list((tmp_path / "slots").iterdir())


def test_each_verdict_gives_its_own_reason_not_the_previous_candidates(ev, task):
    assert "outside tolerance" in judge(ev, task, "wrong").message
    v = judge(ev, task, "mutates_input")
    assert v.status == "rejected" and "input_mutation" in v.hacks
    assert "outside tolerance" not in v.message and "modified input" in v.message


def test_timing_adds_rounds_until_the_speedup_is_precise_and_reports_its_error(task, tmp_path):
    base = dict(FAST, timing_rounds=2, max_timing_rounds=5, cache_dir=str(tmp_path))
    with Evaluator(EvalConfig(**dict(base, timing_precision=1e-12))) as ev:  # never precise enough: all rounds
        v = judge(ev, task, "correct")
    assert v.status == "ok", v.message
    assert v.candidate_timing.n == v.reference.n == 5 * 5
    assert len(v.reference.round_medians_us) == len(v.candidate_timing.round_medians_us) == 5  # one per round
    assert v.speedup_stderr is not None and 0 < v.speedup_stderr < 1
    again = Verdict.from_json(v.to_json())
    assert again.speedup_stderr == v.speedup_stderr and again.reference == v.reference
    # On the CPU the speedup is the per-call latency ratio, measured by the host clock.
    assert v.speedup_method == "perf_counter" and v.latency_speedup == v.speedup
    assert v.speedup == pytest.approx(v.reference.median_us / v.candidate_timing.median_us)
    with Evaluator(EvalConfig(**dict(base, timing_precision=10.0))) as ev:  # precise at once: the minimum
        assert judge(ev, task, "correct").candidate_timing.n == 2 * 5
    with Evaluator(EvalConfig(**dict(base, timing_rounds=1, timing_precision=0))) as ev:  # one round: no error
        assert judge(ev, task, "correct").speedup_stderr is None


# Round medians (us) of graph replay on an H200, level1/22_Tanh, the same program on both sides: one round of the
# candidate's ran 25% slow as a whole (the fourth-run example of `throughput_real_h200x4/levels/level1`).
TANH_REF = [3027, 3025, 3032, 3024, 3028]
TANH_CAND = [3032, 3031, 3792, 3023, 3025]


def test_a_round_slowed_as_a_whole_asks_for_no_more_rounds_but_rounds_that_disagree_do():
    from types import SimpleNamespace

    from kernelrl.evaluate.timing import TimedRounds, _relative_stderr
    timer = SimpleNamespace(config=EvalConfig())  # timing_precision 0.4%, at least 5 rounds
    assert TimedRounds._precise_enough(timer, TANH_REF, TANH_CAND)  # the speedup's median is 1.000 either way
    assert _relative_stderr(TANH_REF, TANH_CAND) < 0.001  # all five rounds' standard deviation gives 4%
    # rounds split between two speeds: no median is precise, more rounds are asked for
    split = [3000, 3600, 3000, 3600, 3000]
    assert not TimedRounds._precise_enough(timer, TANH_REF * 2, split * 2)
    assert not TimedRounds._precise_enough(timer, TANH_REF, split)
    assert _relative_stderr(TANH_REF, split) > 0.04
    # fewer rounds than the minimum, or one round: never precise enough
    assert not TimedRounds._precise_enough(timer, TANH_REF[:4], TANH_CAND[:4])
    assert _relative_stderr([1.0], [1.0]) == float("inf")
    # the error is relative and symmetric: twice as fast or twice as slow, the same rounds give the same error
    double = [2 * c for c in TANH_CAND]
    assert _relative_stderr(TANH_REF, double) == pytest.approx(_relative_stderr(double, TANH_REF))
    assert _relative_stderr(TANH_REF, double) == pytest.approx(_relative_stderr(TANH_REF, TANH_CAND))


class _Replays:
    """A worker's side of timing rounds (`kind` "graph" or "time"): each request answered with the next round's
    call times (us)."""

    def __init__(self, rounds, kind="graph"):
        self.rounds, self.kind, self.asked = list(rounds), kind, 0

    def request(self, op, timeout=None):
        self.send(op)
        return self.receive(timeout)

    def send(self, op):
        assert op["op"] == self.kind

    def receive(self, timeout=None, device=None):
        self.asked += 1
        times = self.rounds.pop(0)
        return {"times_us": times, "wall_us": times, "quiesce_us": [0.0] * len(times)}, {}


def test_graph_replay_stops_at_its_own_least_rounds_where_the_speedup_is_precise_and_goes_on_where_not(tmp_path):
    # Device time repeats from round to round: three rounds that agree give the speedup; rounds that disagree ask
    # for more, up to the limit, as in eager timing
    with Evaluator(EvalConfig(**dict(FAST, timing_rounds=5, timing_precision=0.004, cache_dir=str(tmp_path)))) as ev:
        assert ev.config.graph_rounds == 3
        for cand_rounds, asked in (([[50.0] * 3] * 15, 3), ([[50.0] * 3, [60.0] * 3] * 8, 15)):
            ref, cand = _Replays([[100.0] * 3] * 15), _Replays(cand_rounds)
            got = ev._graphs(None, ref, cand, ev._left(time.monotonic() + 60), [], {}, {})
            assert (ref.asked, cand.asked) == (asked, asked)
            assert len(got["reference_graph"].round_medians_us) == asked
    for fixed in (2, 5):  # --precision 0 asks for fixed rounds: --rounds of them
        ref, cand = _Replays([[100.0] * 3] * 15), _Replays([[50.0] * 3] * 15)
        config = EvalConfig(**dict(FAST, timing_rounds=fixed, timing_precision=0, cache_dir=str(tmp_path)))
        with Evaluator(config) as ev:
            ev._graphs(None, ref, cand, ev._left(time.monotonic() + 60), [], {}, {})
        assert (ref.asked, cand.asked) == (fixed, fixed)


def test_eager_rounds_stop_at_the_most_they_are_given_and_go_on_from_there_when_asked_again(tmp_path):
    # Where graph replay gives the speedup, a launch-bound program's latency may never come within 2%: its eager
    # rounds end at timing_rounds; if the programs then cannot be replayed, they go on where they stopped
    with Evaluator(EvalConfig(**dict(FAST, timing_rounds=5, timing_precision=0.004, cache_dir=str(tmp_path)))) as ev:
        ref, cand = _Replays([[100.0] * 3] * 15, "time"), _Replays([[50.0] * 3, [70.0] * 3] * 8, "time")
        rounds, left = {}, ev._left(time.monotonic() + 60)
        ev._timing(None, ref, cand, left, [], {}, precision=0.02, least=3, rounds=rounds, most=5)
        assert (ref.asked, cand.asked) == (5, 5)
        ev._timing(None, ref, cand, left, [], {}, rounds=rounds)  # to timing_precision, up to the limit
        assert (ref.asked, cand.asked) == (15, 15)


def test_long_calls_get_fewer_calls_per_round_from_the_first_by_the_references_trials(task, tmp_path):
    with Evaluator(EvalConfig(**dict(FAST, warmup=5, cache_dir=str(tmp_path)))) as ev:  # round_us 20 ms
        rounds = [ev._round_for(us) for us in (100.0, 2000.0, 4000.0, 10000.0)]
    assert [r["calls"] for r in rounds] == [5, 5, 5, 3]  # FAST asks for 5 calls: never more; 20 ms of 10 ms calls
    # is two: the default least is three
    assert [r["warmup"] for r in rounds] == [5, 3, 2, 1]  # a quarter of 20 ms of warm-up, at least one call
    cfg = EvalConfig(**dict(FAST, calls_per_round=8, min_calls_per_round=3, round_us=1.0, cache_dir=str(tmp_path)))
    with Evaluator(cfg) as ev:
        assert [ev._round_for(us)["calls"] for us in (1e-4, 0.2, 10.0)] == [8, 5, 3]  # ceil(1 / us), 3 to 8
        v = judge(ev, task, "correct")
    assert v.status == "ok", v.message
    # The reference's trials took over 1 µs a call, so its first round already times 3 calls, as does the next.
    assert v.reference.n == v.candidate_timing.n == 3 + 3


def test_timing_cores_come_from_the_gpus_local_list_a_pair_per_device():
    from kernelrl.evaluate.placement import pick_cores

    allowed = set(range(16))
    assert pick_cores(allowed, "8-11,14\n", 0) == [8, 9]
    assert pick_cores(allowed, "8-11,14\n", 1) == [10, 11]
    assert pick_cores(allowed, "", 1) == [2, 3]            # no list: any allowed cores
    assert pick_cores(allowed, "32-47", 0) == [0, 1]       # a list naming no allowed core is ignored
    assert pick_cores(allowed, "not a list", 0) == [0, 1]
    assert pick_cores({0, 1, 2}, "", 0) is None             # too few cores to set two aside


STATEFUL_TASK = """
import torch
import torch.nn as nn
class Model(nn.Module):  # as KernelBench's level3/33_VanillaRNN: the hidden state is replaced on every call
    def __init__(self):
        super().__init__()
        self.i2h = nn.Linear(32, 16)
        self.hidden = torch.zeros(4, 16)
    def forward(self, x, initial_hidden):
        self.hidden.copy_(initial_hidden)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.hidden * 2
def get_inputs():
    return [torch.rand(4, 16), torch.rand(4, 16)]
def get_init_inputs():
    return []
"""


def test_a_task_that_carries_state_between_calls_accepts_a_candidate_that_does_the_same(ev):
    task = Task.from_source(STATEFUL_TASK, name="stateful")
    v = ev.evaluate(task, Candidate.from_source(STATEFUL_TASK.replace("class Model(", "class ModelNew(")))
    assert v.status == "ok", v.message
    assert [f.severity for f in v.flags if f.check == "state"] == ["warn"]
    replay = STATEFUL_TASK.replace("class Model(", "class ModelNew(").replace(
        "        return self.hidden * 2", "        self.last = getattr(self, 'last', self.hidden * 2)\n"
                                         "        return self.last")
    assert ev.evaluate(task, Candidate.from_source(replay)).status in ("incorrect", "rejected")


def test_a_re_measurement_takes_a_worker_started_ahead_while_the_device_timed_on(tmp_path, task):
    started = []
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **dict(FAST, recheck_speedup=0.0))) as e:
        fresh = e._fresh_worker

        def spy(*args):
            worker, slot = fresh(*args)
            started.append((threading.current_thread().name, worker))
            return worker, slot

        e._fresh_worker = spy
        v = judge(e, task, "correct")
    assert v.status == "ok", v.message
    assert any(f.check == "recheck" and "re-measured in a fresh worker" in f.message for f in v.flags)
    assert started and started[0][0].startswith("kernelrl-recheck-worker")  # a CPU lane, not the GPU stage
    assert not any(w.alive for _, w in started)


def test_a_speedup_the_trials_read_above_the_threshold_starts_its_re_measurements_worker_before_the_timing(
        tmp_path, task):
    # A group's candidates are timed together after all their trials: a worker started at the first timing round
    # would still be starting when the re-measurement asks for it, the device held alone meanwhile.
    events = []
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **dict(FAST, recheck_speedup=0.0))) as e:
        foresee, timing = e._foresee_recheck, e._timing

        def spy_foresee(*args):
            foresee(*args)
            if e._current.fresh is not None and "fresh worker" not in events:
                events.append("fresh worker")  # submitted to a CPU lane

        def spy_timing(*args, **kw):
            events.append("timing")
            return timing(*args, **kw)

        e._foresee_recheck, e._timing = spy_foresee, spy_timing
        v = judge(e, task, "correct")
    assert v.status == "ok", v.message
    assert "fresh worker" in events and "timing" in events
    assert events.index("fresh worker") < events.index("timing")


def test_on_a_shared_device_a_killed_worker_is_reaped_after_its_gpu_stage_and_before_the_next_timing(
        tmp_path, monkeypatch, task):
    # A CUDA process takes tenths of a second to end; the GPU stage kills its candidate's worker and goes on, the
    # reaper waits for it, and the next job is timed only once it is gone. (The CPU's lock is made a shared
    # device's here, the way a CUDA device's is; a slow end is played by a reaper that sleeps first.)
    from kernelrl.evaluate import evaluator as evaluator_module
    from kernelrl.evaluate.gpulock import DeviceLock, Stage

    monkeypatch.setattr(evaluator_module, "device_lock", lambda device: DeviceLock(sharing=True))
    killed, reaped, exclusive = [], {}, []
    reap, to_exclusive = Evaluator._reap, Stage.to_exclusive

    def slow_reap(self, worker, *rest):
        killed.append(worker)
        time.sleep(1.0)
        reap(self, worker, *rest)
        reaped[id(worker)] = time.monotonic()

    def timed(self):
        to_exclusive(self)
        exclusive.append(dict(reaped))

    monkeypatch.setattr(Evaluator, "_reap", slow_reap)
    monkeypatch.setattr(Stage, "to_exclusive", timed)
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as e:
        first = e.judge(e.prepare(task, Candidate.from_file(DATA / "wrong.py")))  # as a scheduler judges
        assert first.status == "incorrect" and len(killed) == 1 and not reaped  # judged before its worker ended
        assert judge(e, task, "correct").status == "ok"
        assert exclusive and id(killed[0]) in exclusive[0]  # timed only once the first worker was reaped
        assert len(reaped) == 2, reaped  # `evaluate` returns once its own worker is reaped
    assert [(w.proc.poll() is not None, w.scratch.exists()) for w in killed] == [(True, False)] * 2


def test_a_prepared_candidates_worker_is_stopped_while_another_job_is_timed(tmp_path, monkeypatch, task):
    # A scheduler prepares candidates ahead: their workers wait, the candidates' code loaded, while another job is
    # timed. Nothing of theirs may run then (a thread left running could put work on the device): each is stopped
    # for the timing and goes on for its own GPU stage. (The CPU's lock is made a shared device's here.)
    from pathlib import Path as P

    from kernelrl.evaluate import evaluator as evaluator_module
    from kernelrl.evaluate.gpulock import DeviceLock, Stage

    monkeypatch.setattr(evaluator_module, "device_lock", lambda device: DeviceLock(sharing=True))
    seen, to_exclusive = [], Stage.to_exclusive
    waiting = {}

    def timed(self):
        to_exclusive(self)
        seen.append({k: P(f"/proc/{w.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                     for k, w in waiting.items() if w.proc.poll() is None})

    monkeypatch.setattr(Stage, "to_exclusive", timed)
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as e:
        a = e.prepare(task, Candidate.from_file(DATA / "correct.py"))
        b = e.prepare(task, Candidate.from_file(DATA / "correct.py"))
        waiting["b"] = b.cand
        assert e.judge(a).status == "ok"
        assert seen and seen[0] == {"b": "T"}, seen  # b's worker was stopped while a was timed
        waiting.clear()
        assert e.judge(b).status == "ok"  # and went on for its own stage


@pytest.mark.parametrize("gain, warned", [(1e7, True), (1.0, False)])
def test_an_output_passed_by_an_exact_result_test_that_lets_zeros_through_carries_a_warning(tmp_path, gain, warned):
    """Where the reference's fp32 output is itself far from the exact result (a chaotic reference), strict's
    exact-result test passes any output of its size: a program summing in float64 is `ok` there, and the verdict
    says the task cannot tell it from another output. Where the reference is accurate, nothing is said."""
    source = (DATA / "chaotic_sum.py").read_text().replace("GAIN = 1e7", f"GAIN = {gain!r}")
    task = Task.from_source(source, name="chaotic_sum")
    cand = Candidate.from_source(source.replace("class Model(", "class ModelNew(").replace(
        "torch.sin(x.sum(dim=1, keepdim=True) * GAIN)", "torch.sin(x.double().sum(dim=1, keepdim=True) * GAIN).float()"))
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), policy="strict", **FAST)) as e:
        v = e.evaluate(task, cand)
    assert v.status == "ok", v.message
    inaccurate = [f for f in v.flags if f.check == "reference_inaccurate"]
    assert bool(inaccurate) == warned, [f.message for f in v.flags]
    assert all(f.severity == "warn" and "from the exact result" in f.message for f in inaccurate)

