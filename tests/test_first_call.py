"""A candidate's first call made while it is prepared (`Evaluator._first_call`) and trials that ran out of memory
beside other work judged again alone, exercised on the CPU: the evaluator is let share its device as it shares a
GPU (`gpulock`), with room on it for every fixture's trials."""
import threading
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.gpulock import Beside, DeviceLock
from kernelrl.evaluate.job import Aborted
from kernelrl.task import Candidate, Task, identity_candidate

DATA = Path(__file__).parent / "data"
FAST = dict(device="cpu", correctness_trials=3, timing_rounds=2, timing_precision=0, calls_per_round=5, warmup=1)


def _shared(e: Evaluator) -> Evaluator:
    e._gpu = DeviceLock(sharing=True)  # as on a GPU: untimed work shares the device
    e._stage = e._gpu.stage()
    e._device_bytes = 1 << 40
    return e


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    with Evaluator(EvalConfig(cache_dir=str(tmp_path_factory.mktemp("cache")), timeout_s=120, **FAST)) as e:
        yield _shared(e)


@pytest.fixture(scope="module")
def task():
    return Task.from_file(DATA / "eval" / "scale_add.py")


def test_a_candidates_first_call_is_made_while_it_is_prepared_and_its_trials_judge_it_as_before(ev, task):
    v = ev.evaluate(task, Candidate.from_file(DATA / "eval" / "correct.py"))
    assert v.status == "ok", v.message
    assert "first_call" in v.phases and v.error.trials == 3 + 1
    assert "compiling" not in v.phases  # it compiles nothing: the device stays held for the whole call
    assert "first_call_wait" not in v.phases  # nothing else held the device


def test_the_time_a_first_call_waits_while_the_device_is_timed_alone_is_its_own_part_of_first_call(ev, task):
    """A first call waits while a GPU stage holds the device alone (a group's shared rounds hold it for seconds):
    that wait holds its CPU lane, and the phases say how long (`first_call_wait`, part of `first_call`)."""
    correct = Candidate.from_file(DATA / "eval" / "correct.py")
    assert ev.evaluate(task, correct).status == "ok"  # its reference kept: the next one starts nothing
    held = threading.Event()

    def time_alone():
        with ev._gpu.exclusive():
            held.set()
            time.sleep(0.5)

    timing = threading.Thread(target=time_alone)
    timing.start()
    held.wait()
    p = ev.prepare(task, correct)
    timing.join()
    try:
        phases = dict(p.phases.seen)
    finally:
        ev.release(p)
    assert 0.3 <= phases["first_call_wait"] <= phases["first_call"], phases


def test_a_first_call_gives_the_device_back_while_torch_compile_compiles(tmp_path, task, monkeypatch):
    """The worker says when a compilation starts (`compilegate`): the evaluator lets the device go, so that another
    job could be timed meanwhile, and holds it again before the compiled code runs."""
    freed, give_back = [], Beside.give_back

    def give_back_and_time(hold):
        give_back(hold)
        with hold._lock.exclusive():  # the device is free: timing could start here
            freed.append(hold)

    monkeypatch.setattr(Beside, "give_back", give_back_and_time)
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), timeout_s=240, **FAST)) as e:
        v = _shared(e).evaluate(task, Candidate.from_file(DATA / "eval" / "compiled.py"))
        mine = [h for h in freed if h._lock is e._gpu]  # holds of this evaluator's device only
    assert v.status == "ok", v.message
    assert 0 < v.phases["compiling"] <= v.phases["first_call"], v.phases
    # the probe's hold and the first call's: given back once each at their end, and the first call's again while
    # it compiled
    assert len(mine) >= 3 and len(set(map(id, mine))) == 2


def test_a_first_call_is_made_early_where_the_call_fits_beside_the_gpu_stage_though_its_trials_do_not(tmp_path, task):
    """A gigabyte task's trials (both programs, kept copies, the evaluator's copies) are several times one call's
    memory: the first call is judged by its own (`_calls_beside`), so that a torch.compile candidate of such a task
    compiles beside the GPU stage instead of in it."""
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), timeout_s=120, **FAST)) as e:
        _shared(e)
        state = e.hold_reference(task)  # its sizes, from the probe
        e.let_go(state)
        e._device_bytes = 4 * e._call_bytes(state)  # one call is a quarter of the device; the trials far more
        assert not e._shares(state) and e._trial_bytes(state) > e._device_bytes // 8
        v = e.evaluate(task, Candidate.from_file(DATA / "eval" / "correct.py"))
        assert v.status == "ok", v.message
        assert "first_call" in v.phases
        e._device_bytes = 4 * e._call_bytes(state) - 1  # a call over a quarter of the device: made in the GPU stage
        v = e.evaluate(task, Candidate.from_file(DATA / "eval" / "correct.py"))
        assert v.status == "ok", v.message
        assert "first_call" not in v.phases


def test_a_first_call_that_fails_decides_nothing_the_gpu_stage_judges_a_fresh_worker(ev, task):
    v = ev.evaluate(task, Candidate.from_file(DATA / "eval" / "raises.py"))
    assert v.status == "runtime_error"
    assert "trial 1" in v.message and "first call" not in v.message  # the verdict came from the GPU stage


def test_a_candidate_that_hangs_in_its_first_call_times_out_in_the_gpu_stage(tmp_path, task, monkeypatch):
    monkeypatch.setattr(Evaluator, "FIRST_CALL_S", 2.0)
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), timeout_s=12, **FAST)) as e:
        v = _shared(e).evaluate(task, Candidate.from_file(DATA / "eval" / "hang.py"))
    assert v.status == "timeout"
    assert v.phases["first_call"] >= 2.0


def test_no_first_call_ahead_of_a_reference_that_carries_state(ev):
    t = Task.from_file(DATA / "state" / "rnn_stateful.py")
    v = ev.evaluate(t, identity_candidate(t))
    assert v.status == "ok", v.message
    assert "first_call" not in v.phases  # the candidate would be a call ahead of the reference's state


def test_trials_that_run_out_of_memory_while_shared_run_again_alone_in_a_fresh_worker(ev, task, monkeypatch):
    check, seen = ev._check, []

    def short_of_memory_once(*args):
        seen.append((ev._stage.shared, args[2]))  # (held shared, the candidate's worker)
        if len(seen) == 1:
            args[4].append("a flag of the failed trials, which must not outlive them")
            raise Aborted({"status": "runtime_error", "message": "trial 1: CUDA out of memory. Tried to allocate"})
        return check(*args)

    monkeypatch.setattr(ev, "_check", short_of_memory_once)
    v = ev.evaluate(task, Candidate.from_file(DATA / "eval" / "correct.py"))
    assert v.status == "ok", v.message
    assert [s for s, _ in seen] == [True, False]  # shared, then with the device alone
    assert seen[0][1] is not seen[1][1]  # in a fresh candidate worker
    assert not any(isinstance(f, str) for f in v.flags)


def test_other_failures_while_shared_are_the_programs_verdict(ev, task, monkeypatch):
    calls = []

    def fails(*args):
        calls.append(1)
        raise Aborted({"status": "runtime_error", "message": "trial 1: ValueError: shape mismatch"})

    monkeypatch.setattr(ev, "_check", fails)
    v = ev.evaluate(task, Candidate.from_file(DATA / "eval" / "correct.py"))
    assert v.status == "runtime_error" and len(calls) == 1
