"""Correctness of one GEMM kernel on one shape: fp64 reference, relative error, guard bands, poison."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

GUARD_ELEMS = 4096  # elements of poison before and after C (8 KiB for 16-bit types keeps C 16-byte aligned)
# ||C - C_ref|| / ||C_ref|| that fp32 accumulation with a 16-bit output allows on random-normal inputs: the
# output rounding alone gives about u/sqrt(3) (2.8e-4 for fp16, 2.3e-3 for bf16); fp16 accumulation over
# K >= 64 gives several times more, so it fails.
REL_ERR_BOUND = {torch.float16: 5e-4, torch.bfloat16: 4e-3}


@dataclass(frozen=True)
class CheckResult:
    """What one checked call did: its error and whether it stayed inside C and wrote all of it."""

    rel_err: float
    guards_intact: bool
    all_written: bool
    bound: float

    @property
    def ok(self) -> bool:
        return self.guards_intact and self.all_written and self.rel_err <= self.bound

    @property
    def reason(self) -> str:
        if not self.guards_intact:
            return "wrote outside C (guard band changed)"
        if not self.all_written:
            return "left part of C unwritten (poison survived)"
        if self.rel_err > self.bound:
            return f"relative error {self.rel_err:.2e} above the bound {self.bound:.1e} (fp16 accumulation?)"
        return "ok"

    def to_dict(self) -> dict:
        return asdict(self)


def random_inputs(m: int, n: int, k: int, dtype=torch.float16, device="cuda", seed: int | None = None):
    """Fresh random-normal A (m x k) and B (k x n)."""
    g = torch.Generator(device=torch.device(device).type)
    g.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
    a = torch.randn(m, k, device=device, dtype=dtype, generator=g)
    b = torch.randn(k, n, device=device, dtype=dtype, generator=g)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A @ B in float64."""
    return a.double() @ b.double()


def rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    """||c - ref|| / ||ref|| in float64."""
    return float(torch.linalg.vector_norm(c.double() - ref) / torch.linalg.vector_norm(ref))


def guarded_output(m: int, n: int, dtype=torch.float16, device="cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, C view): C sits between two guard bands; everything is poisoned with NaN."""
    buf = torch.full((m * n + 2 * GUARD_ELEMS,), float("nan"), dtype=dtype, device=device)
    return buf, buf[GUARD_ELEMS:GUARD_ELEMS + m * n].view(m, n)


def check(fn, a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor) -> CheckResult:
    """Run fn(a, b, c) twice (a first call's path may differ) into poisoned, guard-banded outputs; judge both."""
    m, n = a.shape[0], b.shape[1]
    outs = [guarded_output(m, n, a.dtype, a.device) for _ in range(2)]
    for _, c in outs:
        fn(a, b, c)
    if a.is_cuda:
        torch.cuda.synchronize()
    guards = torch.cat([torch.cat([buf[:GUARD_ELEMS], buf[GUARD_ELEMS + m * n:]]) for buf, _ in outs])
    errs = [rel_err(c, ref) if bool(torch.isfinite(c).all()) else float("inf") for _, c in outs]
    return CheckResult(
        rel_err=max(errs),
        guards_intact=bool(torch.isnan(guards).all()),
        all_written=not any(bool(torch.isnan(c).any()) for _, c in outs),
        bound=REL_ERR_BOUND[a.dtype],
    )
