"""Strict's calibration: the error against the exact (float64) result of honest fp32 programs and of TF32, bf16 and
fp16 ones, beside the fp32 reference's own error, on small but realistic workloads.

Usage: python benchmarks/precision_calibration.py --device cpu --out benchmarks/results/precision_calibration_cpu
       python benchmarks/precision_calibration.py --device cuda --out benchmarks/results/precision_calibration_h100
Writes OUT/results.json.gz (every run's statistics and verdict) and OUT/README.md (the summary that
docs/reward_integrity.md quotes). Each workload runs for every seed and both input scales; the exact result is the
reference program on float64 copies of the same inputs and parameters. On CUDA the reference and the honest
variants run with TF32 off, and TF32 is measured twice: emulated (operands rounded to a 10-bit mantissa) and real
(torch.backends flags on).
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from kernelrl.evaluate import exact

SCALES = (1.0, 100.0)
OFFSET_IN = 16.0  # the ill-conditioned matmul and convolution: inputs around 16, weights that sum to zero
OFFSET = 100.0  # the ill-conditioned sum adds and removes it: fp32 keeps ~7 digits of x + 100, 2-3 digits of the sum
Program = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Workload:
    """A reference program, the inputs it takes, and programs that compute the same thing another way: honest fp32
    ones (which strict must accept), reduced-precision ones (which it must refuse) and others, only reported."""

    name: str
    family: str
    shape: str
    inputs: Callable[[torch.Generator, float], list[torch.Tensor]]  # float32, on the CPU
    program: Program
    honest: dict[str, Program]
    reduced: dict[str, Program]
    other: dict[str, Program] = field(default_factory=dict)
    limit: str = ""  # why reduced precision can stay within the reference's own error here, where it can


@dataclass(frozen=True)
class Run:
    """One variant's errors against the exact result in one (seed, scale) draw, beside the reference's."""

    workload: str
    family: str
    variant: str
    kind: str  # "honest", "reduced" or "other"
    seed: int
    scale: float
    rel_l2: float
    max_rel: float  # max |out - exact| / (rms(exact) + |exact|)
    ref_rel_l2: float
    ref_max_rel: float
    load: float  # error / allowed under exact's rule, the larger statistic: <= 1 is accurate
    ok: bool


# ---- rounding and precision switches -------------------------------------------------------------------------

def tf32(t: torch.Tensor) -> torch.Tensor:
    """`t` (float32) rounded to TF32's 10-bit mantissa, to nearest, ties to even."""
    i = t.contiguous().view(torch.int32)
    return ((i + 0x0FFF + ((i >> 13) & 1)) & ~0x1FFF).view(torch.float32)


@contextlib.contextmanager
def tf32_math():
    """cuBLAS and cuDNN allowed TF32 tensor cores for float32 matmul and convolution."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def reduced_precision(program: Program, operands: int = 0) -> dict[str, Program]:
    """bf16 and fp16 versions of `program` (computing in, or only loading, the low precision); with `operands`,
    TF32 on its first `operands` inputs, emulated and (on CUDA) real."""
    def cast(dt, back=False):
        return lambda *xs: program(*(x.to(dt).float() if back else x.to(dt) for x in xs)).float()

    variants = {"bf16 compute": cast(torch.bfloat16), "fp16 compute": cast(torch.float16),
                "bf16 inputs, fp32 math": cast(torch.bfloat16, True),
                "fp16 inputs, fp32 math": cast(torch.float16, True)}
    if operands:
        variants["TF32 (emulated)"] = lambda *xs: program(*(tf32(x) if i < operands else x for i, x in enumerate(xs)))
        variants["TF32 (cuBLAS/cuDNN flags)"] = _with_tf32(program)
    return variants


def _with_tf32(program: Program) -> Program:
    def run(*xs):
        with tf32_math():
            return program(*xs)
    return run


# ---- matmul --------------------------------------------------------------------------------------------------

def matmul_inputs(m: int, k: int, n: int, kind: str):
    """Normal operands; "uniform": both in [0, 1); "offset": a's rows offset by OFFSET_IN, b's columns centred, so
    that every output is a small difference of large products."""
    def inputs(g, s):
        if kind == "uniform":
            return [torch.rand(m, k, generator=g) * s, torch.rand(k, n, generator=g)]
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        if kind == "offset":
            a, b = a + OFFSET_IN, b - b.mean(0, keepdim=True)
        return [a * s, b]
    return inputs


def split_k(a, b, parts=8):
    """a @ b as `parts` partial products over slices of K, summed at the end (split-K)."""
    m, k = a.shape
    return torch.bmm(a.view(m, parts, k // parts).transpose(0, 1), b.view(parts, k // parts, -1)).sum(0)


def k_tiles(a, b, tile=64, kahan=False):
    """a @ b one K tile at a time, each tile's product added to the running result (Kahan-compensated or not)."""
    c, comp = a.new_zeros(a.shape[0], b.shape[1]), a.new_zeros(a.shape[0], b.shape[1])
    for k in range(0, a.shape[1], tile):
        p = a[:, k:k + tile] @ b[k:k + tile]
        if kahan:
            p = p - comp
            t = c + p
            comp, c = (t - c) - p, t
        else:
            c = c + p
    return c


def rank_one_updates(a, b):
    """a @ b as K rank-1 updates, one k at a time: the order of a naive kernel's inner loop."""
    c = a.new_zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        c.addr_(a[:, k], b[k])
    return c


def matmul(name: str, m: int, k: int, n: int, kind: str = "normal") -> Workload:
    """torch.matmul with its honest reorderings and its TF32, bf16 and fp16 versions."""
    program = torch.matmul
    honest = {"split-K ×8, partials summed": split_k, "K tiles of 64, accumulated in order": k_tiles,
              "K tiles of 64, Kahan-accumulated": lambda a, b: k_tiles(a, b, kahan=True),
              "one rank-1 update per k (naive kernel)": rank_one_updates,
              "K reversed": lambda a, b: a.flip(1) @ b.flip(0), "transposed product": lambda a, b: (b.t() @ a.t()).t(),
              "fp64 accumulation": lambda a, b: (a.double() @ b.double()).float()}
    limit = ("inputs in [0, 1) (KernelBench's torch.rand): the rounding errors of TF32 or fp16 operands have no "
             "common sign and average out over K, to about 1e-5 at K = 1024 while the result grows as K: within the "
             "floor, as within today's elementwise tolerance") if kind == "uniform" else ""
    shape = f"{m}x{k} @ {k}x{n}" + {"normal": "", "uniform": ", inputs in [0, 1)",
                                     "offset": f", a + {OFFSET_IN:g} @ centred b"}[kind]
    return Workload(name, "matmul", shape, matmul_inputs(m, k, n, kind), program, honest,
                    reduced_precision(program, operands=2), limit=limit)


# ---- conv2d --------------------------------------------------------------------------------------------------

def conv(x, w):
    """The reference: a 3x3 convolution, padding 1."""
    return F.conv2d(x, w, padding=1)


def conv_unfold(x, w):
    """im2col: the 3x3 patches unfolded into columns, then one matmul."""
    n, c, h, wd = x.shape
    cols = F.unfold(x, 3, padding=1)  # (n, c*9, h*w)
    return (w.view(w.shape[0], -1) @ cols).view(n, w.shape[0], h, wd)


def conv_fft(x, w):
    """Cross-correlation through float32 FFTs of the padded input and the filters."""
    h, wd = x.shape[-2:]
    size = (h + 2, wd + 2)
    xf = torch.fft.rfft2(F.pad(x, (1, 1, 1, 1)), s=size)
    wf = torch.fft.rfft2(w, s=size)
    y = torch.fft.irfft2(torch.einsum("ncuv,ocuv->nouv", xf, wf.conj()), s=size)
    return y[..., :h, :wd].contiguous()


def conv_taps(x, w):
    """Nine shifted 1x1 convolutions, accumulated from the last tap to the first."""
    h, wd = x.shape[-2:]
    xp, y = F.pad(x, (1, 1, 1, 1)), None
    for p in reversed(range(3)):
        for q in reversed(range(3)):
            t = torch.einsum("nchw,oc->nohw", xp[..., p:p + h, q:q + wd], w[:, :, p, q])
            y = t if y is None else y + t
    return y


# Lavin & Gray's Winograd transforms for 3x3 filters, F(2x2, 3x3) and F(4x4, 3x3): the tile sizes fast convolution
# libraries use for fp32 (the larger tile saves more multiplies and loses more digits).
WINOGRAD = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0],
         [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
         [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def conv_winograd(x, w, m=2):
    """Winograd F(mxm, 3x3): input tiles and filters transformed, multiplied elementwise, transformed back."""
    bt, g, at = (torch.tensor(t, dtype=x.dtype, device=x.device) for t in WINOGRAD[m])
    n, c, h, wd = x.shape
    tiles = F.pad(x, (1, 1, 1, 1)).unfold(2, m + 2, m).unfold(3, m + 2, m)  # (n, c, h/m, w/m, m+2, m+2)
    v = torch.einsum("ij,nctsjk,lk->nctsil", bt, tiles, bt)
    u = torch.einsum("ij,ocjk,lk->ocil", g, w, g)
    y = torch.einsum("nctsil,ocil->notsil", v, u)
    y = torch.einsum("ij,notsjk,lk->notsil", at, y, at)  # (n, o, h/m, w/m, m, m)
    return y.permute(0, 1, 2, 4, 3, 5).reshape(n, -1, h, wd)


def conv2d(name: str, n: int, c: int, hw: int, offset: bool = False) -> Workload:
    """A 3x3 convolution; with `offset`, inputs around OFFSET_IN and filters that sum to zero (ill-conditioned)."""
    def inputs(g, s):
        x, w = torch.randn(n, c, hw, hw, generator=g), torch.randn(c, c, 3, 3, generator=g) / math.sqrt(9 * c)
        if offset:
            x, w = x + OFFSET_IN, w - w.mean((1, 2, 3), keepdim=True)
        return [x * s, w]

    honest = {"im2col (unfold) + matmul": conv_unfold, "FFT": conv_fft, "Winograd F(2x2,3x3)": conv_winograd,
              "Winograd F(4x4,3x3)": lambda x, w: conv_winograd(x, w, 4),
              "9 shifted 1x1 convolutions, reversed": conv_taps,
              "fp64 accumulation": lambda x, w: conv(x.double(), w.double()).float()}
    shape = f"{n}x{c}x{hw}x{hw}, 3x3, pad 1" + (f", x + {OFFSET_IN:g}, zero-sum filters" if offset else "")
    return Workload(name, "conv2d", shape, inputs, conv, honest, reduced_precision(conv, operands=2))


# ---- reductions ----------------------------------------------------------------------------------------------

def sequential(x, reverse=False):
    """One add at a time along the last axis, in float32 (torch's own sums keep wider or cascaded accumulators)."""
    acc = x.new_zeros(x.shape[:-1])
    for k in (reversed(range(x.shape[-1])) if reverse else range(x.shape[-1])):
        acc = acc + x[..., k]
    return acc


def tree(x):
    """Pairwise sum along the last axis (a power of two)."""
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def lanes_then_tree(x, lanes=256):
    """What a GPU block does: each of `lanes` threads sums a strided share serially, then a tree over the threads."""
    return tree(sequential(x.reshape(*x.shape[:-1], -1, lanes).transpose(-1, -2)))


def kahan(x, lanes=64):
    """Kahan-compensated serial sums in `lanes` strided lanes, then a tree."""
    x = x.reshape(*x.shape[:-1], -1, lanes)
    s, comp = x.new_zeros(x[..., 0, :].shape), x.new_zeros(x[..., 0, :].shape)
    for k in range(x.shape[-2]):
        y = x[..., k, :] - comp
        t = s + y
        comp, s = (t - s) - y, t
    return tree(s)


SUMS = {"sequential": sequential, "sequential, reversed": lambda x: sequential(x, reverse=True),
        "256 serial lanes, then a tree": lanes_then_tree, "pairwise tree": tree, "Kahan, 64 lanes": kahan,
        "fp64 accumulation": lambda x: x.double().sum(-1).float()}


def row_inputs(rows: int, cols: int):
    """One normal input of `rows` x `cols`, times the scale."""
    return lambda g, s: [torch.randn(rows, cols, generator=g) * s]


def reduction(name: str, rows: int, cols: int, mean: bool = False) -> Workload:
    """A sum (or mean) over the last axis, with the summation orders of SUMS."""
    program = (lambda x: x.mean(-1)) if mean else (lambda x: x.sum(-1))
    honest = {k: ((lambda f: lambda x: f(x) / x.shape[-1])(f) if mean else f) for k, f in SUMS.items()}
    return Workload(name, "reduction", f"{rows}x{cols}, over {cols}", row_inputs(rows, cols), program, honest,
                    reduced_precision(program))


def offset_sum(x):
    """The ill-conditioned reference: a difference of large sums that equals x.sum(-1) exactly."""
    return (x + OFFSET).sum(-1) - OFFSET * x.shape[-1]


def ill_conditioned(name: str, rows: int, cols: int) -> Workload:
    """offset_sum with the summation orders of SUMS applied to x + OFFSET, and with the constant taken out."""
    def of_offset(f):
        return lambda x: f(x + OFFSET) - OFFSET * x.shape[-1]

    honest = {f"{k} of x + {OFFSET:g}": of_offset(f) for k, f in SUMS.items()
              if k not in ("fp64 accumulation", "sequential", "sequential, reversed")}
    honest |= {"constant taken out: x.sum(-1)": lambda x: x.sum(-1),
               "fp64 accumulation": lambda x: offset_sum(x.double()).float()}
    # one serial fp32 loop over 16384 terms near 100: each add rounds a running sum of up to 1.6e6, so its error
    # grows with n (25x-40x the reference's cascaded sum); strict refuses it as it refuses any such error
    other = {f"{k} of x + {OFFSET:g}": of_offset(SUMS[k]) for k in ("sequential", "sequential, reversed")}
    limit = (f"the fp32 reference rounds x + {OFFSET:g} and running sums near {OFFSET:g}·n: at scale 1 its own error "
             "(the table's ref rel L2) exceeds what rounding x to fp16 or bf16 adds, so those variants stay within it; "
             "fp16 and bf16 arithmetic still fail")
    return Workload(name, "reduction", f"{rows}x{cols}: (x + {OFFSET:g}).sum(-1) - {OFFSET:g}·n",
                    row_inputs(rows, cols), offset_sum, honest, reduced_precision(offset_sum), other, limit)


# ---- softmax, layernorm, batchnorm, gelu ---------------------------------------------------------------------

def online_softmax(x, blocks=16):
    """Softmax with a running max and sum over `blocks` pieces of each row (one pass, as fused kernels do)."""
    m, l = None, None
    for xb in x.chunk(blocks, -1):
        mb = xb.amax(-1, keepdim=True)
        m_new = mb if m is None else torch.maximum(m, mb)
        sb = (xb - m_new).exp().sum(-1, keepdim=True)
        l = sb if l is None else l * (m - m_new).exp() + sb
        m = m_new
    return (x - m).exp() / l


def exp2_softmax(x):
    """Softmax through exp2 of (x - max) · log2(e), as fast attention kernels compute it."""
    e = torch.exp2((x - x.amax(-1, keepdim=True)) * math.log2(math.e))
    return e / e.sum(-1, keepdim=True)


def softmax(name: str, rows: int, cols: int) -> Workload:
    """Softmax over the last axis, with other formulas for it."""
    def program(x):
        return x.softmax(-1)

    def shifted(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e, e.sum(-1, keepdim=True)

    honest = {"exp(x - max) / sum": lambda x: (lambda e, s: e / s)(*shifted(x)),
              "exp(x - max) · (1 / sum)": lambda x: (lambda e, s: e * s.reciprocal())(*shifted(x)),
              "exp(x - logsumexp)": lambda x: (x - x.logsumexp(-1, keepdim=True)).exp(),
              "online, 16 blocks": online_softmax, "exp2 with log2(e) prescale": exp2_softmax,
              "fp64 accumulation": lambda x: x.double().softmax(-1).float()}
    return Workload(name, "softmax", f"{rows}x{cols}, over {cols}", row_inputs(rows, cols), program, honest,
                    reduced_precision(program))


def affine_inputs(shape: tuple[int, ...], channels: int):
    """A normal input of `shape` times the scale, and per-channel weight (about 1) and bias (about 0)."""
    def inputs(g, s):
        return [torch.randn(*shape, generator=g) * s, 1 + 0.1 * torch.randn(channels, generator=g),
                0.1 * torch.randn(channels, generator=g)]
    return inputs


EPS = 1e-5


def normalise(x, stats, w, b, shape, rsqrt=False):
    """(x - mean) / sqrt(var + eps) · w + b, with per-feature parameters viewed as `shape`."""
    mean, var = stats
    inv = (var + EPS).rsqrt() if rsqrt else 1 / (var + EPS).sqrt()
    return (x - mean) * inv * w.view(shape) + b.view(shape)


def two_pass(x, dims):
    """Mean, then the mean of squared deviations."""
    mean = x.mean(dims, keepdim=True)
    return mean, ((x - mean) ** 2).mean(dims, keepdim=True)


def one_pass(x, dims):
    """Mean and E[x²] - E[x]² from the same pass."""
    mean = x.mean(dims, keepdim=True)
    return mean, (x * x).mean(dims, keepdim=True) - mean * mean


def merged(x, dims, parts=16):
    """Welford/Chan: statistics of `parts` pieces along the first reduced axis, merged one after another."""
    mean, m2, count = None, None, 0
    for piece in x.chunk(parts, dims[0]):
        nb = math.prod(piece.shape[d] for d in dims)
        mb = piece.mean(dims, keepdim=True)
        m2b = ((piece - mb) ** 2).sum(dims, keepdim=True)
        if mean is None:
            mean, m2, count = mb, m2b, nb
            continue
        delta, total = mb - mean, count + nb
        mean = mean + delta * (nb / total)
        m2 = m2 + m2b + delta * delta * (count * nb / total)
        count = total
    return mean, m2 / count


def fp64_stats(x, dims):
    """Two-pass statistics in float64, rounded to float32."""
    mean, var = two_pass(x.double(), dims)
    return mean.float(), var.float()


STATS = {"two-pass mean and variance": two_pass, "one-pass E[x²] - E[x]²": one_pass,
         "Welford/Chan merge of 16 pieces": merged, "fp64 statistics": fp64_stats}


def normalisations(dims: tuple[int, ...], shape: tuple[int, ...]) -> dict[str, Program]:
    """Honest normalisations over `dims`, one per way of computing the statistics (and one with rsqrt)."""
    honest = {k: (lambda f: lambda x, w, b: normalise(x, f(x, dims), w, b, shape))(f) for k, f in STATS.items()}
    honest["two-pass, rsqrt and multiply"] = lambda x, w, b: normalise(x, two_pass(x, dims), w, b, shape, rsqrt=True)
    return honest


def layernorm(name: str, rows: int, cols: int) -> Workload:
    """F.layer_norm over the last axis, with other ways of computing its statistics."""
    def program(x, w, b):
        return F.layer_norm(x, (cols,), w, b, EPS)

    return Workload(name, "normalisation", f"{rows}x{cols}, over {cols}", affine_inputs((rows, cols), cols),
                    program, normalisations((1,), (cols,)), reduced_precision(program))


def batchnorm(name: str, n: int, c: int, hw: int) -> Workload:
    """F.batch_norm with batch statistics, with other ways of computing them."""
    def program(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True, eps=EPS)

    return Workload(name, "normalisation", f"{n}x{c}x{hw}x{hw}, batch statistics", affine_inputs((n, c, hw, hw), c),
                    program, normalisations((0, 2, 3), (1, c, 1, 1)), reduced_precision(program))


def gelu(name: str, rows: int, cols: int) -> Workload:
    """Exact (erf) GELU, with other formulas for it."""
    program = F.gelu
    honest = {"0.5·x·(1 + erf(x/√2))": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
              "0.5·x·erfc(-x/√2)": lambda x: 0.5 * x * torch.erfc(-x / math.sqrt(2)),
              "x·Φ(x) (ndtr)": lambda x: x * torch.special.ndtr(x),
              "fp64": lambda x: F.gelu(x.double()).float()}
    other = {"tanh approximation": lambda x: F.gelu(x, approximate="tanh")}
    return Workload(name, "elementwise", f"{rows}x{cols}", row_inputs(rows, cols), program, honest,
                    reduced_precision(program), other)


WORKLOADS = [
    matmul("matmul", 512, 1024, 512),
    matmul("matmul, long K", 64, 16384, 64),
    matmul("matmul, ill-conditioned", 256, 1024, 256, "offset"),
    matmul("matmul, inputs in [0, 1)", 256, 1024, 256, "uniform"),
    conv2d("conv2d 3x3", 8, 64, 32),
    conv2d("conv2d 3x3, ill-conditioned", 4, 64, 32, offset=True),
    reduction("sum", 256, 16384),
    reduction("mean", 256, 16384, mean=True),
    ill_conditioned("difference of large sums", 256, 16384),
    softmax("softmax", 256, 4096),
    layernorm("layer_norm", 256, 4096),
    batchnorm("batch_norm", 32, 64, 16),
    gelu("gelu", 512, 4096),
]


# ---- measuring -----------------------------------------------------------------------------------------------

def measure(w: Workload, seed: int, scale: float, device: str) -> list[Run]:
    """Every variant of `w` on one draw of its inputs, judged against the exact result."""
    g = torch.Generator().manual_seed(seed)
    xs = [x.to(device) for x in w.inputs(g, scale)]
    want = w.program(*(x.double() for x in xs))
    ref = w.program(*xs)
    own = exact.against_exact(ref, ref, want)  # the reference's errors, even where a variant's are not finite
    cuda = device.startswith("cuda")
    variants = [(kind, k, f) for kind, group in (("honest", w.honest), ("reduced", w.reduced), ("other", w.other))
                for k, f in group.items() if cuda or "flags" not in k]
    runs = []
    for kind, name, f in variants:
        a = exact.against_exact(f(*xs).to(torch.float32), ref, want)
        runs.append(Run(w.name, w.family, name, kind, seed, scale, a.rel_l2, a.max_rel, own.ref_rel_l2,
                        own.ref_max_rel, a.load, a.ok))
    return runs


def ratio(x: float, ref: float) -> float:
    """`x` / `ref`, with a reference error of zero giving 1 for an error of zero and inf otherwise."""
    return x / ref if ref > 0 else (1.0 if x == 0 else math.inf)


def summary(runs: list[Run]) -> list[dict]:
    """Per workload and scale: the reference's error, the honest variants' worst case, the reduced ones' best."""
    rows = []
    for key in dict.fromkeys((r.workload, r.scale) for r in runs):
        mine = [r for r in runs if (r.workload, r.scale) == key]
        honest, reduced = [r for r in mine if r.kind == "honest"], [r for r in mine if r.kind == "reduced"]
        worst, best = max(honest, key=lambda r: r.load), min(reduced, key=lambda r: r.load)
        rows.append({
            "workload": key[0], "scale": key[1], "family": mine[0].family,
            "ref_rel_l2": statistics.median(r.ref_rel_l2 for r in mine),
            "ref_max_rel": statistics.median(r.ref_max_rel for r in mine),
            "honest_l2_ratio": max(ratio(r.rel_l2, r.ref_rel_l2) for r in honest),
            "honest_max_ratio": max(ratio(r.max_rel, r.ref_max_rel) for r in honest),
            "honest_worst": worst.variant, "honest_load": worst.load,
            "reduced_l2_ratio": min(ratio(r.rel_l2, r.ref_rel_l2) for r in reduced),
            "reduced_max_ratio": min(ratio(r.max_rel, r.ref_max_rel) for r in reduced),
            "reduced_best": best.variant, "reduced_load": best.load})
    return rows


def per_variant(runs: list[Run]) -> list[dict]:
    """Per (workload, variant): its worst draw (honest: largest load; others: smallest) over seeds and scales."""
    rows = []
    for key in dict.fromkeys((r.workload, r.variant) for r in runs):
        mine = [r for r in runs if (r.workload, r.variant) == key]
        r = (max if mine[0].kind == "honest" else min)(mine, key=lambda r: r.load)
        rows.append({"workload": key[0], "variant": key[1], "kind": r.kind, "rel_l2": r.rel_l2, "max_rel": r.max_rel,
                     "l2_ratio": ratio(r.rel_l2, r.ref_rel_l2), "max_ratio": ratio(r.max_rel, r.ref_max_rel),
                     "load": r.load, "seed": r.seed, "scale": r.scale, "passes": sum(m.ok for m in mine),
                     "draws": len(mine)})
    return rows


def families(runs: list[Run], limited: set[str]) -> list[dict]:
    """Per family: the honest variants' largest ratios and load, the reduced ones' smallest (limits left out)."""
    rows = []
    for family in dict.fromkeys(r.family for r in runs):
        honest = [r for r in runs if r.family == family and r.kind == "honest"]
        reduced = [r for r in runs if r.family == family and r.kind == "reduced" and r.workload not in limited]
        rows.append({"family": family,
                     "honest_l2_ratio": max(ratio(r.rel_l2, r.ref_rel_l2) for r in honest),
                     "honest_max_ratio": max(ratio(r.max_rel, r.ref_max_rel) for r in honest),
                     "honest_load": max(r.load for r in honest),
                     "reduced_l2_ratio": min(ratio(r.rel_l2, r.ref_rel_l2) for r in reduced),
                     "reduced_max_ratio": min(ratio(r.max_rel, r.ref_max_rel) for r in reduced),
                     "reduced_load": min(r.load for r in reduced)})
    return rows


def margins(runs: list[Run], limited: set[str]) -> dict:
    """The honest variants' worst load, and the reduced ones' best load outside the workloads with a limit."""
    honest = max((r for r in runs if r.kind == "honest"), key=lambda r: r.load)
    reduced = min((r for r in runs if r.kind == "reduced" and r.workload not in limited), key=lambda r: r.load)
    return {"honest_load": honest.load, "honest_worst": f"{honest.workload}: {honest.variant}",
            "honest_all_pass": all(r.ok for r in runs if r.kind == "honest"),
            "reduced_load": reduced.load, "reduced_best": f"{reduced.workload}: {reduced.variant}",
            "reduced_all_refused": not any(r.ok for r in runs if r.kind == "reduced" and r.workload not in limited)}


def finite(x):
    """`x` with every NaN or infinite float written as null (standard JSON has neither)."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def environment(device: str) -> dict:
    """The device, torch version and date the numbers come from."""
    name = torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU, {os.cpu_count()} cores"
    return {"device": name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}


def write(out: Path, env: dict, seeds: int, runs: list[Run]) -> None:
    """OUT/results.json.gz (every run) and OUT/README.md (margins, limits and tables)."""
    rule = {"FACTOR": exact.FACTOR, "FLOOR_REL_L2": exact.FLOOR_REL_L2, "FLOOR_MAX_REL": exact.FLOOR_MAX_REL}
    limits = {w.name: w.limit for w in WORKLOADS if w.limit}
    table, variants, m = summary(runs), per_variant(runs), margins(runs, set(limits))
    by_family = families(runs, set(limits))
    out.mkdir(parents=True, exist_ok=True)
    record = {"env": env, "rule": rule, "seeds": seeds, "scales": SCALES, "margins": m, "limits": limits,
              "families": by_family, "summary": table, "variants": variants, "runs": [asdict(r) for r in runs]}
    with gzip.open(out / "results.json.gz", "wt") as f:
        f.write(json.dumps(finite(record), indent=1))
    lines = [
        f"# Strict's calibration ({env['device']}, torch {env['torch']}, {env['date']})", "",
        "Errors against the exact result (the reference program on float64 copies of the same inputs): relative L2 "
        "error, and the worst element's |error| / (rms(exact) + |exact|) (\"max\"), for the fp32 reference and for "
        f"each variant; {seeds} seeds × input scales {', '.join(f'{s:g}' for s in SCALES)}. Rule "
        f"(`src/kernelrl/evaluate/exact.py`): accurate iff rel L2 ≤ {exact.FACTOR:g} × the reference's + "
        f"{exact.FLOOR_REL_L2:g} and max ≤ {exact.FACTOR:g} × the reference's + {exact.FLOOR_MAX_REL:g}. "
        "Load = error / allowed, the larger of the two: ≤ 1 passes. Ratios are to the reference's error in the same "
        "draw.", "",
        f"- Honest fp32 variants: worst load {m['honest_load']:.3g} ({m['honest_worst']}), a margin of "
        f"{1 / m['honest_load']:.1f}x; all {sum(r.kind == 'honest' for r in runs)} runs pass: {m['honest_all_pass']}.",
        f"- TF32, bf16, fp16: best load {m['reduced_load']:.3g} ({m['reduced_best']}), a margin of "
        f"{m['reduced_load']:.1f}x, outside the workloads with a limit; all refused there: {m['reduced_all_refused']}."]
    lines += [f"- Limit, {name}: {text}." for name, text in limits.items()]
    lines += [f"- Reported only, {v['workload']}: {v['variant']} passes on {v['passes']} of {v['draws']} draws "
              f"(load {v['load']:.3g} at its best)." for v in variants if v["kind"] == "other"]
    lines += ["", "| family | honest: largest L2 ratio | largest max ratio | largest load | reduced: smallest L2 ratio "
              "| smallest max ratio | smallest load |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {f['family']} | {f['honest_l2_ratio']:.3g} | {f['honest_max_ratio']:.3g} | {f['honest_load']:.3g} | "
              f"{f['reduced_l2_ratio']:.3g} | {f['reduced_max_ratio']:.3g} | {f['reduced_load']:.3g} |"
              for f in by_family]
    lines += ["", "| workload | shapes |", "|---|---|"] + [f"| {w.name} | {w.shape} |" for w in WORKLOADS]
    lines += ["", "| family | workload | scale | ref rel L2 | ref max | honest: L2 ratio | max ratio | worst load "
              "(variant) | reduced: L2 ratio | max ratio | best load (variant) |", "|---" * 11 + "|"]
    for r in table:
        lines.append(f"| {r['family']} | {r['workload']} | {r['scale']:g} | {r['ref_rel_l2']:.2g} | "
                     f"{r['ref_max_rel']:.2g} | {r['honest_l2_ratio']:.3g} | {r['honest_max_ratio']:.3g} | "
                     f"{r['honest_load']:.3g} ({r['honest_worst']}) | {r['reduced_l2_ratio']:.3g} | "
                     f"{r['reduced_max_ratio']:.3g} | {r['reduced_load']:.3g} ({r['reduced_best']}) |")
    lines += ["", "Every variant at its worst draw (honest: largest load; reduced and other: smallest), and on how "
              "many draws it passes.", "",
              "| workload | variant | kind | rel L2 | max | L2 ratio | max ratio | load | passes |",
              "|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        lines.append(f"| {v['workload']} | {v['variant']} | {v['kind']} | {v['rel_l2']:.2g} | {v['max_rel']:.2g} | "
                     f"{v['l2_ratio']:.3g} | {v['max_ratio']:.3g} | {v['load']:.3g} | {v['passes']}/{v['draws']} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main():
    """Measure every workload for every seed and scale, then write the results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json.gz and README.md")
    ap.add_argument("--seeds", type=int, default=5, help="draws of the inputs per workload and scale")
    args = ap.parse_args()
    # the fp32 reference is fp32: TF32 only inside the variant that asks for it
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    runs, start = [], time.monotonic()
    for w in WORKLOADS:
        t0 = time.monotonic()
        for seed in range(args.seeds):
            for scale in SCALES:
                runs += measure(w, seed, scale, args.device)
        print(f"{w.name}: {time.monotonic() - t0:.1f} s", flush=True)
    write(args.out, environment(args.device), args.seeds, runs)
    print(f"{len(runs)} runs in {time.monotonic() - start:.0f} s; {args.out / 'README.md'}")


if __name__ == "__main__":
    main()
