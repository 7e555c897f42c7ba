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


# The kernelbench policy is KernelBench's own rule, torch.allclose(out, ref, atol=1e-2, rtol=1e-2): an absolute atol,
# every element within it. Outputs that pass only by that absolute slack (an output smaller than atol, so zeros
# pass; or a relative error above 1e-2) are flagged (`absolute_slack`), not refused.
KERNELBENCH_TOLERANCE = 1e-2
CHUNK = 1 << 26  # elements compared at a time: a gigabyte output needs no gigabytes of temporaries
# Host tensors up to SMALL elements (sampled outputs, small CPU outputs) are compared SERIAL elements at a time:
# torch runs an op on at most its grain size (32768) on the calling thread, with no intra-op thread pool. A pool
# of as many threads as cores, woken for each op while worker processes and builds hold those cores, made a
# 65536-element comparison take 0.1 s in the evaluator process on a GPU machine, four times a verdict.
SERIAL = 1 << 15
SMALL = 1 << 22
# Rounding outliers: where an output is a small difference of large intermediates (x + 0.5 for x near -0.5), one
# rounding step of an intermediate exceeds a tolerance scaled by the output, and two honest programs (the same
# one, on another convolution algorithm) differ there. Up to one in a million elements (at least one) may exceed
# the tolerance, each by at most OUTLIER_FACTOR, with the relative L2 error within rtol: nothing a program could
# skip or approximate fits in that, and any real fault (an index, a race, a shortcut) is far beyond it.
OUTLIER_SHARE = 1e-6
OUTLIER_FACTOR = 10.0


def outliers_allowed(n: int) -> int:
    """How many of `n` compared elements may be rounding outliers (`OUTLIER_SHARE`, at least one)."""
    return max(1, math.ceil(n * OUTLIER_SHARE)) if n else 0


def _rounding_only(bad: int, far: int, n: int) -> bool:
    """Whether `bad` of `n` elements outside the tolerance, `far` of them beyond OUTLIER_FACTOR times it, pass."""
    return bad == 0 or (far == 0 and bad <= outliers_allowed(n))


def tolerance(dtype: torch.dtype, atol: float | None = None, rtol: float | None = None,
              policy: str = "strict") -> tuple[float, float]:
    """(atol, rtol) for outputs of `dtype` under `policy`, task overrides first; integers and bools match exactly."""
    a, r = TOLERANCES.get(dtype, (0.0, 0.0))
    if policy == "kernelbench" and dtype in TOLERANCES:
        a, r = KERNELBENCH_TOLERANCE, KERNELBENCH_TOLERANCE
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
    rms: float = 0.0      # root mean square of the reference output (what a relative atol scales by)


def absolute_slack(absolute: Mismatch, relative: Mismatch, atol: float) -> str:
    """Why an output passed KernelBench's rule (`absolute`, its allclose) only by its absolute atol: it fails the same
    tolerances with atol relative to the output's RMS (`relative`). '' where it passes both, or fails the first."""
    if not absolute.ok or relative.ok:
        return ""
    small = f"; the reference output's RMS {absolute.rms:.3g} is under atol {atol:g}, so zeros pass" \
        if absolute.rms < atol else ""
    return f"relative L2 error {absolute.rel_l2:.3g}{small}"


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float | None = None,
            rtol: float | None = None, policy: str = "strict") -> Mismatch:
    """Does `out` match `ref` elementwise within |d| <= atol * rms(ref) + rtol * |ref| (no NaN/Inf)? Under the
    kernelbench policy, KernelBench's torch.allclose rule: |d| <= atol + rtol * |ref| for every element."""
    if out.shape != ref.shape:
        return Mismatch(False, f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Mismatch(False, f"dtype {out.dtype} != expected {ref.dtype}")
    a, r = tolerance(ref.dtype, atol, rtol, policy)
    if not (ref.is_floating_point() or ref.is_complex()):
        bad = int((out != ref).sum())
        return Mismatch(bad == 0, "" if bad == 0 else f"{bad} of {ref.numel()} elements differ",
                        mismatched=bad)
    # fp32 arithmetic is exact enough here (its rounding is ~1e-7, tolerances are >= 1e-4); fp64 stays fp64.
    work = torch.float64 if ref.dtype in (torch.float64, torch.complex128) else torch.float32
    if ref.is_complex():
        out, ref = torch.view_as_real(out), torch.view_as_real(ref)
    o, e = out.to(work), ref.to(work)
    absolute = policy == "kernelbench"
    stats = _finite_stats(o, e, a, r, absolute)
    if stats is not None:
        return _judged(*stats, a, r, absolute)
    if not _all_finite(e):
        return _compare_nonfinite(o, e, a, r, absolute)
    n = int((~torch.isfinite(o)).sum())
    return Mismatch(False, f"{n} NaN/Inf values where the reference is finite", math.inf, math.inf, math.inf, n)


def chunk_for(t: torch.Tensor) -> int:
    """Elements an op of a comparison takes at a time: SERIAL for small host tensors, else CHUNK."""
    return SERIAL if t.device.type == "cpu" and t.numel() <= SMALL else CHUNK


def _all_finite(t: torch.Tensor) -> bool:
    flat, chunk = t.reshape(-1), chunk_for(t)
    return all(bool(torch.isfinite(flat[i:i + chunk]).all()) for i in range(0, flat.numel(), chunk))


def _finite_stats(o: torch.Tensor, e: torch.Tensor, a: float, r: float, absolute: bool) -> tuple | None:
    """One pass of `_compare_finite`'s sums, counts and maxima over finite `o` and `e` (flat, the same size), read
    back from the device at once rather than a few times a chunk: every read waits for the device (`trials._read`).
    None where either holds a NaN or an Inf.
    (n, reference norm, elements outside the tolerance, of them beyond OUTLIER_FACTOR times it, max abs error,
    error norm, max relative error) otherwise."""
    n, chunk = e.numel(), chunk_for(e)
    if n == 0:
        return 0, 0.0, 0, 0, 0.0, 0.0, 0.0
    o, e = o.reshape(-1), e.reshape(-1)
    parts = [(o[i:i + chunk], e[i:i + chunk]) for i in range(0, n, chunk)]
    f64 = dict(dtype=torch.float64)
    finite = torch.stack([torch.isfinite(c).all() for pair in parts for c in pair]).all()
    sq_e = sum(torch.linalg.vector_norm(ec, **f64).square() for _, ec in parts)
    # the tolerance's scale: the reference's RMS, 1 where that is 0 (or under KernelBench's absolute atol)
    scale = torch.ones((), **f64, device=e.device) if absolute else \
        torch.where(sq_e > 0, sq_e.sqrt() / math.sqrt(n), torch.ones_like(sq_e))
    ats = (a * scale).to(e.dtype)  # as `abs_e * r + a * scale` rounds it, with scale a Python float
    bad = far = sq_d = 0
    max_abs = max_rel = torch.zeros((), dtype=e.dtype, device=e.device)
    for oc, ec in parts:
        diff = (oc - ec).abs_()
        abs_e = ec.abs()
        tol = abs_e * r + ats
        bad = bad + (diff > tol).sum()
        far = far + (diff > tol.mul_(OUTLIER_FACTOR)).sum()
        del tol
        max_abs = torch.maximum(max_abs, diff.max())
        sq_d = sq_d + torch.linalg.vector_norm(diff, **f64).square()
        max_rel = torch.maximum(max_rel, diff.div_(abs_e.add_(ats if a > 0 else 1e-30)).max())
        del diff, abs_e
    got = torch.stack([finite.to(torch.float64), sq_e, torch.as_tensor(bad).to(torch.float64),
                       torch.as_tensor(far).to(torch.float64), max_abs.to(torch.float64), sq_d,
                       max_rel.to(torch.float64)]).tolist()
    if not got[0]:
        return None
    return n, math.sqrt(got[1]), int(got[2]), int(got[3]), got[4], math.sqrt(got[5]), got[6]


def _compare_finite(o: torch.Tensor, e: torch.Tensor, a: float, r: float, absolute: bool = False) -> Mismatch:
    """`o` against `e`, both finite (`_finite_stats`, `_judged`)."""
    return _judged(*_finite_stats(o, e, a, r, absolute), a, r, absolute)


def _judged(n: int, norm_e: float, bad: int, far: int, max_abs: float, norm_d: float, max_rel: float,
            a: float, r: float, absolute: bool) -> Mismatch:
    """The Mismatch of a comparison's statistics (`_finite_stats`)."""
    if n == 0:
        return Mismatch(True, "")
    ref_rms = norm_e / math.sqrt(n)
    rel_l2 = norm_d / norm_e if norm_e > 0 else norm_d
    ok = bad == 0 if absolute else _rounding_only(bad, far, n) and (bad == 0 or rel_l2 <= r)
    reason = "" if ok else (f"{bad} of {n} elements outside tolerance "
                            f"(atol {a:g}{'' if absolute else '×rms'}, rtol {r:g}); max abs error {max_abs:.3g}, "
                            f"relative L2 error {rel_l2:.3g}")
    return Mismatch(ok, reason, max_abs, max_rel, rel_l2, 0 if ok else bad, ref_rms)


def _compare_nonfinite(o: torch.Tensor, e: torch.Tensor, a: float, r: float, absolute: bool = False) -> Mismatch:
    finite = torch.isfinite(e)
    same = (o == e) | (torch.isnan(o) & torch.isnan(e))
    n = int((~finite & ~same).sum())
    if n:
        return Mismatch(False, f"{n} elements differ where the reference is NaN/Inf", math.inf, math.inf, math.inf, n)
    o_f, e_f = o[finite], e[finite]
    if not bool(torch.isfinite(o_f).all()):
        n = int((~torch.isfinite(o_f)).sum())
        return Mismatch(False, f"{n} NaN/Inf values where the reference is finite", math.inf, math.inf, math.inf, n)
    return _compare_finite(o_f, e_f, a, r, absolute)


def compare_samples(out: torch.Tensor, ref: torch.Tensor, ref_scale: float, atol: float, rtol: float) -> bool:
    """Do sampled output elements (float64) of a timed call match the reference's samples at the same positions?

    These checks catch work cached, replayed, deferred or skipped (errors of the output's own size), not precision,
    which the correctness trials judge: the samples' error must be within the tolerance on average (root mean
    square of error / tolerance at most 1) and nowhere beyond OUTLIER_FACTOR times it. An element-by-element rule
    would refuse, sooner or later over hundreds of calls, an honest program whose rounding differs from the
    reference's beyond the tolerance at a few positions in a million."""
    if out.shape != ref.shape:
        return False
    if not bool(torch.isfinite(out).eq(torch.isfinite(ref)).all()):
        return False
    fin = torch.isfinite(ref)
    if not bool(fin.any()):
        return bool(torch.equal(out[~fin].isnan(), ref[~fin].isnan()))
    diff = (out[fin] - ref[fin]).abs()
    tol = (atol * ref_scale + rtol * ref[fin].abs()).clamp_(min=1e-300)
    ratio = diff / tol
    return float(ratio.max()) <= OUTLIER_FACTOR and float(ratio.pow(2).mean().sqrt()) <= 1.0


def rms(t: torch.Tensor, chunk: int = 1 << 26) -> float:
    """Root mean square of the finite elements of `t` (1.0 when there are none or all are zero); in float64,
    `chunk` elements at a time (a gigabyte output needs no gigabytes more)."""
    return rms_of(*squares(t, chunk).tolist())


def squares(t: torch.Tensor, chunk: int = 1 << 26) -> torch.Tensor:
    """The sum of squares of the finite elements of `t` and their count, as two float64 values on its device (read
    back with others at once: `rms_of`)."""
    flat = t.detach().reshape(-1)
    total = count = torch.zeros((), dtype=torch.float64, device=t.device)
    for i in range(0, flat.numel(), chunk):
        c = flat[i:i + chunk].to(torch.float64)
        finite = torch.isfinite(c)
        total = total + torch.where(finite, c, 0.0).pow(2).sum()
        count = count + finite.sum()
    return torch.stack([total, count])


def rms_of(total: float, count: float) -> float:
    """`rms` from `squares`."""
    v = math.sqrt(total / count) if count else 0.0
    return v if v > 0 else 1.0
