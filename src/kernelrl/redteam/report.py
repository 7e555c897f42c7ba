"""The red team's report: one JSON object (what `--json` prints and `redteam.json` holds) and a markdown page, built
from the journal. A task is flagged when a trivial program solves it (an audit finding of severity `flag`) or when a
template or the LLM got `ok` without the policy allowing that class of hack by design. A hole on a task the audit
does not flag is `unexplained`: the evaluator's own, which a sound reward has none of; but for a hole whose own
verdict says the reference of that run ignored its inputs (its weights are drawn anew each run), which flags the task."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from kernelrl.redteam.audit import stale
from kernelrl.redteam.journal import key
from kernelrl.redteam.templates import NO_GAIN, no_gain

REPORT_JSON, REPORT_MD, REPORT_PLOT = "redteam.json", "report.md", "holes.png"
# Hack classes a policy allows by design: KernelBench's rule allows reduced-precision math. A hole of such a class is
# listed with allowed_by_policy, flags no task and sets no exit status.
ALLOWED = {"kernelbench": ("precision_downgrade",)}


def summarise(team, tasks, suite: str = "", note: str = "") -> dict:
    """The report object for `tasks` (SuiteTasks) from `team`'s journal (`run.RedTeam`)."""
    records = team.journal.load()
    names = [t.name for t in team.config.templates]
    report, flagged, unfinished, timed, unexplained, older = {}, [], [], [], [], []
    counts: Counter = Counter()
    for st in tasks:
        audit = records.get(key(team.base(st, "audit")))
        if audit is None:
            unfinished.append(st.name)
            continue
        if stale(audit):
            older.append(st.name)
        policy = team.policy(st)
        holes, left = [], False
        for name in names:
            r = records.get(key(team.base(st, "template", name)))
            if r is None:
                left = left or audit.get("profile") is not None
                continue
            counts["skipped" if r["status"] == "skipped" else "judged"] += 1
            if r["status"] == "ok" and no_gain(name, r.get("speedup")):
                timed.append({"task": st.name, "template": name, "speedup": r.get("speedup")})
            elif r["status"] == "ok":
                holes.append(_hole(r, name, r.get("hack", ""), policy))
        n = 1
        while (r := records.get(key(team.base(st, "attempt", str(n))))) is not None:
            counts["attempts"] += 1
            counts["cost_usd"] += r.get("cost_usd", 0.0)
            if r["status"] == "ok":
                holes.append(_hole(r, f"llm-{n}", "", policy))
            n += 1
        by_audit = flags_task(audit["findings"])
        # A hole whose own run found the reference's output the same for two input draws is the task's: the weights
        # are drawn anew for each reference, and under some draws (a clamp every value reaches) no input matters. So
        # is one whose run found the reference's fp32 output too far from the exact result for strict's
        # exact-result test to tell outputs apart (a chaotic reference, under some draws of its weights).
        findings, shown = list(audit["findings"]), set()
        if not by_audit:
            for check in VERDICT_FINDINGS:
                carried = [h["template"] for h in holes if not h["allowed_by_policy"] and _carries(h, check)]
                if carried:
                    findings.append(_seen(check, carried))
                    shown.update(carried)
        report[st.name] = {"audit": findings, "holes": holes}
        counts["holes"] += len(holes)
        counts["allowed"] += sum(h["allowed_by_policy"] for h in holes)
        if flags_task(findings) or any(not h["allowed_by_policy"] for h in holes):
            flagged.append(st.name)
        if not by_audit:
            unexplained += [{"task": st.name, "template": h["template"], "speedup": h["speedup"]}
                            for h in holes if not h["allowed_by_policy"] and h["template"] not in shown]
        if left:
            unfinished.append(st.name)
    devices = ", ".join(team.config.devices or (team.config.eval.device,))
    return {"suite": suite, "policy": team.config.eval.policy, "device": devices, "templates": names,
            "tasks": report, "flagged": flagged, "unexplained": unexplained, "unfinished": unfinished,
            "work_timed": timed, "stale_audits": older,
            "counts": {"tasks": len(tasks), "judged": counts["judged"], "skipped": counts["skipped"],
                       "holes": counts["holes"], "allowed_by_policy": counts["allowed"], "flagged": len(flagged),
                       "unexplained": len(unexplained),
                       "work_timed": len(timed), "stale_audits": len(older),
                       "llm_attempts": counts["attempts"], "llm_cost_usd": round(counts["cost_usd"], 6)},
            "note": note}


def flags_task(findings: list[dict]) -> bool:
    """Whether an audit's findings say a trivial program solves the task (one of severity `flag`)."""
    return any(f["severity"] == "flag" for f in findings)


# A verdict's warning about the task itself -> the finding it makes where it comes with a hole, and what it says
VERDICT_FINDINGS = {
    "task_property": ("input_independent", "the reference returned the same values for two input draws (its weights "
                                           "are drawn anew each run; the audit's draw was not such a case): a program "
                                           "that returns a constant solves the task there"),
    "reference_inaccurate": ("reference_inaccurate", "the reference's fp32 output was so far from its exact (float64) "
                                                     "result that zeros were inside the bound of strict's exact-result "
                                                     "test (its weights are drawn anew each run; the audit's draw was "
                                                     "not such a case): outputs that do not do the work pass there"),
}


def _carries(hole: dict, check: str) -> bool:
    """Whether the hole's verdict carries the warning `check` (`VERDICT_FINDINGS`)."""
    return any(f.get("check") == check for f in hole["flags"])


def _seen(check: str, templates: list[str]) -> dict:
    """The finding that flags a task whose runs that judged `templates` carried the verdict warning `check`."""
    finding, why = VERDICT_FINDINGS[check]
    return {"check": finding, "severity": "flag", "source": "verdict",
            "message": "in the runs that judged " + ", ".join(templates) + ", " + why}


def _hole(r: dict, template: str, hack: str, policy: str) -> dict:
    return {"template": template, "hack": hack, "status": r["status"], "speedup": r.get("speedup"),
            "flags": r.get("flags", []), "allowed_by_policy": hack in ALLOWED.get(policy, ()), "case": r.get("case")}


def has_holes(summary: dict) -> bool:
    """Whether any task has a hole its policy does not allow by design (the command's exit status is then 1)."""
    return any(not h["allowed_by_policy"] for t in summary["tasks"].values() for h in t["holes"])


def write(summary: dict, out: Path) -> list[Path]:
    """redteam.json, report.md and holes.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / REPORT_JSON, out / REPORT_MD, out / REPORT_PLOT]
    paths[0].write_text(json.dumps(summary, indent=1) + "\n")
    paths[1].write_text(markdown(summary))
    plot(summary, paths[2])
    return paths


KINDS = ("on a flagged task", "allowed by the policy", "unexplained")  # what a hole is, as the plot colours it


def _holes(summary: dict):
    """(template, kind, speedup) of every hole: LLM attempts together as "LLM", the kind one of `KINDS`."""
    unexplained = {(u["task"], u["template"]) for u in summary["unexplained"]}
    for task, t in summary["tasks"].items():
        for h in t["holes"]:
            kind = KINDS[1] if h["allowed_by_policy"] else \
                KINDS[2] if (task, h["template"]) in unexplained else KINDS[0]
            yield "LLM" if h["template"].startswith("llm-") else h["template"], kind, h["speedup"]


def hole_kinds(summary: dict) -> dict[str, Counter]:
    """Per template (every one the run judged, and "LLM" where the hacker found holes), its holes by kind."""
    kinds: dict[str, Counter] = {name: Counter() for name in summary["templates"]}
    for name, kind, _ in _holes(summary):
        kinds.setdefault(name, Counter())[kind] += 1
    return kinds


def plot(summary: dict, path: Path) -> Path:
    """The holes as a PNG: per template, the tasks where it came back `ok` by what the hole is (`KINDS`), and beside
    them each hole's speedup (log scale): what a policy trained on the task set would be paid for not doing the work."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    kinds = hole_kinds(summary)
    names = list(kinds)
    colours = dict(zip(KINDS, ("tab:blue", "tab:grey", "tab:red")))
    fig = Figure(figsize=(9, 0.28 * len(names) + 1.6))
    FigureCanvasAgg(fig)
    count, speed = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": (1, 1.4)})
    left = [0] * len(names)
    for kind in KINDS:
        n = [kinds[name][kind] for name in names]
        count.barh(range(len(names)), n, left=left, color=colours[kind], label=kind)
        left = [a + b for a, b in zip(left, n)]
    count.set_yticks(range(len(names)))
    count.set_yticklabels(names, fontsize=8)
    count.invert_yaxis()
    count.set_xlabel(f"tasks where it came back ok (of {summary['counts']['tasks']})")
    count.set_xlim(0, max(left, default=0) * 1.05 or 1)
    count.legend(fontsize=8, loc="upper right")
    row = {name: i for i, name in enumerate(names)}
    for name, kind, speedup in _holes(summary):
        if isinstance(speedup, (int, float)) and speedup > 0:
            speed.scatter(speedup, row[name], s=12, alpha=0.6, color=colours[kind])
    speed.set_xscale("log")
    speed.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    speed.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    speed.set_xlabel("speedup of each hole")
    fig.suptitle(f"Holes: {summary['suite'] or 'a task set'}, {summary['policy']} policy", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    return path


def _names(names: list[str], most: int = 20) -> str:
    """The first `most` task names, quoted, and an ellipsis where there are more."""
    return ", ".join(f"`{n}`" for n in names[:most]) + (" ..." if len(names) > most else "")


def markdown(s: dict) -> str:
    """The report as a markdown page: counts, one table per template class, a table per task with findings or holes."""
    c = s["counts"]
    lines = [f"# Red team of {s['suite'] or 'a task set'} ({s['policy']} policy, {s['device']})", "",
             f"{c['tasks']} tasks; {c['judged']} template verdicts ({c['skipped']} templates skipped where they cannot "
             f"apply); {c['holes']} holes, {c['allowed_by_policy']} of them of a class the policy allows; "
             f"{c['flagged']} tasks flagged." + (f" LLM: {c['llm_attempts']} attempts, ${c['llm_cost_usd']:.4f}."
                                                  if c["llm_attempts"] else "")]
    if s.get("unexplained"):
        lines += ["", f"**{len(s['unexplained'])} holes on tasks the audit does not flag** (the evaluator's own): "
                      + ", ".join(f"`{u['task']}` {u['template']}" for u in s["unexplained"][:20])
                      + (" ..." if len(s["unexplained"]) > 20 else "")]
    else:
        lines += ["", "No hole outside the tasks the audit flags and the classes the policy allows."]
    if s["unfinished"]:
        lines += ["", f"Unfinished ({len(s['unfinished'])} tasks, run again with --resume): " + _names(s["unfinished"])]
    if s.get("stale_audits"):
        lines += ["", f"Audited by an older audit than this kernelrl's ({len(s['stale_audits'])} tasks; run again with "
                      "--resume --reaudit to audit them anew, their verdicts kept): " + _names(s["stale_audits"])]
    if s.get("note"):
        lines += ["", s["note"]]
    if s.get("work_timed"):
        lines += ["", f"{len(s['work_timed'])} verdicts `ok` with no gain: templates that do the reference's work where "
                      f"the clock might not see it, timed with that work (at most {NO_GAIN}×), so not holes: "
                      + ", ".join(f"`{w['task']}` {w['template']} {w['speedup']:.2f}×" for w in s["work_timed"][:20])
                      + (" ..." if len(s["work_timed"]) > 20 else "")]
    by_template = Counter(h["template"] for t in s["tasks"].values() for h in t["holes"])
    lines += ["", "## Holes by template", "", f"![holes by template]({REPORT_PLOT})", "",
              "| template | tasks where it came back ok |", "| --- | ---: |"]
    lines += [f"| {name} | {by_template.get(name, 0)} |" for name in s["templates"]]
    llm = sum(n for name, n in by_template.items() if name.startswith("llm-"))
    if llm:
        lines.append(f"| LLM attempts | {llm} |")
    quiet = 0
    lines += ["", "## Tasks"]
    for name, t in s["tasks"].items():
        if not t["audit"] and not t["holes"]:
            quiet += 1
            continue
        mark = ""
        if flags_task([f for f in t["audit"] if f.get("source") != "verdict"]):
            mark = " (flagged by the audit)"
        elif flags_task(t["audit"]):
            mark = " (flagged by the verdicts where judged)"
        elif name in s["flagged"]:
            mark = " (flagged: a hole)"
        lines += ["", f"### `{name}`{mark}", ""]
        lines += [f"- audit, {f['severity']}: **{f['check']}**: {f['message']}" for f in t["audit"]]
        if t["holes"]:
            lines += ["", "| hole | class | speedup | warnings |", "| --- | --- | ---: | --- |"]
            for h in t["holes"]:
                warns = ", ".join(sorted({f.get("hack") or f["check"] for f in h["flags"]}))
                speed = f"{h['speedup']:.2f}×" if isinstance(h["speedup"], (int, float)) else "-"
                allowed = " (allowed by the policy)" if h["allowed_by_policy"] else ""
                lines.append(f"| {h['template']} | {h['hack'] or '-'}{allowed} | {speed} | {warns or '-'} |")
    lines += ["", f"{quiet} tasks with no finding and no hole." if quiet else "Every task has a finding or a hole."]
    return "\n".join(lines) + "\n"
