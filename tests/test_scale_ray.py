"""RayScheduler on a real local Ray cluster of CPU "devices": verdicts, an evaluator killed mid-run, a candidate that
kills its worker, and kernelrl without --ray neither importing nor needing Ray.

One Ray instance, and one scheduler of two CPU evaluator actors, are shared by the module: Ray takes ~15 s to start.
"""
import json
import subprocess
import sys
import textwrap
import time
from concurrent.futures import CancelledError
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from kernelrl.cli import app
from kernelrl.evaluate import EvalConfig
from kernelrl.task import Candidate, Task

ray = pytest.importorskip("ray")
from kernelrl.scale.ray_backend import RayScheduler  # noqa: E402 - after the skip

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "tests" / "data" / "eval"
BENCH = ROOT / "tests" / "data" / "bench"


@pytest.fixture(scope="module")
def cluster():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")  # workers on 2 shared cores: no thread pools waiting on each other
        # Three logical CPUs on the 2 cores: the shared scheduler's two actors and one more for the closing test.
        ray.init(num_cpus=3, num_gpus=0, include_dashboard=False, log_to_driver=False)  # CPU "devices" anywhere
        yield
        ray.shutdown()


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    # Few rounds: these tests are about scheduling, not timing precision.
    return EvalConfig(device="cpu", correctness_trials=2, timing_rounds=2, max_timing_rounds=2, calls_per_round=5,
                      recheck_speedup=1e9, timeout_s=120, cache_dir=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def sched(cluster, config):
    """Two CPU evaluator actors, shared by the tests below (an actor takes seconds to start here)."""
    with RayScheduler(config, cpu_evaluators=2, lookahead=1) as s:
        yield s


def task() -> Task:
    return Task.from_file(EVAL / "scale_add.py")


def cand(name: str) -> Candidate:
    return Candidate.from_file(EVAL / f"{name}.py")


def test_a_small_suite_gets_one_verdict_per_job_across_two_evaluators(sched):
    jobs = {"correct": "ok", "wrong": "incorrect", "syntax_error": "compile_error"}
    suite = [(Task.from_file(BENCH / "suite" / "level1" / "row_sum.py"),
              Candidate.from_file(BENCH / "candidates" / "level1" / "row_sum.py"), "ok")]
    suite += [(task(), cand(name), status) for name, status in jobs.items()]
    before = sched.stats()
    futures = [(sched.submit(t, c), status) for t, c, status in suite]
    verdicts = [(f.result(timeout=300), status) for f, status in futures]
    stats = sched.stats()
    assert [v.status for v, _ in verdicts] == [status for _, status in verdicts]
    assert [v.candidate for v, _ in verdicts] == [c.digest for _, c, _ in suite]
    assert (stats.done - before.done, stats.queued, stats.running, stats.retried - before.retried) == \
        (len(suite), 0, 0, 0)
    assert len(stats.device_busy) == 2 and all(0 < b <= 1 for b in stats.device_busy.values())
    assert stats.verdicts_per_minute > 0


def _evaluating_actor_pids() -> list[int]:
    """Ray titles an actor's process after the method it is running."""
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any("EvaluatorActor.evaluate" in part for part in (p.info["cmdline"] or []))]


def test_an_evaluator_killed_mid_run_costs_a_retry_and_no_verdict(sched):
    n = 3
    before = sched.stats()
    # each job builds for 2 s: long enough to find an actor evaluating it (quick ones can all end between looks)
    futures = [sched.submit(task(), cand("correct_slow_build")) for _ in range(n)]
    deadline = time.monotonic() + 120
    while not (pids := _evaluating_actor_pids()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids, "no evaluator actor started evaluating"
    psutil.Process(pids[0]).kill()  # kill -9 of the actor's process, as when its host goes
    verdicts = [f.result(timeout=300) for f in futures]
    stats = sched.stats()
    assert [v.status for v in verdicts] == ["ok"] * n, [v.message for v in verdicts]
    assert stats.retried > before.retried
    assert stats.done - before.done == n  # each job counted once, the retried ones included


def test_a_candidate_that_kills_its_worker_gets_a_verdict_and_the_run_goes_on(sched):
    retried = sched.stats().retried
    crashed = sched.submit(task(), cand("segfault"))
    after = sched.submit(task(), cand("correct"))
    assert crashed.result(timeout=300).status == "runtime_error"
    assert after.result(timeout=300).status == "ok"
    assert sched.stats().retried == retried  # the worker died, not the evaluator: nothing to retry


def test_a_broken_reference_fails_its_future_without_a_retry(sched):
    retried = sched.stats().retried
    fut = sched.submit(Task.from_file(EVAL / "broken_import_ref.py"), cand("correct"))
    with pytest.raises(Exception, match="the reference does not run"):
        fut.result(timeout=300)
    assert sched.stats().retried == retried


def test_an_actor_holds_what_keeps_its_pipeline_full_and_closing_cancels_what_is_still_queued(cluster, config):
    """Once up, an actor is given as many jobs as its LocalScheduler keeps going (its CPU lanes' builds too), not
    only its device's job and lookahead: with those alone, real candidates' builds starved its GPU."""
    sched = RayScheduler(config, cpu_evaluators=1, lookahead=1)
    capacity = sched.capacity  # once the actor is up: callers size their concurrency by it (`bench --ray`)
    held = ray.get(sched._slots[0].actor.where.remote())["capacity"]
    assert capacity == held > sched.per_actor
    # calls of 20 s: nothing ends before the close, so which jobs are on the actor and which queued is known
    futures = [sched.submit(task(), cand("sleepy")) for _ in range(held + 3)]
    deadline = time.monotonic() + 60
    while sched.stats().running < held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sched.stats().running == held  # the other 3 stay queued
    sched.close()
    assert all(f.done() for f in futures)
    assert all(f.cancelled() for f in futures[held:])  # queued: cancelled
    assert all(isinstance(f.exception(), CancelledError) for f in futures[:held])  # on the actor: a CancelledError


def _one_task_suite(root: Path) -> tuple[Path, Path]:
    """A suite of one task (row_sum) and its candidate, under `root`."""
    (root / "suite" / "level1").mkdir(parents=True)
    (root / "suite" / "level1" / "row_sum.py").write_text((BENCH / "suite" / "level1" / "row_sum.py").read_text())
    (root / "cands").mkdir()
    (root / "cands" / "row_sum.py").write_text((BENCH / "candidates" / "level1" / "row_sum.py").read_text())
    return root / "suite", root / "cands"


def test_bench_with_ray_judges_on_the_cluster(cluster, tmp_path):
    suite, cands = _one_task_suite(tmp_path)
    result = CliRunner().invoke(app, ["bench", str(suite), "--candidates", str(cands), "--ray", "auto", "--json",
                                      "--trials", "1", "--rounds", "1", "--calls", "3",
                                      "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["total"], summary["correct"]) == (1, 1)
    assert summary["device_names"] == ["Ray cluster auto"]


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_the_cli_and_a_local_bench_never_import_ray(tmp_path):
    suite, cands = _one_task_suite(tmp_path)
    r = _run("""
        import sys
        from kernelrl.cli import app
        try:
            app(sys.argv[1:])
        except SystemExit as e:
            assert not e.code, f"bench exited {e.code}"
        assert "ray" not in sys.modules, "ray was imported"
        print("no ray")
        """, "bench", str(suite), "--candidates", str(cands), "--device", "cpu",
             "--trials", "1", "--rounds", "1", "--calls", "3", "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "no ray" in r.stdout


def test_without_ray_installed_the_error_is_one_line_naming_the_extra(tmp_path):
    r = _run("""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        from kernelrl.cli import app
        app(sys.argv[1:])
        """, "bench", str(BENCH / "suite"), "--ray", "auto", "--device", "cpu",
             "--cache-dir", str(tmp_path / "cache"))
    assert r.returncode == 2
    assert 'pip install "kernelrl[ray]"' in r.stderr
    assert "Traceback" not in r.stderr


def test_an_actors_gpu_is_named_by_its_host_ordinal_for_core_picking(monkeypatch):
    import torch

    from kernelrl.evaluate.placement import host_index

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")  # as Ray sets it for an actor's GPUs
    assert [host_index(torch.device("cuda", i)) for i in (0, 1)] == [2, 5]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert host_index(torch.device("cuda", 1)) == 1


def test_builds_keep_off_the_timing_cores_of_gpus_hidden_from_the_actor():
    from kernelrl.evaluate.placement import pick_cores, timing_cores

    allowed = set(range(16))
    lists = ["0-7\n", "0-7\n", "8-15\n"]  # two GPUs on the first NUMA node, one on the second
    assert timing_cores(allowed, lists) == {0, 1, 2, 3, 12, 13}  # pick_cores offsets by the host ordinal
    # the actor of GPU 1 (its only visible device, cuda:0) times where timing_cores says GPU 1 does
    assert set(pick_cores(allowed, lists[1], 1)) <= timing_cores(allowed, lists)


@pytest.mark.gpu
def test_a_gpu_actor_judges_cuda_candidates_and_goes_on_after_an_illegal_address(tmp_path):
    r = _run("""
        import json, sys
        from kernelrl.evaluate import EvalConfig
        from kernelrl.scale.ray_backend import RayScheduler
        from kernelrl.task import Candidate, Task

        data = "tests/data/eval_gpu/"
        with RayScheduler(EvalConfig(cache_dir=sys.argv[1]), init_kwargs={"include_dashboard": False}) as s:
            task = Task.from_file(data + "softmax_rows.py")
            names = ("softmax_illegal", "softmax_cuda", "softmax_triton")
            futures = [s.submit(task, Candidate.from_file(data + n + ".py")) for n in names]
            print(json.dumps({"statuses": [f.result(timeout=900).status for f in futures],
                              "kind": s.device_kind, "busy": list(s.stats().device_busy)}))
        """, str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["statuses"] == ["runtime_error", "ok", "ok"]
    assert out["kind"] == "cuda" and all("/cuda:" in name for name in out["busy"])
