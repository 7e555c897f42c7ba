"""Candidates of one task judged together (`Evaluator.judge_group`, `LocalScheduler(group=N)`, `bench --group`):
the verdicts they get alone, the reference timed once a round beside every member, each member's worker stopped
while another is timed."""
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate import evaluator as evaluator_module
from kernelrl.evaluate.gpulock import DeviceLock
from kernelrl.scale.local import LocalScheduler
from kernelrl.task import Candidate, Task

DATA = Path(__file__).parent / "data" / "eval"
FAST = dict(device="cpu", correctness_trials=3, timing_rounds=3, timing_precision=0, calls_per_round=5, warmup=1,
            timeout_s=120)
MEMBERS = ["correct", "wrong", "late_replay", "correct"]
STATUSES = ["ok", "incorrect", "rejected", "ok"]


@pytest.fixture(scope="module")
def task():
    return Task.from_file(DATA / "scale_add.py")


def candidates(names):
    return [Candidate.from_file(DATA / f"{n}.py") for n in names]


def test_members_get_the_verdicts_they_get_alone_and_share_the_references_rounds(tmp_path, task, monkeypatch):
    asked = []
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as ev:
        alone = [ev.evaluate(task, c) for c in candidates(MEMBERS)]
        ps = [ev.prepare(task, c) for c in candidates(MEMBERS)]
        ref = ps[0].ref
        request = type(ref).request

        def spy(worker, op, *args, **kw):
            if worker is ref and op.get("op") == "time":
                asked.append(op["seed"])
            return request(worker, op, *args, **kw)

        monkeypatch.setattr(type(ref), "request", spy)
        together = ev.judge_group(ps)
    assert [v.status for v in alone] == STATUSES, [v.message for v in alone]
    assert [v.status for v in together] == STATUSES, [v.message for v in together]
    assert "timed call" in together[2].message  # refused by its timed outputs, in the shared rounds
    # the reference was timed once a round for the members that reached timing, 3 rounds: not once per member
    assert len(asked) == 3 and len(set(asked)) == 1  # one input seed: every member's calls draw the same inputs
    for v in (together[0], together[3]):
        assert v.reference.n == v.candidate_timing.n == 15 and v.speedup > 0
        assert v.phases["timing"] > 0 and v.phases["alone"] >= 0
    assert together[0].reference.round_medians_us == together[3].reference.round_medians_us  # the same rounds


def test_a_members_worker_is_stopped_while_another_member_or_the_reference_is_timed(tmp_path, task, monkeypatch):
    # The members' workers wait, their code loaded, while the others are timed: nothing of theirs may run then (a
    # thread left running could slow the others' timed calls). (The CPU's lock is made a shared device's here.)
    monkeypatch.setattr(evaluator_module, "device_lock", lambda device: DeviceLock(sharing=True))
    states = []
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as ev:
        ps = [ev.prepare(task, c) for c in candidates(["correct", "correct", "correct"])]
        ask = ev._ask

        def spy(worker, op, timeout, what, build=False):
            if op.get("op") == "time":
                states.append({i: Path(f"/proc/{p.cand.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                               for i, p in enumerate(ps) if p.cand is not worker and p.cand.proc.poll() is None})
            return ask(worker, op, timeout, what, build)

        monkeypatch.setattr(ev, "_ask", spy)
        verdicts = ev.judge_group(ps)
    assert [v.status for v in verdicts] == ["ok"] * 3, [v.message for v in verdicts]
    assert len(states) == 9 and all(set(s.values()) == {"T"} and len(s) == 2 for s in states), states


def test_a_reference_that_carries_state_judges_its_group_one_by_one(tmp_path):
    stateful = Task.from_file(Path(__file__).parent / "data" / "state" / "rnn_stateful.py")
    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as ev:
        same = Candidate.from_source(stateful.source + "\n\nclass ModelNew(Model):\n    pass\n")
        ps = [ev.prepare(stateful, same) for _ in range(2)]
        assert ps[0].state.get("stateful") and not ev._groupable(ps)
        assert [v.status for v in ev.judge_group(ps)] == ["ok", "ok"]


def test_a_scheduler_judges_waiting_jobs_of_one_task_together(tmp_path, task, monkeypatch):
    sizes = []
    group = Evaluator.judge_group

    def spy(self, ps):
        sizes.append(len(ps))
        return group(self, ps)

    monkeypatch.setattr(Evaluator, "judge_group", spy)
    slow = Candidate.from_source((DATA / "correct.py").read_text().replace(
        "    def forward(self, x):\n", "    def forward(self, x):\n        __import__('time').sleep(0.15)\n"))
    with LocalScheduler(EvalConfig(cache_dir=str(tmp_path), **FAST), ("cpu",), group=4, cpu_workers=2) as s:
        first = s.submit(task, slow)  # judged alone, for seconds, while the rest are prepared and wait
        rest = [s.submit(task, c) for c in candidates(MEMBERS)]
        assert first.result().status == "ok"
        assert [f.result().status for f in rest] == STATUSES
    assert max(sizes, default=1) >= 2, sizes
    with pytest.raises(ValueError, match="group must be at least 1"):
        LocalScheduler(EvalConfig(**FAST), ("cpu",), group=0)


def test_while_a_group_is_judged_the_lanes_go_on_preparing_as_many_as_they_would_beside_one_job(tmp_path, task,
                                                                                                 monkeypatch):
    """A group's members all count as ahead of the device while they are judged: the room for more must count them
    too, or the lanes stop while a group is judged and the next group is not prepared when it ends."""
    beside = []
    group = Evaluator.judge_group

    def spy(self, ps):
        if len(ps) == 4 and not beside:
            dev = s._devices[0]
            end = time.monotonic() + 30
            while dev.ahead - len(ps) < 4 and time.monotonic() < end:  # the lookahead's 4 prepared beside the group
                time.sleep(0.05)
            beside.append(dev.ahead - len(ps))
        return group(self, ps)

    monkeypatch.setattr(Evaluator, "judge_group", spy)
    slow = Candidate.from_source((DATA / "correct.py").read_text().replace(
        "    def forward(self, x):\n", "    def forward(self, x):\n        __import__('time').sleep(0.15)\n"))
    with LocalScheduler(EvalConfig(cache_dir=str(tmp_path), **FAST), ("cpu",), group=4, cpu_workers=2) as s:
        first = s.submit(task, slow)  # judged alone while the next four are prepared
        rest = [s.submit(task, c) for c in candidates(["correct"] * 12)]
        assert first.result().status == "ok" and all(f.result().status == "ok" for f in rest)
    assert beside and beside[0] >= 4, beside  # before, the room counted one job judged: 3 at most


@pytest.mark.parametrize("command", ["bench", "serve"])
def test_bench_and_serve_refuse_a_group_below_one_and_a_group_on_ray(tmp_path, command):
    from typer.testing import CliRunner

    from kernelrl.cli import app

    where = [str(DATA)] if command == "bench" else ["--db", str(tmp_path / "jobs.db")]
    for args in (["--group", "0"], ["--group", "2", "--ray", "auto"]):
        r = CliRunner().invoke(app, [command, *where, *args])
        assert r.exit_code == 2 and "--group must be at least 1" in r.output, r.output


@pytest.mark.gpu
def test_on_the_gpu_members_share_graph_replay_rounds_and_one_that_cannot_be_captured_is_timed_by_latency(tmp_path):
    gpu = Path(__file__).parent / "data" / "eval_gpu"
    softmax = Task.from_file(gpu / "softmax_rows.py")
    names = ["softmax_triton", "softmax_wrong", "softmax_synchronizes", "softmax_cuda", "softmax_side_stream"]
    cfg = EvalConfig(device="cuda", timing_rounds=3, calls_per_round=10, timeout_s=300, cache_dir=str(tmp_path))
    with Evaluator(cfg) as ev:
        alone = [ev.evaluate(softmax, Candidate.from_file(gpu / f"{n}.py")) for n in names]
        together = ev.judge_group([ev.prepare(softmax, Candidate.from_file(gpu / f"{n}.py")) for n in names])
    assert [v.status for v in together] == [v.status for v in alone], [v.message for v in together]
    triton, _, synced, cuda, _ = together
    assert triton.speedup_method == cuda.speedup_method == "cuda_graph"
    # the same reference replays serve both: their rounds are the reference's in the rounds both took
    shared = min(len(triton.reference_graph.round_medians_us), len(cuda.reference_graph.round_medians_us))
    assert shared >= 3 and (triton.reference_graph.round_medians_us[:shared]
                            == cuda.reference_graph.round_medians_us[:shared])
    assert synced.speedup_method == "cuda_events" and any(f.check == "cuda_graph" for f in synced.flags)
    for a, t in zip(alone, together):
        if a.status == "ok":  # the same program measured alone and in a group: within a few percent
            assert t.speedup == pytest.approx(a.speedup, rel=0.1), (a.speedup, t.speedup)


def test_a_service_started_with_a_group_judges_on_a_scheduler_that_groups(tmp_path):
    from kernelrl.serve.cli import _service
    from kernelrl.serve.jobs import JobStore

    service = _service(JobStore(tmp_path / "jobs.db"), EvalConfig(cache_dir=str(tmp_path), **FAST), ("cpu",), {}, 8,
                       group=4)
    try:
        assert service.dispatcher.scheduler.group == 4
    finally:
        service.close()


def test_a_reference_that_fails_in_the_shared_rounds_fails_every_member_left_and_the_next_job_runs(tmp_path, task,
                                                                                                  monkeypatch):
    from kernelrl.evaluate import EvaluationError

    with Evaluator(EvalConfig(cache_dir=str(tmp_path), **FAST)) as ev:
        ps = [ev.prepare(task, c) for c in candidates(["correct", "wrong", "correct"])]
        rounds = ev._group_reference

        def failing(*args, **kw):
            if failing.calls == 1:
                raise EvaluationError("scale_add: the reference failed while being timed")
            failing.calls += 1
            return rounds(*args, **kw)

        failing.calls = 0
        monkeypatch.setattr(ev, "_group_reference", failing)
        got = ev.judge_group(ps)
        assert got[1].status == "incorrect"  # decided in its trials, before the rounds
        assert all(isinstance(g, EvaluationError) for g in (got[0], got[2]))
        assert all(p.finished and p.released and not p.cand.alive for p in ps)  # no worker left behind
        monkeypatch.undo()
        assert ev.evaluate(task, candidates(["correct"])[0]).status == "ok"
