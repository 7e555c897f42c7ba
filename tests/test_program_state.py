"""One program, one verdict: tasks that carry state between calls, outputs the program keeps or returns again,
and the causes a verdict names, on the CPU."""
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.task import Candidate, Task, identity_candidate

DATA = Path(__file__).parent / "data" / "state"
EXPLOITS = Path(__file__).parent / "exploits"
FAST = dict(device="cpu", correctness_trials=3, timing_rounds=2, timing_precision=0, calls_per_round=3, warmup=1,
            timeout_s=120)


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    with Evaluator(EvalConfig(cache_dir=str(tmp_path_factory.mktemp("cache")), **FAST)) as e:
        yield e


def task(name: str) -> Task:
    return Task.from_file(DATA / f"{name}.py")


def cand(name: str, **replace) -> Candidate:
    source = (DATA / f"{name}.py").read_text()
    for old, new in replace.items():
        source = source.replace(old, new)
    return Candidate.from_source(source)


def hidden(c: str) -> Candidate:
    return cand(c, **{"self.returns_hidden = False": "self.returns_hidden = True"})


@pytest.mark.parametrize("name", ["rnn_stateful", "rnn_hidden_stateful"])
def test_a_reference_that_carries_state_is_ok_against_itself_job_after_job(ev, name):
    t = task(name)
    for _ in range(2):  # the second job finds the reference kept, put back as it was built
        v = ev.evaluate(t, identity_candidate(t))
        assert v.status == "ok", v.message
        assert [f.severity for f in v.flags if f.check == "state"] == ["warn"]


def test_a_returned_tensor_that_is_the_programs_state_is_reported_not_poisoned(ev):
    t = task("rnn_hidden_stateful")
    v = ev.evaluate(t, hidden("rnn_rewrite"))
    assert v.status == "ok", v.message
    kept = [f for f in v.flags if f.check == "own_state"]
    assert kept and "hidden" in kept[0].message and kept[0].severity == "warn"


def test_candidates_in_a_row_on_a_kept_stateful_reference_get_their_verdicts_on_a_fresh_evaluator(ev, tmp_path):
    t = task("rnn_stateful")
    row = [cand("rnn_rewrite"), cand("rnn_stateless"), identity_candidate(t)]
    kept = [ev.evaluate(t, c).status for c in row]
    fresh = []
    for i, c in enumerate(row):
        with Evaluator(EvalConfig(cache_dir=str(tmp_path / str(i)), **FAST)) as alone:
            fresh.append(alone.evaluate(t, c).status)
    assert kept == fresh == ["ok", "incorrect", "ok"]


@pytest.mark.parametrize("name", ["cached_ones", "cached_ones_closure"])
def test_a_task_whose_output_ignores_its_inputs_is_named_and_a_kept_constant_is_a_fact(ev, name):
    t = task("softmax_size1")
    v = ev.evaluate(t, cand(name))
    assert v.status == "ok", v.message
    checks = {f.check: f for f in v.flags}
    assert "does not depend on its inputs" in checks["task_property"].message
    assert checks["reused_storage"].severity == "warn"
    assert not any("NaN" in f.message for f in v.flags)
    honest = ev.evaluate(t, identity_candidate(t))
    assert honest.status == "ok" and "task_property" in {f.check for f in honest.flags}
    assert "reused_storage" not in {f.check for f in honest.flags}


def test_a_candidate_finishing_its_work_in_a_thread_is_refused_as_background_thread(ev):
    t = Task.from_file(EXPLOITS / "tasks" / "matmul.py")
    v = ev.evaluate(t, Candidate.from_file(EXPLOITS / "background_thread.py"))
    assert v.status == "rejected", (v.status, v.message)
    # Named by the CPU time its thread spends after each call returned, whichever thread wins the race to the outputs.
    assert any(f.check == "thread_work" and f.hack == "background_thread" and f.severity == "reject"
               for f in v.flags), v.flags


def test_thread_work_counts_cpu_spent_after_a_mark_and_not_an_idle_pool():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    from kernelrl.evaluate import tamper

    work = tamper.ThreadWork()
    pool = ThreadPoolExecutor(max_workers=2)
    pool.submit(time.sleep, 0).result()  # the pool's threads exist and are idle
    assert work.settle(work.cpu_ns()) < 100_000
    go = threading.Event()

    def spin():
        go.wait()
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass

    threading.Thread(target=spin, daemon=True).start()
    mark = work.cpu_ns()
    go.set()
    # 100 ms of CPU, counted after the mark until the thread is quiet. What a thread spends after its last reading
    # before it ends is not seen: a reading waits for the GIL (the switch interval, 5 ms; more on a loaded machine,
    # where 20 ms of spinning once read as 10 ms).
    assert work.settle(mark) >= 70_000_000
    pool.shutdown()


def test_rewriting_the_reference_class_in_the_candidates_process_is_refused_naming_what_changed(ev):
    t = Task.from_file(EXPLOITS / "tasks" / "linear_gelu.py")
    v = ev.evaluate(t, Candidate.from_file(EXPLOITS / "reference_rewrite.py"))
    assert v.status == "rejected"
    assert any(f.hack == "baseline_tampering" and "Model.forward was replaced" in f.message for f in v.flags), v.flags


def test_kernelbench_policy_is_allclose_with_an_absolute_atol_and_flags_what_passes_by_it_alone(tmp_path):
    t = task("tiny_outputs")
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), policy="kernelbench", **FAST)) as kb:
        zeros = kb.evaluate(t, cand("zeros"))
        honest = kb.evaluate(t, identity_candidate(t))
    assert zeros.status == "ok", zeros.message  # KernelBench's rule, as it is: |0 - 1e-3 x| <= 1e-2
    slack = [f for f in zeros.flags if f.check == "absolute_slack"]
    assert slack and slack[0].severity == "warn" and "zeros pass" in slack[0].message
    assert honest.status == "ok" and not any(f.check == "absolute_slack" for f in honest.flags)


def test_strict_refuses_zeros_on_the_same_task(ev):
    assert ev.evaluate(task("tiny_outputs"), cand("zeros")).status in ("incorrect", "rejected")


def test_strict_accepts_a_candidate_more_accurate_than_the_fp32_reference(ev):
    precision = Path(__file__).parent / "data" / "precision"
    t = Task.from_file(precision / "large_sums.py")
    v = ev.evaluate(t, Candidate.from_file(precision / "large_sums_exact.py"))
    assert v.status == "ok", v.message  # it differs from the reference by the reference's own error, 2.4e-4



def test_a_trial_that_fails_after_passing_ones_and_passes_in_a_fresh_worker_is_named_nondeterministic(ev):
    v = ev.evaluate(task("softmax_size1"), cand("third_call_wrong"))
    assert v.status == "incorrect"
    flag = next(f for f in v.flags if f.check == "nondeterministic")
    assert flag.severity == "warn" and "passed as the first call of a fresh worker" in flag.message
    assert "nondeterministic" in v.message


def test_a_re_measurement_refutes_a_speedup_only_when_lower_beyond_both_errors():
    from kernelrl.evaluate.timing import _refuted

    assert _refuted(3.0, 0.004, 1.66, 0.004)  # far lower, tight errors: refuted (and measured again)
    assert not _refuted(3.0, 0.2, 1.9, 0.2)  # lower by 1.58x, but within three combined standard errors
    assert not _refuted(3.0, 0.004, 2.2, 0.004)  # lower, but by less than 1.5x: unstable at most
    assert not _refuted(3.0, None, 4.0, None)  # higher never refutes
