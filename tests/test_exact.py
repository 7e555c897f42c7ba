"""Strict judges an fp32 output against the exact (float64) result: it passes when it is about as accurate as the
fp32 reference, whatever order it adds in, and fails when TF32, bf16 or fp16 math shows."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.compare import Mismatch
from kernelrl.evaluate.exact import (FLOOR_REL_L2, against_exact, bound_may_decide, certainly_less_accurate,
                                    rounded_exact)
from kernelrl.task import Candidate, Task


def draw(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def judged(program, candidate, *inputs):
    """`candidate(*inputs)` judged against `program`'s fp32 result and its result on float64 copies of the inputs."""
    return against_exact(candidate(*inputs), program(*inputs), program(*(x.double() for x in inputs)))


def tf32(t: torch.Tensor) -> torch.Tensor:
    """`t` rounded to TF32's 10-bit mantissa (to nearest even), as tensor cores read float32 operands."""
    i = t.contiguous().view(torch.int32)
    return ((i + 0x0FFF + ((i >> 13) & 1)) & ~0x1FFF).view(torch.float32)


def offset_sum(x, c=16.0):
    """A difference of large sums: fp32 keeps about four digits of the result."""
    return (x + c).sum(-1) - c * x.shape[-1]


def conv(x, w):
    return F.conv2d(x, w, padding=1)


MATMUL = (torch.matmul, (draw(0, 128, 512), draw(1, 512, 128)))
CONV = (conv, (draw(2, 2, 32, 16, 16), draw(3, 32, 32, 3, 3) / math.sqrt(288)))
REDUCED = {
    "tf32": lambda f: lambda a, b: f(tf32(a), tf32(b)),
    "bf16": lambda f: lambda a, b: f(a.bfloat16(), b.bfloat16()).float(),
    "fp16": lambda f: lambda a, b: f(a.half(), b.half()).float(),
    "fp16 operands, fp32 accumulation": lambda f: lambda a, b: f(a.half().float(), b.half().float()),
}


def test_the_fp32_reference_itself_is_accurate():
    program, inputs = MATMUL
    v = judged(program, program, *inputs)
    assert v.ok and v.rel_l2 == v.ref_rel_l2 > 0 and v.load < 0.1


def test_a_more_accurate_order_passes_where_it_differs_from_the_fp32_reference():
    x = draw(4, 64, 16384)
    ref, candidate = offset_sum(x), x.sum(-1)  # the constant taken out: no large sum to round
    assert torch.linalg.vector_norm(candidate - ref) / torch.linalg.vector_norm(ref) > 5e-5  # visibly not the ref
    v = judged(offset_sum, lambda x: x.sum(-1), x)
    assert v.ok and v.rel_l2 < v.ref_rel_l2 / 100


def test_another_order_as_inaccurate_as_the_reference_passes():
    def pairwise(x):
        y = x + 16.0
        while y.shape[-1] > 1:
            y = y[..., 0::2] + y[..., 1::2]
        return y[..., 0] - 16.0 * x.shape[-1]

    v = judged(offset_sum, pairwise, draw(5, 64, 16384))
    assert v.ok and v.rel_l2 > 1e-5  # errs by as much as the reference, in its own way


@pytest.mark.parametrize("precision", REDUCED)
@pytest.mark.parametrize("case", [MATMUL, CONV], ids=["matmul", "conv2d"])
def test_reduced_precision_math_fails(case, precision):
    program, inputs = case
    v = judged(program, REDUCED[precision](program), *inputs)
    assert not v.ok and v.load > 3
    assert "less accurate than the fp32 reference" in v.reason and v.mismatched >= 1


def test_a_zero_output_fails():
    program, inputs = MATMUL
    v = judged(program, lambda a, b: torch.zeros(a.shape[0], b.shape[1]), *inputs)
    assert not v.ok and v.rel_l2 == pytest.approx(1.0) and isinstance(v, Mismatch)


def test_a_few_elements_off_by_a_part_in_a_thousand_fail():
    program, inputs = MATMUL

    def faulty(a, b):
        out = a @ b
        out[0, :10] *= 1.001
        return out

    v = judged(program, faulty, *inputs)
    assert not v.ok and v.rel_l2 < FLOOR_REL_L2  # the norm cannot see ten elements; the worst element can


def test_nan_where_the_exact_result_is_finite_fails():
    program, inputs = MATMUL

    def with_nan(a, b):
        out = a @ b
        out[3, 7] = math.nan
        return out

    v = judged(program, with_nan, *inputs)
    assert not v.ok and v.mismatched == 1 and "NaN/Inf" in v.reason


def test_nan_and_inf_where_the_reference_has_them_must_be_reproduced():
    x = draw(6, 8, 64)
    x[0, 0], x[1, 0] = math.nan, math.inf

    def program(x):
        return x.sum(-1)

    assert judged(program, program, x).ok
    v = judged(program, lambda x: torch.nan_to_num(x.sum(-1)), x)
    assert not v.ok and v.mismatched == 2


def test_honest_variant_nearest_the_bound_passes_for_every_seed():
    # exp(x - logsumexp) on logits spread over hundreds: 250-630x the reference's relative L2 error (inside the
    # floor), the largest honest load of the calibration; the verdict rests on norms, so no draw tips it
    loads = []
    for seed in range(20):
        x = draw(seed, 64, 1024) * 200
        loads.append(judged(lambda x: x.softmax(-1), lambda x: (x - x.logsumexp(-1, keepdim=True)).exp(), x).load)
    assert max(loads) < 0.5 and min(loads) > 0.05


def test_fp16_operands_fail_for_every_seed():
    loads = [judged(torch.matmul, REDUCED["fp16 operands, fp32 accumulation"](torch.matmul),
                    draw(seed, 64, 512), draw(seed + 100, 512, 64)).load for seed in range(20)]
    assert min(loads) > 3


def test_reduced_precision_outputs_are_judged_in_float64():
    x = draw(7, 64, 1024)

    def program(x):
        return x.softmax(-1)

    half = x.half()
    exact = program(half.double())
    assert against_exact(program(half), program(half), exact).ok
    assert against_exact(program(half.float()).half(), program(half), exact).ok  # fp32 math, rounded: more accurate
    assert not against_exact(program(half.bfloat16()).half(), program(half), exact).ok


def test_a_wrong_shape_or_dtype_fails():
    ref = torch.ones(4, 4)
    assert not against_exact(torch.ones(4, 5), ref, ref.double()).ok
    assert not against_exact(ref.double(), ref, ref.double()).ok


def bounded(program, candidate, *inputs) -> str:
    """`certainly_less_accurate` of `candidate(*inputs)`, told from the exact result rounded to float32."""
    return certainly_less_accurate(candidate(*inputs), program(*inputs),
                                   *rounded_exact(program(*(x.double() for x in inputs))))


HONEST = [
    (offset_sum, lambda x: x.sum(-1), (draw(4, 64, 16384),)),  # more accurate than the reference
    (lambda x: x.softmax(-1), lambda x: (x - x.logsumexp(-1, keepdim=True)).exp(), (draw(8, 64, 1024) * 200,)),
    (torch.matmul, torch.matmul, MATMUL[1]),
]


@pytest.mark.parametrize("case", range(len(HONEST)))
def test_the_rounded_bound_never_decides_an_honest_program(case):
    program, candidate, inputs = HONEST[case]
    assert judged(program, candidate, *inputs).ok
    assert bounded(program, candidate, *inputs) == ""


def test_a_near_miss_of_the_reference_is_not_asked_for_the_bound():
    # within FLOOR_REL_L2 of the reference the bound cannot decide, so it is not asked; NaN is asked (and then left)
    assert not bound_may_decide(1e-6) and not bound_may_decide(2.9e-5)
    assert bound_may_decide(1e-3) and bound_may_decide(float("nan"))


def test_the_rounded_bound_decides_a_constant_and_reduced_precision_as_the_full_comparison_does():
    program, inputs = MATMUL
    zeros = bounded(program, lambda a, b: torch.zeros(a.shape[0], b.shape[1]), *inputs)
    assert "relative L2 error at least 1" in zeros
    for precision in ("bf16", "fp16"):
        assert bounded(program, REDUCED[precision](program), *inputs)
        assert not judged(program, REDUCED[precision](program), *inputs).ok


def test_the_rounded_bound_leaves_what_it_cannot_see_to_the_full_comparison():
    program, inputs = MATMUL

    def faulty(a, b):  # ten elements off: the norm cannot see them, the worst element can
        out = a @ b
        out[0, :10] *= 1.001
        return out

    def with_nan(a, b):
        out = a @ b
        out[3, 7] = math.nan
        return out

    for candidate in (faulty, with_nan):
        assert bounded(program, candidate, *inputs) == "" and not judged(program, candidate, *inputs).ok


def test_the_rounded_bound_is_never_wrong_where_it_decides():
    # An fp32 reference with a visible error of its own (a difference of large sums), and outputs off by every
    # scale around the allowed error: wherever the bound decides, the full comparison fails too, and it decides
    # every output more than a few times beyond what is allowed.
    x = draw(9, 32, 4096)
    ref, exact = offset_sum(x), offset_sum(x.double())
    rounded, sq_exact, sq_rounding = rounded_exact(exact)
    decided = []
    for scale in torch.logspace(-7, 0, 29).tolist():
        out = ref + scale * draw(10, *ref.shape) * ref.abs().mean()
        why = certainly_less_accurate(out, ref, rounded, sq_exact, sq_rounding)
        full = against_exact(out, ref, exact)
        assert not (why and full.ok), scale
        # and never where the evaluator skips it: an output this near the reference goes to the full comparison
        near = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref))
        assert not why or bound_may_decide(near), scale
        decided.append(bool(why))
        if full.rel_l2 > 3 * full.allowed_rel_l2:
            assert why, scale
    assert decided[0] is False and decided[-1] is True


@pytest.mark.gpu
def test_cuda_outputs_are_judged_as_host_outputs():
    program, (a, b) = MATMUL  # torch's default: no TF32 in float32 matmuls
    a, b = a.cuda(), b.cuda()
    host = judged(program, REDUCED["tf32"](program), a.cpu(), b.cpu())
    device = judged(program, REDUCED["tf32"](program), a, b)
    assert not device.ok and device.rel_l2 == pytest.approx(host.rel_l2, rel=0.1)


CENTRED = Path(__file__).parent / "data" / "redteam" / "centred.py"


def more_accurate_mean() -> str:
    """The centred task (the mean of a group-normalised tensor: zero whatever the input) with its mean summed in
    float64: more accurate than the fp32 reference, whose output is rounding alone, and so beyond strict's tolerance
    of it on every trial."""
    source = CENTRED.read_text()
    made = source.replace("class Model(", "class ModelNew(").replace(
        "return x.mean(dim=[1, 2, 3, 4])", "return x.double().mean(dim=[1, 2, 3, 4]).float()")
    assert made.count("ModelNew") == 1 and "double()" in made, "centred.py no longer reads as this test expects"
    return made


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_more_accurate_program_is_judged_against_the_exact_result_on_its_sampled_trials_too(tmp_path, device):
    """Full trials and sampled ones alike judge an output beyond the tolerance again against the exact result."""
    config = EvalConfig(device=device, cache_dir=str(tmp_path), policy="strict", correctness_trials=4,
                        timing_rounds=2, timing_precision=0, calls_per_round=3, warmup=1)
    with Evaluator(config) as ev:
        v = ev.evaluate(Task.from_file(CENTRED), Candidate.from_source(more_accurate_mean(), name="mean64"))
    assert v.status == "ok", (v.status, [f.message for f in v.flags])
