"""The task audit: the reference run on several seeds and input scales (in a probe worker), and what a trivial program
would get from the evaluator's comparison: the same output whatever the input, an input handed back, zeros within the
tolerance, another draw's output within the tolerance, an input the output ignores.

`facts` compares one draw's outputs with the first draw's (in the probe worker, where the outputs are: a gigabyte
output never moves); `findings` decides from the facts (pure); `audit_task` draws them.
"""
from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Callable

import torch

from kernelrl.evaluate.compare import compare
from kernelrl.evaluate.exact import against_exact
from kernelrl.task import Task

if TYPE_CHECKING:
    from kernelrl.redteam.probe import Profile, ProbeWorker

# Draws beyond the first, as (scale, the policies whose trials draw inputs like it): the evaluator's strict trials
# rescale float inputs 1.5-2x up and down (`harness.RESCALED`; 0.5 and 2 are the edges); its kernelbench trials use
# the task's own inputs only.
DRAWS = ((1.0, ("strict", "kernelbench")), (1.0, ("strict", "kernelbench")), (0.5, ("strict",)), (2.0, ("strict",)))
SEVERITIES = ("flag", "note")  # flag: a trivial program solves the task; note: worth knowing, not trivial
# Other draws of the reference's weights (its init seed; each run of the evaluator draws them anew) on which the audit
# asks again what a trivial program gets: a clamp that every value reaches under some weights (KernelBench's level2/58:
# 71 of 200, `benchmarks/weight_draws.py`) is solved by a constant in those runs, and a residual add of a weighted term
# that is under the tolerance in some (level2/51 under kernelbench) by the input handed back.
WEIGHT_DRAWS = 4
# The audit's checks, numbered: raised whenever a check is added or changed, so that a journal's audits made by an
# older one can be told apart and done again (`kernelrl redteam --resume --reaudit`). 1: records without the field;
# 2: `input_passes`, and every check asked again under the other weight draws (strict's first on the exact result).
VERSION = 2


def stale(record: dict) -> bool:
    """Whether a journalled audit record was made by an older audit than this one."""
    return record.get("audit_version", 1) < VERSION


@dataclass(frozen=True)
class Finding:
    """One thing the audit found about a task."""

    check: str      # input_independent, stored_output_passes, output_is_input, input_passes, zeros_pass,
                    # input_ignored, input_negligible, reference_fails, weights_fail
    message: str
    severity: str = "flag"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        return cls(**d)


@dataclass(frozen=True)
class Facts:
    """How one draw's outputs relate to the first draw's (`base`), under the policy's comparison."""

    equal: bool          # the same outputs, element for element
    passes: bool         # the base outputs pass as this draw's
    rel_l2: float        # ...with this worst relative L2 error
    zeros: bool          # zeros pass as this draw's outputs
    biggest: float       # the largest |output| of this draw
    inputs: tuple = ()   # per output, the inputs it equals (inputs the call left as drawn)
    passing: tuple = ()  # per output, the inputs that pass as it under the policy's comparison (likewise)
    scale: float = 1.0   # the scale of its float inputs
    judged: bool = True  # whether the policy's trials draw inputs like this one

    @classmethod
    def from_dict(cls, d: dict) -> "Facts":
        return cls(**dict(d, inputs=tuple(tuple(js) for js in d.get("inputs", ())),
                          passing=tuple(tuple(js) for js in d.get("passing", ()))))


def facts(base: list, outs: list, policy: str, atol: float | None = None, rtol: float | None = None,
          inputs=(), exact: Callable[[], list | None] | None = None, passing=()) -> Facts:
    """Compare one draw's outputs with the first draw's (`base`), and with zeros, as the evaluator compares outputs.
    `exact` (strict): the draw's exact (float64) outputs, or None where they cannot be had, asked for only where zeros
    or `base` miss the tolerance; strict's trials judge such an output again against the exact result, and so does
    this (an output that is rounding alone, the mean of a group-normalised tensor, passes there)."""
    passes, err = _passes(base, outs, policy, atol, rtol)
    zero_outs = [torch.zeros_like(o) for o in outs]
    zeros, _ = _passes(zero_outs, outs, policy, atol, rtol)
    if exact is not None and not (passes and zeros):
        xs = exact()
        if xs is not None:
            passes = passes or _accurate(base, outs, xs)
            zeros = zeros or _accurate(zero_outs, outs, xs)
    biggest = max((float(o.abs().max()) for o in outs if o.numel() and o.dtype != torch.bool), default=0.0)
    return Facts(_equal(base, outs), passes, err, zeros, biggest, tuple(tuple(js) for js in inputs),
                 tuple(tuple(js) for js in passing))


def passes_as(out: list, ref: list, policy: str, atol=None, rtol=None) -> bool:
    """Whether `out` passes for `ref` by the policy's elementwise comparison (strict's second look, against the exact
    result, left out: what passes here passes the trials)."""
    return _passes(out, ref, policy, atol, rtol)[0]


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y.to(x.device))
                                    for x, y in zip(a, b))


def _passes(out: list, ref: list, policy: str, atol, rtol) -> tuple[bool, float]:
    """Whether `out` passes for `ref` by the evaluator's elementwise comparison, and its worst relative L2 error."""
    if len(out) != len(ref):
        return False, float("inf")
    ms = [compare(o.to(r.device), r, atol, rtol, policy) for o, r in zip(out, ref)]
    return all(m.ok for m in ms), max((m.rel_l2 for m in ms), default=0.0)


def _accurate(made: list, ref: list, exact: list) -> bool:
    """Whether `made` is as accurate as the reference's outputs `ref`, both against `exact` (`exact.against_exact`)."""
    return len(made) == len(ref) == len(exact) and all(
        against_exact(m.to(r.device), r, x.to(r.device)).ok for m, r, x in zip(made, ref, exact))


def findings(first: Facts, draws: list[Facts], varied: dict[int, Facts], policy: str) -> list[Finding]:
    """What a trivial program gets: `first` is the first draw against itself, `draws` the other seeds and scales,
    `varied` input index -> the draw with that input alone drawn again (inputs a new draw leaves as they were are
    left out)."""
    # A trivial program is judged on the draws the policy's trials make: under kernelbench the task's own inputs
    # only (an input handed back solves HardTanh on get_inputs' [0, 1) though it fails on inputs scaled by 2)
    found = []
    judged = [first] + [d for d in draws if d.judged]
    scales = sorted({d.scale for d in judged})
    where = f"{len(judged)} draws, input scales {', '.join(f'{s:g}' for s in scales)}"
    if all(d.equal for d in judged[1:]):
        found.append(Finding("input_independent", f"the output is the same for every input ({where}): a program "
                                                  "that returns a constant solves the task"))
        varied = {}  # no input matters: saying so of each one adds nothing
    elif len(judged) > 1 and all(d.passes for d in judged[1:]):
        worst = max(d.rel_l2 for d in judged[1:])
        found.append(Finding("stored_output_passes", f"one draw's output passes as every other's under {policy} "
                                                     f"(relative L2 error up to {worst:.3g}): a program that returns "
                                                     "a stored output solves the task"))
    handed_back = _on_every(judged, "inputs")
    if handed_back:
        pairs = ", ".join(f"output {k} is input {js[0]}" for k, js in enumerate(handed_back))
        found.append(Finding("output_is_input", f"{pairs} on every draw ({where}): a program that hands its input back "
                                                "solves the task"))
    elif passing := _on_every(judged, "passing"):
        pairs = ", ".join(f"input {js[0]} passes as output {k}" for k, js in enumerate(passing))
        found.append(Finding("input_passes", f"{pairs} under {policy} on every draw ({where}): a program that hands "
                                             "its input back solves the task"))
    if all(d.zeros for d in judged):
        found.append(Finding("zeros_pass", f"zeros pass under {policy}: the largest |output| is "
                                           f"{max(d.biggest for d in judged):.3g}"))
    for j, d in sorted(varied.items()):
        if d.equal:
            found.append(Finding("input_ignored", f"the output does not depend on input {j}: drawing it again "
                                                  "leaves every output element as it was", "note"))
        elif d.passes:
            found.append(Finding("input_negligible", f"drawing input {j} again changes the output by less than "
                                                     f"{policy}'s tolerance: a program may ignore it", "note"))
    return found


def _on_every(judged: list[Facts], field: str) -> list[list[int]]:
    """Per output, the inputs that relate to it (`Facts.inputs` or `Facts.passing`) on every judged draw; [] unless
    every output has one."""
    per = [sorted(set.intersection(*(set(getattr(d, field)[k]) if k < len(getattr(d, field)) else set()
                                     for d in judged)))
           for k in range(len(getattr(judged[0], field)))]
    return per if per and all(per) else []


def audit_task(task: Task, probe: "ProbeWorker", policy: str,
               weight_seeds: list[int] | None = None) -> tuple["Profile", list[Finding]]:
    """The task's profile (inputs and outputs) and its findings, from draws of its reference in `probe`'s worker;
    then, where nothing flags it, what a trivial program gets asked again under other draws of its weights
    (`weight_seeds`, default `WEIGHT_DRAWS` secret ones)."""
    seeds = [secrets.randbits(62) for _ in range(len(DRAWS) + 1)]
    rule = {"policy": policy, "atol": task.meta.atol, "rtol": task.meta.rtol}
    header = probe.draw(seeds[0], rule=rule, base=True)
    profile = probe.profile(header)
    first = Facts.from_dict(header["facts"])
    draws = [replace(Facts.from_dict(probe.draw(seed, scale, rule=rule)["facts"]), scale=scale,
                     judged=policy in judged_by) for seed, (scale, judged_by) in zip(seeds[1:], DRAWS)]
    varied = {}
    for j, spec in enumerate(profile.inputs):
        if spec.tensor and spec.numel > 0:
            h = probe.draw(seeds[0], vary=(j, seeds[1]), rule=rule)
            if h.get("varied"):
                varied[j] = Facts.from_dict(h["facts"])
    found = findings(first, draws, varied, policy)
    if not any(f.severity == "flag" for f in found):  # a task already flagged needs no more reasons
        weight_seeds = [secrets.randbits(31) for _ in range(WEIGHT_DRAWS)] if weight_seeds is None else weight_seeds
        found += _trivial_under_weights(probe, policy, rule, weight_seeds)
    return profile, found


def _trivial_under_weights(probe: "ProbeWorker", policy: str, rule: dict, weight_seeds: list[int]) -> list[Finding]:
    """Findings that flag the task under some of `weight_seeds`: each draw of the weights is audited as the task's own
    draw is (`findings`, on the draws the policy's trials make), and a check that flags it under any of them is one
    finding, saying under how many."""
    from kernelrl.redteam.probe import ProbeError

    judged = [scale for scale, judged_by in DRAWS if policy in judged_by]
    hits: dict[str, list[Finding]] = {}
    for w in weight_seeds:
        try:
            probe.weights(w)
            seeds = [secrets.randbits(62) for _ in range(len(judged) + 1)]
            # Under strict, where the trials judge an output again against the exact (float64) result, the first
            # draw's exact result screens the weights: where zeros are as accurate as the reference there (its fp32
            # output is itself far from the exact one: a chaotic reference, KernelBench's level3/24 under some
            # weights), the other draws ask for it too; elsewhere they ask for equality and the plain comparison.
            first = Facts.from_dict(probe.draw(seeds[0], rule=rule, base=True,
                                               equal_only=policy != "strict")["facts"])
            exact = policy == "strict" and first.zeros
            draws = []
            for seed, scale in zip(seeds[1:], judged):
                d = replace(Facts.from_dict(probe.draw(seed, scale, rule=rule, equal_only=not exact)["facts"]),
                            scale=scale)
                draws.append(d)
                if not (d.equal or d.passes or d.zeros or any(d.inputs) or any(d.passing)):
                    break  # every check asks for its property on every draw: none can flag under these weights
        except ProbeError as e:  # the reference does not build or run under these weights: no more is asked
            return [Finding("weights_fail", f"the reference could not be run under another draw of its weights: {e}",
                            "note")]
        for f in findings(first, draws, {}, policy):
            if f.severity == "flag":
                hits.setdefault(f.check, []).append(f)
    return [Finding(check, f"under {len(found)} of {len(weight_seeds)} other draws of the task's weights (drawn anew "
                           f"each run): {found[0].message} in such runs")
            for check, found in hits.items()]
