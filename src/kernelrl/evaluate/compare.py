"""Pure decisions about outputs: tolerances by dtype, and whether an output matches its reference."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# (atol, rtol). atol is relative to the RMS of the reference output, so a constant or zero output never
# passes on an output of magnitude ~1, and tolerances are tight enough to see TF32 or fp16 accumulation.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def tolerance(dtype: torch.dtype, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """(atol, rtol) for outputs of `dtype`, task overrides first; integers and bools must match exactly."""
    a, r = TOLERANCES.get(dtype, (0.0, 0.0))
    return (a if atol is None else atol), (r if rtol is None else rtol)


@dataclass(frozen=True)
class Mismatch:
    """How one output compares with its reference."""

    ok: bool
    reason: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    rel_l2: float = 0.0
    mismatched: int = 0


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float | None = None,
            rtol: float | None = None) -> Mismatch:
    """Does `out` match `ref` elementwise within |d| <= atol * rms(ref) + rtol * |ref| (no NaN/Inf)?"""
    if out.shape != ref.shape:
        return Mismatch(False, f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Mismatch(False, f"dtype {out.dtype} != expected {ref.dtype}")
    a, r = tolerance(ref.dtype, atol, rtol)
    if not (ref.is_floating_point() or ref.is_complex()):
        bad = int((out != ref).sum())
        return Mismatch(bad == 0, "" if bad == 0 else f"{bad} of {ref.numel()} elements differ",
                        mismatched=bad)
    o, e = out.to(torch.float64), ref.to(torch.float64)
    finite_ref = torch.isfinite(e)
    same_nonfinite = (~finite_ref) & ((o == e) | (torch.isnan(o) & torch.isnan(e)))
    if bool((~torch.isfinite(o) & finite_ref).any()):
        n = int((~torch.isfinite(o) & finite_ref).sum())
        return Mismatch(False, f"{n} NaN/Inf values where the reference is finite", math.inf, math.inf, math.inf, n)
    if bool((~finite_ref & ~same_nonfinite).any()):
        n = int((~finite_ref & ~same_nonfinite).sum())
        return Mismatch(False, f"{n} elements differ where the reference is NaN/Inf", math.inf, math.inf, math.inf, n)
    o, e = torch.where(finite_ref, o, 0.0), torch.where(finite_ref, e, 0.0)
    diff = (o - e).abs()
    scale = float(e.pow(2).mean().sqrt()) if e.numel() else 0.0
    scale = scale if scale > 0 else 1.0
    bound = a * scale + r * e.abs()
    bad = int((diff > bound).sum())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / (e.abs() + a * scale)).max()) if diff.numel() else 0.0
    norm = float(e.norm())
    rel_l2 = float(diff.norm()) / norm if norm > 0 else float(diff.norm())
    reason = "" if bad == 0 else (f"{bad} of {e.numel()} elements outside tolerance "
                                  f"(atol {a:g}×rms, rtol {r:g}); max abs error {max_abs:.3g}, "
                                  f"relative L2 error {rel_l2:.3g}")
    return Mismatch(bad == 0, reason, max_abs, max_rel, rel_l2, bad)


def compare_samples(out: torch.Tensor, ref: torch.Tensor, ref_scale: float, atol: float, rtol: float) -> bool:
    """Do sampled output elements (float64) match the reference's samples at the same positions?"""
    if out.shape != ref.shape:
        return False
    if not bool(torch.isfinite(out).eq(torch.isfinite(ref)).all()):
        return False
    fin = torch.isfinite(ref)
    diff = (out[fin] - ref[fin]).abs()
    return bool((diff <= atol * ref_scale + rtol * ref[fin].abs()).all())


def rms(t: torch.Tensor) -> float:
    """Root mean square of the finite elements of `t` (1.0 when there are none or all are zero)."""
    t = t.to(torch.float64)
    t = t[torch.isfinite(t)]
    v = float(t.pow(2).mean().sqrt()) if t.numel() else 0.0
    return v if v > 0 else 1.0
