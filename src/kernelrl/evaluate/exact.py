"""An output judged against the exact (float64) result: accurate when it errs about as much as the fp32 reference."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

from kernelrl.evaluate.compare import CHUNK, SERIAL, SMALL, Mismatch, compare

# An output is accurate when each of its two errors against the exact result (the reference program run in float64
# on float64 copies of the same inputs and parameters) is within FACTOR times the fp32 reference's own error plus a
# floor. Calibrated by benchmarks/precision_calibration.py; the measurements and margins are in
# docs/reward_integrity.md ("Strict's calibration").
# Where the reference is ill-conditioned and its own error is the larger term, honest orders measured up to 4.1x it,
# TF32 over 1000x.
FACTOR = 10.0
# Relative L2 error any fp32 program may have where the reference is near exact: 5x the largest honest one measured
# there (exp(x - logsumexp) softmax of logits spread over hundreds, 5.8e-6; a serial fp32 sum of 16384 terms, 2.6e-6),
# a seventh of what rounding to TF32 or fp16 costs (2e-4 and more).
FLOOR_REL_L2 = 3e-5
# Worst element's error / (rms(exact) + |exact|) any fp32 program may have there: twice strict's elementwise fp32
# tolerance (1e-4 of rms + |ref|), 6x the largest honest one measured (Winograd F(4x4, 3x3), 3.2e-5).
FLOOR_MAX_REL = 2e-4


@dataclass(frozen=True)
class Accuracy(Mismatch):
    """How one output's error against the exact result compares with the fp32 reference's own error.

    `rel_l2` is ||out - exact|| / ||exact||; `max_rel` is max |out - exact| / (rms(exact) + |exact|), elementwise (an
    element's error relative to the output's scale, or to the element where it is larger); `max_abs` is
    max |out - exact|; `rms` is rms(exact). The `ref_` fields are the fp32 reference's errors, the `allowed_` fields
    the bounds they set.
    """

    ref_rel_l2: float = 0.0
    ref_max_rel: float = 0.0
    allowed_rel_l2: float = 0.0
    allowed_max_rel: float = 0.0

    @property
    def admits_zeros(self) -> bool:
        """Whether zeros are inside the bounds (their relative L2 error is 1 and every element's under 1): the fp32
        reference is itself so far from the exact result that the test tells no output from another."""
        return self.allowed_rel_l2 >= 1.0 and self.allowed_max_rel >= 1.0

    @property
    def load(self) -> float:
        """Error / allowed error, the larger over both statistics: at most 1 for an accurate output."""
        return max(_ratio(self.rel_l2, self.allowed_rel_l2), _ratio(self.max_rel, self.allowed_max_rel))


def allowed(ref_error: float, floor: float) -> float:
    """The error an output may have where the fp32 reference's is `ref_error` (both in the unit of `floor`)."""
    return FACTOR * ref_error + floor


def against_exact(out: torch.Tensor, ref: torch.Tensor, exact: torch.Tensor) -> Accuracy:
    """Is `out` about as accurate as the fp32 reference `ref`, both judged against `exact` (the float64 result)?"""
    if out.shape != ref.shape or exact.shape != ref.shape:
        return Accuracy(False, f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}", mismatched=1)
    if out.dtype != ref.dtype:
        return Accuracy(False, f"dtype {out.dtype} != expected {ref.dtype}", mismatched=1)
    if not (ref.is_floating_point() or ref.is_complex()):
        m = compare(out, ref)  # integers and bools carry no rounding: they match exactly
        return Accuracy(m.ok, m.reason, mismatched=m.mismatched)
    if ref.is_complex():
        out, ref, exact = (torch.view_as_real(t) if t.is_complex() else t for t in (out, ref, exact))
    flat = tuple(t.detach().reshape(-1) for t in (out, ref, exact))
    s = _norms(flat, out.device)
    if s.differ:
        return Accuracy(False, f"{s.differ} elements differ where the reference is NaN/Inf",
                        math.inf, math.inf, math.inf, s.differ)
    if s.nonfinite:
        return Accuracy(False, f"{s.nonfinite} NaN/Inf values where the exact result is finite",
                        math.inf, math.inf, math.inf, s.nonfinite)
    if s.n == 0:
        return Accuracy(True, "")
    norm = math.sqrt(s.sq_exact)
    unit, rms = (norm, norm / math.sqrt(s.n)) if norm > 0 else (1.0, 1.0)  # all-zero exact: absolute errors
    rel_l2, ref_rel_l2 = math.sqrt(s.sq_out) / unit, math.sqrt(s.sq_ref) / unit
    max_rel, ref_max_rel = _max_rel(flat, rms, out.device)
    bound_l2, bound_max = allowed(ref_rel_l2, FLOOR_REL_L2), allowed(ref_max_rel, FLOOR_MAX_REL)
    fields = dict(max_abs=s.max_abs, max_rel=max_rel, rel_l2=rel_l2, rms=rms, ref_rel_l2=ref_rel_l2,
                  ref_max_rel=ref_max_rel, allowed_rel_l2=bound_l2, allowed_max_rel=bound_max)
    if rel_l2 <= bound_l2 and max_rel <= bound_max:
        return Accuracy(True, "", **fields)
    beyond = _beyond(flat, rms, bound_max, out.device)
    reason = (f"less accurate than the fp32 reference, both against the exact (float64) result: relative L2 error "
              f"{rel_l2:.3g} (reference {ref_rel_l2:.3g}, allowed {bound_l2:.3g}); worst element's error "
              f"{max_rel:.3g} of rms + |exact| (reference {ref_max_rel:.3g}, allowed {bound_max:.3g}), "
              f"{beyond} elements beyond it")
    return Accuracy(False, reason, mismatched=max(beyond, 1), **fields)


# The bound of `certainly_less_accurate` decides only where it exceeds what is allowed by this factor: a case near
# the line is left to the full comparison, whose verdict the bound never contradicts.
BOUND_MARGIN = 2.0


def certainly_less_accurate(out: torch.Tensor, ref: torch.Tensor, rounded: torch.Tensor, sq_exact: float,
                            sq_rounding: float) -> str:
    """Why `out` fails `against_exact`'s relative L2 test whatever the exact result is, told from the exact result
    rounded to float32 (`rounded`, the bytes of an fp32 output), its squared norm before rounding (`sq_exact`) and
    the squared norm of the rounding (`sq_rounding`); '' where that cannot be told, and the full comparison decides.

    By the triangle inequality ||out - exact|| >= ||out - rounded|| - ||rounding|| and ||ref - exact|| <=
    ||ref - rounded|| + ||rounding||. A constant, a stale or a wrong output is that far off; honest programs, and
    outputs off in a few elements only, are never decided here."""
    if out.dtype != torch.float32 or ref.dtype != torch.float32 or rounded.dtype != torch.float32 \
            or not out.shape == ref.shape == rounded.shape:
        return ""
    if not (math.isfinite(sq_exact) and math.isfinite(sq_rounding)) or sq_exact <= 0 or sq_rounding < 0:
        return ""
    s = _norms(tuple(t.detach().reshape(-1) for t in (out, ref, rounded)), out.device)
    if s.differ or s.nonfinite or s.n != out.numel():
        return ""  # NaN/Inf, or an exact value beyond float32: the full comparison's rules apply
    norm, rounding = math.sqrt(sq_exact), math.sqrt(sq_rounding)
    at_least = (math.sqrt(s.sq_out) - rounding) / norm
    ref_at_most = (math.sqrt(s.sq_ref) + rounding) / norm
    bound = allowed(ref_at_most, FLOOR_REL_L2)
    if not at_least > BOUND_MARGIN * bound:
        return ""
    return (f"less accurate than the fp32 reference: relative L2 error at least {at_least:.3g} against the exact "
            f"result (reference at most {ref_at_most:.3g}, allowed {bound:.3g})")


def bound_may_decide(rel_l2_to_ref: float) -> bool:
    """Whether `certainly_less_accurate` can decide an output whose relative L2 distance from the fp32 reference is
    `rel_l2_to_ref`: it decides only beyond BOUND_MARGIN x FLOOR_REL_L2 from the exact result, which an output this
    near the reference never is (half that, for the reference's distance from the exact result), so an honest
    program's near miss goes straight to the full comparison, without a float64 run it would not use."""
    return not rel_l2_to_ref < 0.5 * BOUND_MARGIN * FLOOR_REL_L2


def rounded_exact(exact: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """A float64 exact result as `certainly_less_accurate` reads it: (rounded to float32, its squared norm, the squared
    norm of the rounding)."""
    exact = exact.detach()
    rounded = exact.to(torch.float32)
    s = _norms((rounded.reshape(-1), rounded.reshape(-1), exact.reshape(-1)), exact.device)
    return rounded, s.sq_exact, s.sq_out


@dataclass
class _Norms:
    """One pass over (out, ref, exact): squared norms in float64, the largest error, and what is not finite."""

    n: int = 0
    nonfinite: int = 0  # NaN/Inf in out where the reference and the exact result are finite
    differ: int = 0  # positions where the reference or exact is NaN/Inf and out is not that value
    sq_exact: float = 0.0
    sq_out: float = 0.0
    sq_ref: float = 0.0
    max_abs: float = 0.0


def _norms(flat: tuple[torch.Tensor, ...], device: torch.device) -> _Norms:
    s = _Norms()
    for o, r, e, differ in _pieces(flat, device):
        s.differ += differ
        bad = int((~torch.isfinite(o)).sum())
        s.nonfinite += bad
        if bad or not e.numel():
            continue
        d_out = (o - e).abs_()
        s.n += e.numel()
        s.sq_exact += float(torch.linalg.vector_norm(e)) ** 2
        s.sq_out += float(torch.linalg.vector_norm(d_out)) ** 2
        s.sq_ref += float(torch.linalg.vector_norm(r - e)) ** 2
        s.max_abs = max(s.max_abs, float(d_out.max()))
    return s


def _max_rel(flat: tuple[torch.Tensor, ...], rms: float, device: torch.device) -> tuple[float, float]:
    """max |x - exact| / (rms + |exact|) of out and of ref."""
    worst_out = worst_ref = 0.0
    for o, r, e, _ in _pieces(flat, device):
        if e.numel():
            scale = e.abs().add_(rms)
            worst_out = max(worst_out, float((o - e).abs_().div_(scale).max()))
            worst_ref = max(worst_ref, float((r - e).abs_().div_(scale).max()))
    return worst_out, worst_ref


def _beyond(flat: tuple[torch.Tensor, ...], rms: float, bound: float, device: torch.device) -> int:
    """Elements of out whose |out - exact| / (rms + |exact|) exceeds `bound`."""
    return sum(int(((o - e).abs_() > e.abs().add_(rms).mul_(bound)).sum()) for o, _, e, _ in _pieces(flat, device))


def _pieces(flat: tuple[torch.Tensor, ...], device: torch.device) -> Iterator[tuple]:
    """(out, ref, exact) chunk by chunk in float64 on `device`, without the positions where the reference or the
    exact result is NaN/Inf; with each chunk, how many of those positions out does not reproduce."""
    o, r, e = flat
    step = SERIAL if e.device.type == "cpu" and e.numel() <= SMALL else CHUNK // 2  # float64: CHUNK's bytes
    for i in range(0, e.numel(), step):
        oc, rc, ec = (t[i:i + step].to(device, torch.float64) for t in (o, r, e))
        judged = torch.isfinite(rc) & torch.isfinite(ec)
        if bool(judged.all()):
            yield oc, rc, ec, 0
            continue
        same = (oc == rc) | (oc == ec) | (torch.isnan(oc) & (torch.isnan(rc) | torch.isnan(ec)))
        yield oc[judged], rc[judged], ec[judged], int((~judged & ~same).sum())


def _ratio(x: float, bound: float) -> float:
    return x / bound if bound > 0 else (0.0 if x == 0 else math.inf)
