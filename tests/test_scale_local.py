"""The pipelined evaluation: prepare/judge against evaluate, and LocalScheduler over several CPU "devices"."""
import os
import threading
from concurrent.futures import CancelledError, wait
from pathlib import Path

import pytest

import torch

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.evaluator import HARNESS
from kernelrl.evaluate.placement import build_cpus, worker_cpus
from kernelrl.sandbox.process import Worker
from kernelrl.scale import SchedulerStats, make_scheduler
from kernelrl.scale.local import LocalScheduler, cpu_lanes
from kernelrl.task import Candidate, Task

DATA = Path(__file__).parent / "data" / "eval"
FAST = dict(device="cpu", correctness_trials=2, timing_rounds=2, timing_precision=0, calls_per_round=3, warmup=1,
            timeout_s=120)
EXPECTED = {"correct": "ok", "wrong": "incorrect", "syntax_error": "compile_error", "segfault": "runtime_error"}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return EvalConfig(cache_dir=str(tmp_path_factory.mktemp("cache")), **FAST)


@pytest.fixture(scope="module")
def task():
    return Task.from_file(DATA / "scale_add.py")


def cand(name):
    return Candidate.from_file(DATA / f"{name}.py")


def test_prepared_ahead_candidates_get_the_verdicts_evaluate_gives(config, task):
    with Evaluator(config) as ev:
        serial = {name: ev.evaluate(task, cand(name)) for name in EXPECTED}
        prepared = {}
        threads = [threading.Thread(target=lambda n=name: prepared.__setitem__(n, ev.prepare(task, cand(n))))
                   for name in EXPECTED]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        piped = {name: ev.judge(prepared[name]) for name in EXPECTED}
    for name, status in EXPECTED.items():
        assert serial[name].status == piped[name].status == status, (name, piped[name].message)
        assert serial[name].message.split(":")[0] == piped[name].message.split(":")[0]  # same check failed
        assert "waited" in piped[name].phases and "reference" in piped[name].phases
    assert piped["correct"].speedup > 0 and piped["correct"].reference.n == serial["correct"].reference.n
    # the build is what is left of it once the reference is there: a candidate that loaded meanwhile has ~0 left
    assert piped["correct"].phases["start_and_build"] >= 0 and "timing" in piped["correct"].phases
    # The wait for the GPU stage is in the phases, not in the evaluation's own seconds.
    for v in piped.values():
        assert v.seconds == pytest.approx(sum(v.phases.values()) - v.phases["waited"], abs=0.05)
    assert piped["segfault"].phases["waited"] > 0


def test_a_released_candidate_frees_its_worker_and_its_reference(config, task):
    with Evaluator(config, max_reference_workers=1) as ev:
        p = ev.prepare(task, cand("correct"))
        assert p.cand.alive and p.state["users"] == 1
        ev.release(p)
        ev.release(p)  # twice is harmless
        assert not p.cand.alive and p.state["users"] == 0
        assert ev.evaluate(task, cand("correct")).status == "ok"


def test_two_cpu_devices_judge_a_suite_each_future_resolving_once(config, task):
    names = ["correct", "segfault", "correct", "wrong", "syntax_error", "correct"]
    resolved = []
    with LocalScheduler(config, devices=("cpu", "cpu"), lookahead=2) as s:
        futures = [s.submit(task, cand(n), policy="kernelbench" if i == 0 else None) for i, n in enumerate(names)]
        with pytest.raises(ValueError, match="policy"):
            s.submit(task, cand("correct"), policy="lenient")
        for i, f in enumerate(futures):
            f.add_done_callback(lambda f, i=i: resolved.append(i))
        verdicts = [f.result(timeout=300) for f in futures]
        stats = s.stats()
    assert [v.status for v in verdicts] == [EXPECTED[n] for n in names]
    assert sorted(resolved) == list(range(len(names)))  # once each
    assert "SIGSEGV" in verdicts[1].message and verdicts[2].status == "ok"  # the job after a crash still runs
    assert verdicts[0].policy == "kernelbench" and verdicts[2].policy == "strict"
    assert isinstance(stats, SchedulerStats) and stats.done == len(names) and stats.queued == stats.running == 0
    assert set(stats.device_busy) == {"cpu#0", "cpu#1"} and s.capacity == 2 * s._max_ahead >= 2 * (2 + 1)
    assert all(0 < b <= 1 for b in stats.device_busy.values())
    assert stats.verdicts_per_minute > 0 and stats.elapsed_s > 0
    assert SchedulerStats(**stats.to_dict()) == stats


def test_close_cancels_the_jobs_not_yet_judged(config, task):
    s = make_scheduler(config, ("cpu",), lookahead=1)
    assert isinstance(s, LocalScheduler)
    futures = [s.submit(task, cand("correct")) for _ in range(4)]
    futures[0].result(timeout=300)
    s.close()
    assert not wait(futures, timeout=5).not_done  # cancelled Futures are notified: waiters wake at once
    assert futures[0].result().status == "ok"
    cancelled = [f for f in futures if f.cancelled()]
    assert len(cancelled) >= 2  # at most one more was on the device when close() came
    with pytest.raises(CancelledError):
        cancelled[0].result()
    with pytest.raises(RuntimeError, match="closed"):
        s.submit(task, cand("correct"))


def test_a_job_cancelled_twice_wakes_its_waiters_once_and_logs_nothing(caplog):
    from concurrent.futures import Future
    from kernelrl.scale.local import _cancel, _start

    f = Future()
    _cancel(f)  # by close()
    _cancel(f)  # by the CPU lane that was preparing it when close() came
    assert f.cancelled() and not _start(f)
    assert not [r for r in caplog.records if r.name == "concurrent.futures"]


def test_a_reference_that_does_not_run_fails_its_future_and_the_next_job_runs(config, task):
    bad = Task.from_file(DATA / "broken_import_ref.py")
    with LocalScheduler(config, devices=("cpu",), lookahead=2) as s:
        f_bad, f_ok = s.submit(bad, cand("correct")), s.submit(task, cand("correct"))
        with pytest.raises(Exception, match="reference"):
            f_bad.result(timeout=300)
        assert f_ok.result(timeout=300).status == "ok"


@pytest.mark.parametrize("first_call_lanes", [0, 1])
def test_first_calls_are_made_on_first_call_lanes_where_asked_with_the_same_verdicts(config, task, monkeypatch,
                                                                                     first_call_lanes):
    """A first call is made beside the GPU stage on CUDA only: here the CPU's lock shares the device as a GPU's does,
    and every call fits beside it."""
    from kernelrl.evaluate import evaluator
    from kernelrl.evaluate.gpulock import DeviceLock

    monkeypatch.setattr(evaluator, "device_lock", lambda device: DeviceLock(sharing=True))
    monkeypatch.setattr(Evaluator, "_calls_beside", lambda self, state: True)
    made_on, first_call = [], Evaluator._first_call

    def recorded(self, p, left):
        made_on.append(threading.current_thread().name)
        return first_call(self, p, left)

    monkeypatch.setattr(Evaluator, "_first_call", recorded)
    with LocalScheduler(config, devices=("cpu",), lookahead=2, cpu_workers=2,
                        first_call_lanes=first_call_lanes) as s:
        futures = [s.submit(task, cand(n)) for n in ("correct", "wrong", "syntax_error", "correct")]
        verdicts = [f.result(timeout=300) for f in futures]
    assert [v.status for v in verdicts] == ["ok", "incorrect", "compile_error", "ok"], [v.message for v in verdicts]
    assert len(made_on) == 3  # not where the build failed
    assert all(name.startswith("first-call-" if first_call_lanes else "prepare-") for name in made_on), made_on
    assert all(v.phases["first_call"] > 0 for v in verdicts if v.status != "compile_error")


def test_a_job_cancelled_while_it_waits_for_its_first_call_is_released_uncalled(config, task, monkeypatch):
    from kernelrl.evaluate import evaluator
    from kernelrl.evaluate.gpulock import DeviceLock

    monkeypatch.setattr(evaluator, "device_lock", lambda device: DeviceLock(sharing=True))
    monkeypatch.setattr(Evaluator, "_calls_beside", lambda self, state: True)
    gate, called, released = threading.Event(), [], []
    first_call, release = Evaluator._first_call, Evaluator.release

    def held(self, p, left):  # the first call lane's one call waits until the test lets it go
        called.append(p)
        gate.wait(60)
        return first_call(self, p, left)

    monkeypatch.setattr(Evaluator, "_first_call", held)
    monkeypatch.setattr(Evaluator, "release", lambda self, p: released.append(p) or release(self, p))
    with LocalScheduler(config, devices=("cpu",), lookahead=2, cpu_workers=2, first_call_lanes=1) as s:
        first, second = s.submit(task, cand("correct")), s.submit(task, cand("correct"))
        for _ in range(600):  # both built: one in its first call, the other waiting for the lane
            if len(called) == 1 and len(s._calls) == 1:
                break
            threading.Event().wait(0.1)
        assert len(called) == 1 and len(s._calls) == 1
        waiting = s._calls[0][1]
        (second if waiting.future is second else first).cancel()
        gate.set()
        done = first if waiting.future is second else second
        assert done.result(timeout=300).status == "ok"
        for _ in range(100):
            if waiting.prepared in released:
                break
            threading.Event().wait(0.1)
    assert len(called) == 1 and waiting.prepared in released  # released, never called
    assert waiting.future.cancelled()


def test_the_next_tasks_reference_starts_ahead_while_this_tasks_job_is_prepared(config, task, monkeypatch):
    other = Task.from_source(task.source + "\n# another task, another digest\n", name="scale_add_again")
    started_on, start = {}, Evaluator._start_reference

    def recorded(self, t):
        started_on.setdefault(t.name, []).append(threading.current_thread().name)
        return start(self, t)

    monkeypatch.setattr(Evaluator, "_start_reference", recorded)
    with LocalScheduler(config, devices=("cpu",), lookahead=2, cpu_workers=1, references_ahead=True) as s:
        with s._cond:  # all three queued before the lane takes the first (as a bench run's queue is)
            futures = [s.submit(task, cand("correct")), s.submit(other, cand("wrong")),
                       s.submit(other, cand("correct"))]
        assert [f.result(timeout=300).status for f in futures] == ["ok", "incorrect", "ok"]
    assert started_on[other.name] == ["reference-ahead"], started_on  # once, ahead of its jobs
    assert started_on[task.name] == [name for name in started_on[task.name] if name.startswith("prepare-")]


def test_bad_scheduler_arguments_are_refused(config):
    with pytest.raises(ValueError, match="lookahead"):
        LocalScheduler(config, devices=("cpu",), lookahead=0)
    with pytest.raises(ValueError, match="no devices"):
        LocalScheduler(config, devices=())
    with pytest.raises(ValueError, match="first_call_lanes"):
        LocalScheduler(config, devices=("cpu",), first_call_lanes=-1)


def test_the_default_lanes_follow_the_cores_this_process_may_use_not_the_hosts(monkeypatch):
    # One bench pinned to a GPU's half of a two-GPU host (taskset, a cpuset) prepares on its own cores only.
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16, 20)), raising=False)
    assert cpu_lanes(lookahead=2, n_dev=1) == 3
    assert cpu_lanes(lookahead=4, n_dev=1) == 4  # never fewer than the jobs waiting ahead of the device
    # a one-GPU machine's 16 cores: 12 lanes, which keep a level-2 task's 2 s GPU stage fed (8 did not)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert cpu_lanes(lookahead=3, n_dev=1) == 12 and cpu_lanes(lookahead=3, n_dev=2) == 12
    assert cpu_lanes(lookahead=3, n_dev=1, cores=64) == 12  # at most 12 a device


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2, reason="needs two cores")
def test_a_worker_starts_on_the_cores_it_is_given(tmp_path):
    # Builds beside a GPU stage keep off its timing cores this way (CPU devices set none aside).
    assert build_cpus(torch.device("cpu")) is None
    core = min(os.sched_getaffinity(0))
    with Worker(HARNESS, scratch_root=tmp_path, init={"role": "candidate", "device": "cpu"}, affinity=[core]) as w:
        assert w.request({"op": "ready"}, 120)[0]["type"] == "ready"
        assert os.sched_getaffinity(w.proc.pid) == {core}


@pytest.mark.gpu
def test_gpu_workers_build_off_every_gpus_timing_cores():
    timing = set().union(*(worker_cpus(torch.device("cuda", i)) or () for i in range(torch.cuda.device_count())))
    building = build_cpus(torch.device("cuda", 0))
    if not timing:
        pytest.skip("this machine has too few cores (or no affinity) to set any aside")
    assert building and timing.isdisjoint(building)


@pytest.mark.gpu
@pytest.mark.parametrize("first_call_lanes", [0, 2])
def test_a_gpu_judges_prepared_cuda_and_triton_candidates_by_device_time(tmp_path, first_call_lanes):
    gpu = Path(__file__).parent / "data" / "eval_gpu"
    task = Task.from_file(gpu / "softmax_rows.py")
    with LocalScheduler(EvalConfig(device="cuda", cache_dir=str(tmp_path)), devices=("cuda",), lookahead=2,
                        first_call_lanes=first_call_lanes) as s:
        futures = [s.submit(task, Candidate.from_file(gpu / f"{n}.py"))
                   for n in ("softmax_cuda", "softmax_triton", "softmax_wrong", "softmax_triton")]
        verdicts = [f.result(timeout=600) for f in futures]
        busy = s.stats().device_busy["cuda"]
    assert [v.status for v in verdicts] == ["ok", "ok", "incorrect", "ok"], [v.message for v in verdicts]
    assert all(v.speedup_method == "cuda_graph" for v in verdicts if v.ok)
    assert verdicts[1].speedup == pytest.approx(verdicts[3].speedup, rel=0.03)  # as repeatable as serial
    assert 0 < busy <= 1
