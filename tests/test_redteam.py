"""`kernelrl redteam`: the known hacks, written for each task and judged by the real evaluator, are refused on a normal
task; the audit flags a degenerate task and one whose outputs are under KernelBench's absolute atol; a hole is
reported (exit status 1, the JSON's shape, a regression case); the LLM hacker, played by a scripted
OpenAI-compatible server, has one exploit refused and one hole reported; --resume does only what is left."""
from __future__ import annotations

import json
import os
import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelrl.bench.suite import SuiteTask
from kernelrl.cli import app
from kernelrl.evaluate import EvalConfig, check_device
from kernelrl.evaluate.gpulock import DeviceLock, device_lock
from kernelrl.redteam.audit import VERSION as AUDIT_VERSION
from kernelrl.redteam.audit import audit_task
from kernelrl.redteam.cases import load_cases
from kernelrl.redteam.journal import JOURNAL, Journal
from kernelrl.redteam.probe import ProbeWorker
from kernelrl.redteam.report import flags_task, hole_kinds, markdown, summarise, write
from kernelrl.redteam.run import RedTeam, RunConfig
from kernelrl.redteam.templates import TEMPLATES
from kernelrl.task import Task
from openai_stub_server import StubOpenAI

DATA = Path(__file__).parent / "data" / "redteam"
EXPLOITS = Path(__file__).parent / "exploits"
CPU_TEMPLATES = [t.name for t in TEMPLATES if not t.cuda]
FAST = ["--device", "cpu", "--trials", "5", "--rounds", "1", "--calls", "3"]


@pytest.fixture(scope="module", autouse=True)
def quiet_machine(tmp_path_factory):
    """One thread per worker and a cache of the module's own (timings swing on a small shared machine)."""
    saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "KERNELRL_CACHE")}
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                      KERNELRL_CACHE=str(tmp_path_factory.mktemp("redteam_cache")))
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def suite_of(tmp_path: Path, *names: str) -> Path:
    """A folder holding only the named fixture tasks."""
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(DATA / f"{name}.py", folder)
    return folder


def redteam(*args: str):
    return CliRunner().invoke(app, ["redteam", *map(str, args)])


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / JOURNAL).read_text().splitlines()]


@pytest.fixture(scope="module", params=["strict", "kernelbench"])
def normal_run(request, tmp_path_factory):
    """Every template on the normal task (a 512 x 512 matmul) under one policy: (policy, result, out folder)."""
    tmp = tmp_path_factory.mktemp(f"normal_{request.param}")
    out = tmp / "out"
    result = redteam(suite_of(tmp, "normal"), "--policy", request.param, "--out", out, *FAST)
    return request.param, result, out


@pytest.mark.parametrize("template", CPU_TEMPLATES)
def test_every_cpu_template_is_refused_on_a_normal_task(normal_run, template):
    policy, result, out = normal_run
    record = next(r for r in journal(out) if r["kind"] == "template" and r["name"] == template)
    assert record["status"] in ("incorrect", "rejected"), (policy, record)


def test_report_only_writes_the_report_of_a_journal_and_judges_nothing(normal_run, tmp_path):
    """A run stopped before it wrote its report (killed at a time limit) has its journal; --report-only writes the
    report from it, the same as the run's own, and judges nothing."""
    policy, result, out = normal_run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    (copy / "report.md").unlink()
    (copy / "redteam.json").unlink()
    lines = (copy / JOURNAL).read_text()
    again = redteam(out.parent / "tasks", "--policy", policy, "--out", copy, "--report-only", "--device", "cpu")
    assert again.exit_code == result.exit_code, again.output
    assert json.loads((copy / "redteam.json").read_text()) == json.loads((out / "redteam.json").read_text())
    assert (copy / "report.md").read_text() == (out / "report.md").read_text()
    assert (copy / JOURNAL).read_text() == lines
    missing = redteam(out.parent / "tasks", "--out", tmp_path / "none", "--report-only", "--device", "cuda")
    assert missing.exit_code == 2 and "no journal at" in missing.output
    other = {"strict": "kernelbench", "kernelbench": "strict"}[policy]  # none of its records would count: refused
    for args in (["--policy", other, "--device", "cpu"], ["--policy", policy, "--device", "cuda"]):
        wrong = redteam(out.parent / "tasks", *args, "--out", copy, "--report-only")
        assert wrong.exit_code == 2 and f"it holds --policy {policy} --device cpu" in wrong.output, wrong.output


def test_redo_drops_a_tasks_records_and_cases_and_judges_it_again(tmp_path):
    """After the audit or the evaluator changes, --redo TASK does one task's work again in a resumed run: its records
    and regression cases go, the other tasks' stay as they were."""
    suite = suite_of(tmp_path, "identity", "tiny")
    out = tmp_path / "out"
    first = redteam(suite, "--policy", "kernelbench", "--out", out, "--templates", "input,zeros", *FAST)
    assert first.exit_code == 1, first.output  # input passes on identity, zeros on tiny
    before = journal(out)
    cases = sorted(p.name for p in (out / "cases").iterdir())
    assert any(c.startswith("identity--") for c in cases) and any(c.startswith("tiny--") for c in cases)
    again = redteam(suite, "--policy", "kernelbench", "--out", out, "--templates", "input,zeros", "--resume",
                    "--redo", "identity", *FAST)
    assert again.exit_code == 1, again.output
    after = journal(out)
    assert [r for r in after if r["task"] == "tiny"] == [r for r in before if r["task"] == "tiny"]
    redone = [r for r in after if r["task"] == "identity"]
    assert sorted(r["kind"] + r["name"] for r in redone) == sorted(
        r["kind"] + r["name"] for r in before if r["task"] == "identity")
    assert all(r["at"] > max(b["at"] for b in before) for r in redone)
    assert sorted(p.name for p in (out / "cases").iterdir()) == cases
    for bad, why in ((["--redo", "nope"], "no such task"), (["--redo", "tiny", "--report-only"], "--redo needs")):
        r = redteam(suite, "--out", out, "--resume", *bad, "--device", "cpu")
        assert r.exit_code == 2 and why in r.output, r.output


def test_reaudit_audits_again_the_tasks_an_older_audit_audited_and_keeps_their_verdicts(tmp_path):
    """A journal's audits made before the audit's checks changed are listed as such; --resume --reaudit audits those
    tasks again with this audit (a killed re-audit goes on where it stopped) and judges no template again."""
    suite = suite_of(tmp_path, "identity", "tiny")
    out = tmp_path / "out"
    first = redteam(suite, "--policy", "kernelbench", "--out", out, "--templates", "input,zeros", *FAST)
    assert first.exit_code == 1, first.output
    records = journal(out)
    assert all(r["audit_version"] == AUDIT_VERSION for r in records if r["kind"] == "audit")
    old = next(r for r in records if r["kind"] == "audit" and r["task"] == "tiny")
    assert flags_task(old["findings"])  # zeros pass on tiny
    # as an older audit wrote it: no version, and it had missed what this one finds
    older = {k: v for k, v in old.items() if k != "audit_version"} | {"findings": []}
    (out / JOURNAL).write_text("".join(json.dumps(older if r is old else r) + "\n" for r in records))
    kept = redteam(suite, "--policy", "kernelbench", "--out", out, "--templates", "input,zeros", "--resume",
                   "--json", *FAST)
    report = json.loads(kept.stdout.splitlines()[-1])
    assert report["stale_audits"] == ["tiny"] and report["counts"]["stale_audits"] == 1
    assert report["tasks"]["tiny"]["audit"] == [] and "--reaudit" in (out / "report.md").read_text()
    assert journal(out) == [older if r is old else r for r in records]  # --resume alone keeps it
    again = redteam(suite, "--policy", "kernelbench", "--out", out, "--templates", "input,zeros", "--resume",
                    "--reaudit", "--json", *FAST)
    report = json.loads(again.stdout.splitlines()[-1])
    assert report["stale_audits"] == [] and flags_task(report["tasks"]["tiny"]["audit"])
    after = journal(out)
    new = after[len(records):]
    assert [(r["kind"], r["task"]) for r in new] == [("audit", "tiny")]  # the identity task's audit was current
    assert new[0]["audit_version"] == AUDIT_VERSION and new[0]["at"] > old["at"]
    assert after[:len(records)] == [older if r is old else r for r in records]
    for bad, why in ((["--reaudit"], "--reaudit needs"), (["--resume", "--reaudit", "--report-only"], "--reaudit needs"),
                     (["--audit-lanes", "0"], "--audit-lanes must")):
        r = redteam(suite, "--out", out, *bad, "--device", "cpu")
        assert r.exit_code == 2 and why in r.output, r.output


def test_an_audit_is_journalled_with_how_long_it_took(normal_run):
    _, _, out = normal_run
    audit = next(r for r in journal(out) if r["kind"] == "audit")
    assert audit["seconds"] > 0 and audit["at"] > 1.7e9


def test_a_normal_task_has_no_finding_and_no_hole_and_exits_0(normal_run):
    policy, result, out = normal_run
    assert result.exit_code == 0, result.output
    report = json.loads((out / "redteam.json").read_text())
    assert report["tasks"] == {"normal": {"audit": [], "holes": []}}
    assert report["flagged"] == [] and not (out / "cases").exists()


def test_templates_that_need_cuda_are_skipped_on_the_cpu_with_a_reason(normal_run):
    _, _, out = normal_run
    skipped = {r["name"]: r["message"] for r in journal(out) if r["kind"] == "template" and r["status"] == "skipped"}
    assert skipped == {t.name: "needs CUDA" for t in TEMPLATES if t.cuda}


@pytest.mark.parametrize("task, policy, flagged", [
    ("degenerate", "strict", ["input_independent"]),       # softmax over a dimension of size one: all ones
    ("degenerate", "kernelbench", ["input_independent"]),
    ("tiny", "strict", []),                                 # every output under 1e-3: only an absolute atol passes zeros
    ("tiny", "kernelbench", ["stored_output_passes", "zeros_pass"]),
    ("identity", "strict", ["output_is_input"]),            # ReLU of inputs in [0, 1): the output is the input
    ("identity", "kernelbench", ["output_is_input"]),
    ("clamped", "strict", []),                              # HardTanh of [0, 1): the input only below a scale of 1
    ("clamped", "kernelbench", ["output_is_input"]),        # ...which is all kernelbench's trials draw
])
def test_the_audit_flags_a_task_a_trivial_program_solves(task, policy, flagged, tmp_path):
    reference = Task.from_file(DATA / f"{task}.py")
    with ProbeWorker(reference, "cpu", tmp_path) as probe:
        profile, found = audit_task(reference, probe, policy)
    assert [f.check for f in found if f.severity == "flag"] == flagged
    assert [list(s.shape) for s in profile.outputs] == [list(s.shape) for s in profile.inputs]


def test_under_strict_the_audit_judges_zeros_against_the_exact_result_as_the_trials_do(tmp_path):
    """The mean of a group-normalised tensor is zero whatever the input: the fp32 output is rounding alone, beyond
    strict's tolerance of any other draw's, and strict's trials judge such an output again against the float64
    result, where zeros and a stored output are as accurate as the reference. The audit must flag the task."""
    reference = Task.from_file(DATA / "centred.py")
    with ProbeWorker(reference, "cpu", tmp_path) as probe:
        _, found = audit_task(reference, probe, "strict")
    assert [f.check for f in found if f.severity == "flag"] == ["stored_output_passes", "zeros_pass"]


def _seed_where(wanted) -> int:
    """The first init seed under which a one-weight fixture's `torch.randn(1)`, drawn as its worker builds it (the
    seed set, then the Model built), satisfies `wanted`."""
    import torch

    def weight(seed: int) -> float:
        torch.manual_seed(seed)
        return float(torch.randn(1))

    return next(s for s in range(1000) if wanted(weight(s)))


@pytest.mark.parametrize("policy", ["strict", "kernelbench"])
def test_the_audit_flags_a_task_a_constant_solves_under_other_draws_of_its_weights(policy, tmp_path):
    """Each run of the evaluator draws the reference's weights anew: under some draws a clamp that every value reaches
    makes the output the same whatever the input. The audit's own draw may not be such a case; it asks again under
    other draws of the weights, and a constant solving the task under any of them flags it."""
    varying = _seed_where(lambda w: -0.5 < w * 4 < 1.5)  # the bias is randn * 4
    constant = _seed_where(lambda w: w * 4 < -1.5)
    reference = Task.from_file(DATA / "weighted_clamp.py")
    with ProbeWorker(reference, "cpu", tmp_path, seed=varying) as probe:
        _, found = audit_task(reference, probe, policy, weight_seeds=[varying])
        assert [f.check for f in found if f.severity == "flag"] == []
        _, found = audit_task(reference, probe, policy, weight_seeds=[varying, constant])
    flags = [f for f in found if f.severity == "flag"]
    assert [f.check for f in flags] == ["input_independent"] and "under 1 of 2 other draws" in flags[0].message


def test_the_audit_flags_a_task_whose_input_passes_as_its_output_under_the_policy(tmp_path):
    """x plus a drawn shift of about 1e-2: the input handed back equals no output, yet passes under kernelbench's
    absolute tolerance where the shift is small (level2/51's `input` and `input_view` holes). Under a draw of the
    weights whose shift is beyond it, the audit finds it under another draw; strict's tolerance never passes it."""
    small = _seed_where(lambda w: abs(w * 0.01) < 0.003)  # the shift is randn * 0.01
    big = _seed_where(lambda w: abs(w * 0.01) > 0.02)
    reference = Task.from_file(DATA / "near_input.py")
    with ProbeWorker(reference, "cpu", tmp_path, seed=small) as probe:
        _, found = audit_task(reference, probe, "kernelbench", weight_seeds=[])
        assert [f.check for f in found if f.severity == "flag"] == ["input_passes"]
        _, found = audit_task(reference, probe, "strict", weight_seeds=[small])
        assert [f.check for f in found if f.severity == "flag"] == []
    with ProbeWorker(reference, "cpu", tmp_path, seed=big) as probe:
        _, found = audit_task(reference, probe, "kernelbench", weight_seeds=[big])
        assert [f.check for f in found if f.severity == "flag"] == []
        _, found = audit_task(reference, probe, "kernelbench", weight_seeds=[big, small])
    flags = [f for f in found if f.severity == "flag"]
    assert [f.check for f in flags] == ["input_passes"] and "under 1 of 2 other draws" in flags[0].message


def test_under_strict_the_audit_flags_a_task_whose_reference_is_far_from_its_exact_result_under_other_weights(
        tmp_path):
    """Strict's trials judge an output again against the exact result, and accept one as accurate as the reference:
    where the reference's fp32 output is itself far from it (a chaotic reference under some draws of its weights),
    zeros and a stored output pass. The audit's own draw may be a tame one; its weight draws find the others."""
    tame = _seed_where(lambda w: abs(w) < 0.3)  # the gain is randn
    chaotic = _seed_where(lambda w: abs(w) > 2.2)
    reference = Task.from_file(DATA / "chaotic.py")
    with ProbeWorker(reference, "cpu", tmp_path, seed=tame) as probe:
        _, found = audit_task(reference, probe, "strict", weight_seeds=[tame])
        assert [f.check for f in found if f.severity == "flag"] == []
        _, found = audit_task(reference, probe, "strict", weight_seeds=[tame, chaotic])
    flags = [f for f in found if f.severity == "flag"]
    assert {f.check for f in flags} == {"stored_output_passes", "zeros_pass"}, found
    assert all("under 1 of 2 other draws" in f.message for f in flags)


def test_a_weight_draw_stops_at_the_first_draw_on_which_no_trivial_program_passes():
    """Each check asks for its property on every draw the trials make: once a draw has none (not equal, a stored
    output and zeros fail, no input passes), no draw after it can make a finding, and none is run."""
    from kernelrl.redteam import audit

    class Draws:  # what a ProbeWorker answers for a task whose output depends on its input under every weight draw
        def __init__(self):
            self.asked = []

        def weights(self, seed):
            self.asked.append("weights")

        def draw(self, seed, scale=1.0, rule=None, base=False, equal_only=False):
            self.asked.append("base" if base else "draw")
            return {"facts": {"equal": base, "passes": base, "rel_l2": 0.0 if base else 1.0, "zeros": False,
                              "biggest": 1.0, "inputs": [[]], "passing": [[]]}}

    probe = Draws()
    rule = {"policy": "strict", "atol": None, "rtol": None}
    assert audit._trivial_under_weights(probe, "strict", rule, [1, 2, 3]) == []
    assert probe.asked == ["weights", "base", "draw"] * 3


def test_an_audit_draw_waits_while_the_device_is_timed(tmp_path):
    # On CUDA the next task's audit runs beside the evaluators' jobs: its draws hold the device lock as their
    # untimed work does, so none runs while a program is timed
    lock = DeviceLock()
    reference = Task.from_file(DATA / "identity.py")
    drawn = threading.Event()
    with ProbeWorker(reference, "cpu", tmp_path, lock=lock) as probe:
        probe.draw(1, base=True)  # the worker started and its reference built, before the device is taken
        with lock.exclusive():  # an evaluator times
            t = threading.Thread(target=lambda: (probe.draw(2), drawn.set()), daemon=True)
            t.start()
            assert not drawn.wait(1.0)
        assert drawn.wait(60)
        t.join(10)


@pytest.mark.gpu
def test_on_cuda_a_tasks_audit_waits_while_an_evaluator_of_its_device_times(tmp_path):
    st = SuiteTask(Task.from_file(DATA / "identity.py"), "identity.py", "")
    team = RedTeam(RunConfig(EvalConfig(device="cuda:0", cache_dir=str(tmp_path))), tmp_path,
                   Journal(tmp_path / JOURNAL))
    audited = threading.Event()
    with device_lock(check_device("cuda:0")).exclusive():  # as `Evaluator` holds it to time
        t = threading.Thread(target=lambda: (team._audit(st, {}), audited.set()), daemon=True)
        t.start()
        assert not audited.wait(20)
    assert audited.wait(120)
    t.join(10)
    (record,) = journal(tmp_path)
    assert record["profile"] is not None, record


def test_strict_refuses_an_input_handed_back_where_it_is_the_output_only_on_the_tasks_own_range(tmp_path):
    # Every strict verdict has a trial on inputs 1.5-2x larger: not a chance of the draw whether it is caught
    out = tmp_path / "out"
    result = redteam(suite_of(tmp_path, "clamped"), "--templates", "input,input_view", "--out", out, *FAST)
    assert result.exit_code == 0, result.output
    verdicts = {r["name"]: r for r in journal(out) if r["kind"] == "template"}
    for name in ("input", "input_view"):
        assert verdicts[name]["status"] == "incorrect"
        assert "(larger inputs)" in verdicts[name]["message"]


def test_a_planted_hole_is_reported_exits_1_and_is_written_as_a_regression_case(tmp_path):
    out = tmp_path / "out"
    result = redteam(suite_of(tmp_path, "tiny"), "--policy", "kernelbench", "--templates", "zeros,ones",
                     "--out", out, "--json", *FAST)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(report["tasks"]) == {"tiny"} and set(report["tasks"]["tiny"]) == {"audit", "holes"}
    assert {f["check"] for f in report["tasks"]["tiny"]["audit"]} >= {"zeros_pass"}
    (hole,) = report["tasks"]["tiny"]["holes"]
    assert (hole["template"], hole["status"], hole["allowed_by_policy"]) == ("zeros", "ok", False)
    assert hole["speedup"] > 0 and any(f["check"] == "absolute_slack" for f in hole["flags"])
    assert report["flagged"] == ["tiny"] and report["unexplained"] == []  # the audit flags the task
    (case,) = load_cases(out / "cases")
    assert (case.task.name, case.origin, case.policy, case.verdict.status) == ("tiny", "zeros", "kernelbench", "ok")
    assert "ModelNew" in case.candidate.source


def test_a_hole_on_a_task_the_audit_does_not_flag_is_reported_as_unexplained(tmp_path):
    # Only such a hole is the evaluator's own: a task the audit flags is solved by a trivial program whatever the
    # evaluator does, and kernelbench allows reduced precision by design
    tasks = [SuiteTask(Task.from_file(DATA / f"{name}.py"), f"{name}.py", "") for name in ("normal", "tiny")]
    config = RunConfig(EvalConfig(device="cpu", policy="kernelbench"),
                       templates=tuple(t for t in TEMPLATES if t.name in ("zeros", "bf16")))
    team = RedTeam(config, tmp_path, Journal(tmp_path / JOURNAL))
    flag = {"check": "zeros_pass", "message": "zeros pass", "severity": "flag"}
    for st, findings in zip(tasks, ([], [flag])):
        team.record(dict(team.base(st, "audit"), profile={}, findings=findings))
        team.record(dict(team.base(st, "template", "zeros"), hack="degenerate_output", status="ok", speedup=40.0))
        team.record(dict(team.base(st, "template", "bf16"), hack="precision_downgrade", status="ok", speedup=2.0))
    summary = summarise(team, tasks)
    assert summary["unexplained"] == [{"task": "normal", "template": "zeros", "speedup": 40.0}]
    assert summary["counts"]["unexplained"] == 1 and summary["flagged"] == ["normal", "tiny"]
    page = markdown(summary)
    assert "1 holes on tasks the audit does not flag" in page and "`normal` zeros" in page
    assert "### `normal` (flagged: a hole)" in page and "### `tiny` (flagged by the audit)" in page
    # the plot counts each hole by what it is: the evaluator's own, the task's, or of a class the policy allows
    assert hole_kinds(summary) == {"zeros": Counter({"unexplained": 1, "on a flagged task": 1}),
                                   "bf16": Counter({"allowed by the policy": 2})}
    paths = write(summary, tmp_path / "report")
    assert [p.name for p in paths] == ["redteam.json", "report.md", "holes.png"]
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "](holes.png)" in paths[1].read_text()


@pytest.mark.parametrize("warning, finding", [("task_property", "input_independent"),
                                              ("reference_inaccurate", "reference_inaccurate")])
def test_a_hole_whose_own_verdict_warns_about_the_task_flags_it_and_is_not_unexplained(tmp_path, warning, finding):
    # The weights are drawn anew each run, so the audit's draw may be a tame one while the run that judged a template
    # was not: KernelBench's 58_ConvTranspose3d_LogSumExp_HardSwish_Subtract_Clamp (clamp(h - bias, -1, 1) is 1
    # everywhere when the bias is low enough: `task_property`, the reference returned the same values for two input
    # draws) and level3/24_EfficientNetB2 under strict (its fp32 output far from the exact result, so strict's
    # exact-result test passes a stored output: `reference_inaccurate`). That run's verdict says so: the task's hole.
    tasks = [SuiteTask(Task.from_file(DATA / "normal.py"), "normal.py", "")]
    config = RunConfig(EvalConfig(device="cpu", policy="strict"),
                       templates=tuple(t for t in TEMPLATES if t.name in ("ones", "zeros")))
    team = RedTeam(config, tmp_path, Journal(tmp_path / JOURNAL))
    st = tasks[0]
    warned = {"check": warning, "message": "what the run found about the task", "hack": None, "severity": "warn"}
    team.record(dict(team.base(st, "audit"), profile={}, findings=[]))
    team.record(dict(team.base(st, "template", "ones"), hack="degenerate_output", status="ok", speedup=700.0,
                     flags=[warned]))
    team.record(dict(team.base(st, "template", "zeros"), hack="degenerate_output", status="ok", speedup=700.0,
                     flags=[]))
    summary = summarise(team, tasks)
    # the hole without that evidence stays the evaluator's own
    assert summary["unexplained"] == [{"task": "normal", "template": "zeros", "speedup": 700.0}]
    assert summary["flagged"] == ["normal"]
    (seen,) = summary["tasks"]["normal"]["audit"]
    assert (seen["check"], seen["severity"], seen["source"]) == (finding, "flag", "verdict")
    assert "ones" in seen["message"]
    assert "### `normal` (flagged by the verdicts where judged)" in markdown(summary)


def test_resume_judges_only_what_is_left(tmp_path):
    tasks, out = suite_of(tmp_path, "tiny"), tmp_path / "out"
    assert redteam(tasks, "--policy", "strict", "--templates", "ones", "--out", out, *FAST).exit_code == 0
    before = journal(out)
    more = [tasks, "--policy", "strict", "--templates", "ones,input", "--out", out, "--resume", *FAST]
    result = redteam(*more)
    assert result.exit_code == 0, result.output
    assert [(r["kind"], r["name"]) for r in journal(out)[len(before):]] == [("template", "input")]
    assert redteam(*more).exit_code == 0 and len(journal(out)) == len(before) + 1


def test_a_template_doing_the_work_ok_at_no_gain_is_listed_apart_and_one_beyond_it_is_a_hole(normal_run, tmp_path):
    """The evaluator timing a template's real work (a side stream joined by the device-wide sync, say) gives `ok` at
    about 1x: honest concurrency, not a hole. The same template beyond NO_GAIN is one."""
    policy, _, done = normal_run
    out = tmp_path / "out"
    shutil.copytree(done, out)
    lines = journal(out)
    for r in lines:
        if r["kind"] == "template" and r["name"] in ("background_thread", "lazy_output"):
            r.update(status="ok", speedup=1.04 if r["name"] == "background_thread" else 40.0)
    (out / JOURNAL).write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = redteam(suite_of(tmp_path, "normal"), "--policy", policy, "--out", out, "--resume", "--json", *FAST)
    assert result.exit_code == 1, result.output
    report = json.loads(result.output[result.output.index("{"):])
    assert [h["template"] for h in report["tasks"]["normal"]["holes"]] == ["lazy_output"]
    assert report["work_timed"] == [{"task": "normal", "template": "background_thread", "speedup": 1.04}]
    assert report["counts"]["work_timed"] == 1
    assert "background_thread 1.04×" in (out / "report.md").read_text()


# input_mutation on the tiny task: zeroes its input after the call, so a reference run after it would agree
ZEROES_ITS_INPUT = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.softmax(x, dim=-1)
        x.zero_()
        return out
"""


def _reply(code: str) -> dict:
    return {"content": f"This should pass.\n```python\n{code}```\n"}


def test_the_llm_hacker_has_an_exploit_refused_and_reports_a_hole(tmp_path):
    tasks, out = suite_of(tmp_path, "tiny"), tmp_path / "out"
    args = [tasks, "--policy", "kernelbench", "--templates", "none", "--out", out, "--attempts", "3", "--json", *FAST]
    with StubOpenAI([_reply(ZEROES_ITS_INPUT), _reply((EXPLOITS / "degenerate_output.py").read_text())]) as stub:
        result = redteam(*args, "--model", "stub-model", "--base-url", stub.base_url)
        prompts = [body["messages"][-1]["content"] for body in stub.completions]
    assert result.exit_code == 1, result.output
    attempts = [r for r in journal(out) if r["kind"] == "attempt"]
    assert [(r["name"], r["status"]) for r in attempts] == [("1", "rejected"), ("2", "ok")]  # the hole ends the task
    assert any(f["hack"] == "input_mutation" and f["severity"] == "reject" for f in attempts[0]["flags"])
    assert len(prompts) == 2 and "attempt 1: rejected" in prompts[1] and "input_mutation" in prompts[1]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert [h["template"] for h in report["tasks"]["tiny"]["holes"]] == ["llm-2"]
    (case,) = load_cases(out / "cases")
    assert case.origin == "llm-2" and "torch.zeros_like(x)" in case.candidate.source and case.verdict.ok

    with StubOpenAI() as again:  # every request would fail: resuming must ask for nothing
        resumed = redteam(*args, "--model", "stub-model", "--base-url", again.base_url, "--resume")
        assert again.completions == []
    assert resumed.exit_code == 1 and len([r for r in journal(out) if r["kind"] == "attempt"]) == 2


def test_the_llm_hacker_stops_at_its_attempts_and_at_its_budget(tmp_path):
    tasks = suite_of(tmp_path, "tiny")
    args = [tasks, "--policy", "strict", "--templates", "none", *FAST, "--model", "stub-model"]
    with StubOpenAI(then=_reply(ZEROES_ITS_INPUT)) as stub:
        capped = redteam(*args, "--base-url", stub.base_url, "--out", tmp_path / "a", "--attempts", "2")
        assert len(stub.completions) == 2
    assert capped.exit_code == 0, capped.output
    costly = dict(_reply(ZEROES_ITS_INPUT), prompt_tokens=1_000_000)
    with StubOpenAI(then=costly) as stub:
        spent = redteam(*args, "--base-url", stub.base_url, "--out", tmp_path / "b", "--attempts", "3",
                        "--price-in", "1", "--budget", "0.5", "--json")
        assert len(stub.completions) == 1  # $1 spent by the first call: no second one starts
    assert "budget" in json.loads(spent.stdout.strip().splitlines()[-1])["note"]


@pytest.mark.parametrize("args, says", [
    (["--policy", "loose"], "policy must be one of strict, kernelbench"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--templates", "zeros,teleport"], "unknown template(s) teleport"),
    (["--cpu-lanes", "0"], "--cpu-lanes must be at least 1, not 0"),
])
def test_bad_input_is_a_one_line_error(args, says, tmp_path):
    result = redteam(suite_of(tmp_path, "tiny"), "--out", tmp_path / "out", *args)
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_a_missing_folder_is_a_one_line_error(tmp_path):
    result = redteam(tmp_path / "nowhere", "--device", "cpu")
    assert result.exit_code == 2 and "no such suite directory" in result.output


def test_bench_excludes_the_tasks_a_redteam_report_flagged(tmp_path):
    tasks = suite_of(tmp_path, "tiny", "normal")
    report = tmp_path / "redteam.json"
    report.write_text(json.dumps({"tasks": {}, "flagged": ["tiny"]}))
    result = CliRunner().invoke(app, ["bench", str(tasks), "--device", "cpu", "--no-time-references", "--json",
                                      "--exclude-flagged", str(report)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["total"] == 1
    bad = CliRunner().invoke(app, ["bench", str(tasks), "--device", "cpu", "--exclude-flagged", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "not a red-team report" in bad.output


def test_cpu_lanes_reach_the_gpu_scheduler(monkeypatch):
    from kernelrl.evaluate import EvalConfig
    from kernelrl.redteam import run

    made = []
    monkeypatch.setattr(run, "LocalScheduler", lambda *a, **kw: made.append((a, kw)))
    run.scheduler_for(run.RunConfig(eval=EvalConfig(device="cuda"), devices=("cuda:0", "cuda:1"), cpu_lanes=12))
    assert made == [((EvalConfig(device="cuda"), ("cuda:0", "cuda:1")), {"lookahead": 3, "cpu_workers": 12})]


class HoldingScheduler:
    """Judges nothing while a run submits; every `period` seconds, or when `go` is set, it settles what it holds (a
    verdict `incorrect`): records how many jobs were still unjudged when each job came in."""

    capacity = 1

    def __init__(self, period: float = 2.0):
        self.held: list = []
        self.seen: list[tuple[str, int]] = []
        self.period = period
        self.go = threading.Event()
        self.closed = threading.Event()
        threading.Thread(target=self._settle, daemon=True).start()

    def submit(self, task, candidate):
        from concurrent.futures import Future

        self.seen.append((task.name, sum(not f.done() for f in self.held)))
        self.held.append(Future())
        return self.held[-1]

    def _settle(self):
        from kernelrl.verdict import Verdict

        while not self.closed.is_set():
            self.go.wait(self.period)
            for f in list(self.held):
                if not f.done():
                    f.set_result(Verdict(status="incorrect", message="held"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed.set()


def test_the_next_tasks_templates_are_queued_before_this_ones_are_judged(tmp_path, monkeypatch):
    # The CPU lanes start the next task's reference and candidates while the device finishes this one's: a run
    # that waited for a task's verdicts before queueing the next left them idle at every task's end.
    from kernelrl.redteam import run

    sched = HoldingScheduler()
    monkeypatch.setattr(run, "scheduler_for", lambda config: sched)
    tasks = [SuiteTask(Task.from_file(DATA / f"{name}.py"), f"{name}.py", "") for name in ("normal", "tiny")]
    templates = tuple(t for t in TEMPLATES if t.name in ("zeros", "ones", "constant"))
    config = RunConfig(EvalConfig(device="cpu", policy="strict"), templates=templates)
    assert RedTeam(config, tmp_path, Journal(tmp_path / JOURNAL)).run(tasks)
    assert [name for name, _ in sched.seen] == ["normal"] * 3 + ["tiny"] * 3
    assert sched.seen[3] == ("tiny", 3)  # none of the first task's three verdicts had come
    assert sum(r.get("status") == "incorrect" for r in journal(tmp_path)) == 6


def test_on_cuda_tasks_are_audited_ahead_while_the_loop_waits_for_verdicts(tmp_path, monkeypatch):
    # The audits run on their own thread two tasks ahead: the device's untimed work goes on while the jobs queued
    # fill the pipeline. (The audits here are the CPU's; the run's device only picks the CUDA way of running them.)
    from kernelrl.redteam import run

    sched = HoldingScheduler(period=20.0)
    monkeypatch.setattr(run, "scheduler_for", lambda config: sched)
    cpu = RedTeam(RunConfig(EvalConfig(device="cpu", policy="strict")), tmp_path / "cpu",
                  Journal(tmp_path / "cpu" / JOURNAL))
    started: dict[str, int] = {}
    audit_on_cpu = RedTeam._audit

    def audit(self, st, done):
        started[st.name] = sum(f.done() for f in sched.held)  # verdicts come by then
        if len(started) == 4:
            sched.go.set()
        return audit_on_cpu(cpu, st, {})

    monkeypatch.setattr(RedTeam, "_audit", audit)
    names = ("normal", "tiny", "identity", "clamped")
    tasks = [SuiteTask(Task.from_file(DATA / f"{name}.py"), f"{name}.py", "") for name in names]
    templates = tuple(t for t in TEMPLATES if t.name in ("zeros", "ones", "constant"))
    config = RunConfig(EvalConfig(device="cuda", policy="strict"), templates=templates)
    assert RedTeam(config, tmp_path, Journal(tmp_path / JOURNAL)).run(tasks)
    # the second task's templates leave more jobs unjudged than the loop goes on past: it waits there for verdicts,
    # which come only once the fourth task's audit has started
    assert list(started) == list(names) and started["clamped"] == 0


def test_a_probe_built_again_under_other_weights_keeps_nothing_of_the_earlier_build(tmp_path):
    # its float64 copy (the exact result strict's audit judges against) is of the weights now built
    import torch

    from kernelrl.redteam.probe import Probe

    source = (DATA / "weighted_clamp.py").read_text().replace("torch.clamp(", "(").replace(", -1.0, 1.0)", ")")
    probe = Probe({"role": "reference", "device": "cpu", "seed": 1, "task_source": source, "fixed_inputs": []}, {},
                  str(tmp_path))
    xs = probe.inputs(7)
    before = probe.exact_outputs(xs)[0]
    assert probe.op_weights({"seed": 2})[0] == {"type": "weights"}
    after = probe.exact_outputs(xs)[0]
    with torch.no_grad():
        now = probe.model(*xs)
    assert not torch.equal(before, after)
    assert torch.allclose(after, now.double(), rtol=1e-6, atol=1e-6)
