"""Precision policies: strict (fp32 held to ~1e-4, reduced precision refused) and kernelbench (atol = rtol = 1e-2,
reduced precision allowed and flagged), chosen per run or per task and recorded in the Verdict.

The evaluator's behaviour under each policy, on real candidates and the exploit corpus, is in
test_reward_integrity.py; here are the decisions, the records and the command lines.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelrl.evaluate import compare as cmp
from kernelrl.evaluate.config import EvalConfig
from kernelrl.task import Task, TaskError, TaskMeta
from kernelrl.train.config import ConfigError, TrainConfig
from kernelrl.verdict import Verdict

DATA = Path(__file__).parent / "data" / "eval"
REF = '''import torch
import torch.nn as nn
{meta}

class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("dtype, strict, kernelbench", [
    (torch.float32, (1e-4, 1e-4), (1e-2, 1e-2)),
    (torch.float64, (1e-7, 1e-7), (1e-2, 1e-2)),
    (torch.float16, (1e-2, 1e-2), (1e-2, 1e-2)),
    (torch.bfloat16, (2e-2, 2e-2), (1e-2, 1e-2)),  # KernelBench's rule as it is, for every float dtype
    (torch.int64, (0.0, 0.0), (0.0, 0.0)),  # integers match exactly under both
])
def test_tolerances_by_dtype_and_policy(dtype, strict, kernelbench):
    assert cmp.tolerance(dtype) == strict
    assert cmp.tolerance(dtype, policy="kernelbench") == kernelbench


def test_a_task_tolerance_wins_over_the_policy():
    assert cmp.tolerance(torch.float32, atol=1e-5, rtol=1e-5, policy="kernelbench") == (1e-5, 1e-5)


def test_tf32_sized_error_passes_only_under_kernelbench():
    ref = torch.randn(256, 256)
    out = ref + 5e-4 * ref.abs().mean() * torch.randn_like(ref)  # about TF32's or fp16's rounding of a matmul
    assert not cmp.compare(out, ref).ok
    assert cmp.compare(out, ref, policy="kernelbench").ok


def test_outputs_compared_in_chunks_give_the_same_result_as_in_one_piece(monkeypatch):
    torch.manual_seed(0)
    ref = torch.randn(1000) * 3
    out = ref + 1e-6 * torch.randn(1000)
    out[997] += 1.0  # one bad element, in the last chunk
    whole = cmp.compare(out, ref)
    monkeypatch.setattr(cmp, "SERIAL", 64)  # a small host tensor is compared SERIAL elements at a time
    parts = cmp.compare(out, ref)
    assert not whole.ok and whole.mismatched == parts.mismatched == 1
    for field in ("max_abs", "max_rel", "rel_l2"):
        assert getattr(parts, field) == pytest.approx(getattr(whole, field), rel=1e-9)
    ref[998] = float("nan")  # a NaN in a later chunk still takes the non-finite path
    assert "differ where the reference is NaN/Inf" in cmp.compare(out, ref).reason


def test_small_host_comparisons_keep_every_op_within_torchs_grain_size(monkeypatch):
    """Sampled outputs are compared in pieces torch runs on the calling thread (at most 32768 elements), so the
    evaluator never wakes its intra-op thread pool for them (slow where workers and builds hold the cores)."""
    seen = []
    real = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: seen.append(t.numel()) or real(t))
    ref = torch.randn(1 << 16, dtype=torch.float64)
    assert cmp.compare(ref * (1 + 1e-9), ref).ok
    assert seen and max(seen) <= 1 << 15
    assert cmp.chunk_for(torch.empty(1 << 23)) == cmp.CHUNK  # large CPU outputs keep torch's thread pool


def test_kernelbench_is_allclose_with_an_absolute_atol_and_says_when_only_that_slack_passes():
    small, large = 1e-3 * torch.randn(1024), torch.randn(1024)
    for ref in (small, large):  # the same verdicts as torch.allclose(out, ref, atol=1e-2, rtol=1e-2)
        for out in (torch.zeros_like(ref), ref * (1 + 5e-3), ref + 2e-2):
            assert cmp.compare(out, ref, policy="kernelbench").ok == torch.allclose(out, ref, atol=1e-2, rtol=1e-2)
    zeros = cmp.compare(torch.zeros_like(small), small, policy="kernelbench")
    assert zeros.ok  # KernelBench's issue #165: zeros pass where outputs are under its atol
    why = cmp.absolute_slack(zeros, cmp.compare(torch.zeros_like(small), small, 1e-2, 1e-2), 1e-2)
    assert "relative L2 error 1" in why and "zeros pass" in why
    close = small * (1 + 1e-3)
    assert cmp.absolute_slack(cmp.compare(close, small, policy="kernelbench"), cmp.compare(close, small, 1e-2, 1e-2),
                              1e-2) == ""


def test_an_unknown_policy_is_a_one_line_error_naming_the_choices():
    with pytest.raises(ValueError, match=r"^policy must be one of strict, kernelbench, not 'fast'$"):
        EvalConfig(policy="fast")
    with pytest.raises(TaskError, match="policy must be one of strict, kernelbench"):
        TaskMeta(policy="fast")


def test_the_task_policy_takes_precedence_over_the_run():
    run = EvalConfig(policy="strict")
    assert run.policy_for(TaskMeta()) == "strict"
    assert run.policy_for(TaskMeta(policy="kernelbench")) == "kernelbench"
    assert EvalConfig(policy="kernelbench").policy_for(TaskMeta(policy="strict")) == "strict"


def test_a_task_sets_its_policy_in_its_literal_dict_or_its_toml(tmp_path):
    literal = tmp_path / "literal.py"
    literal.write_text(REF.format(meta='KERNELRL = {"policy": "kernelbench"}'))
    assert Task.from_file(literal).meta.policy == "kernelbench"
    sidecar = tmp_path / "sidecar.py"
    sidecar.write_text(REF.format(meta=""))
    sidecar.with_suffix(".toml").write_text('policy = "kernelbench"\n')
    assert Task.from_file(sidecar).meta.policy == "kernelbench"
    bad = tmp_path / "bad.py"
    bad.write_text(REF.format(meta='KERNELRL = {"policy": "loose"}'))
    with pytest.raises(TaskError, match="policy must be one of"):
        Task.from_file(bad)


def test_the_verdict_records_its_policy_and_old_verdicts_read_as_strict():
    v = Verdict(status="ok", speedup=1.5, policy="kernelbench")
    assert Verdict.from_json(v.to_json()) == v
    old = v.to_dict()
    del old["policy"]
    assert Verdict.from_dict(old).policy == "strict"


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelrl.cli", *args], capture_output=True, text=True, timeout=300)


def test_eval_judges_under_the_policy_it_is_given():
    r = _cli("eval", str(DATA / "scale_add.py"), str(DATA / "correct.py"), "--json", "--policy", "kernelbench",
             "--rounds", "2", "--calls", "5", "--trials", "2")
    assert r.returncode == 0, r.stderr
    v = Verdict.from_dict(json.loads(r.stdout))
    assert (v.status, v.policy, v.error.atol) == ("ok", "kernelbench", 1e-2)


@pytest.mark.parametrize("command", [
    ["eval", str(DATA / "scale_add.py"), str(DATA / "correct.py")],
    ["train", "--smoke"],
])
def test_a_bad_policy_on_the_command_line_is_one_line(command):
    r = _cli(*command, "--policy", "loose")
    assert r.returncode == 2
    assert "policy must be one of strict, kernelbench, not 'loose'" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_training_config_with_a_bad_reward_policy_is_refused_when_read():
    with pytest.raises(ConfigError, match="evaluator.eval: policy must be one of"):
        TrainConfig.from_dict({"evaluator": {"eval": {"policy": "loose"}}})
    cfg = TrainConfig.from_dict({"evaluator": {"eval": {"policy": "kernelbench"}}})
    assert EvalConfig(**cfg.evaluator.eval).policy == "kernelbench"


def test_a_few_rounding_outliers_pass_and_real_faults_do_not():
    # As in KernelBench's level2/93 (x + 0.5, then min(x, 0)): an output that is mostly zeros, whose few values
    # are small differences of large intermediates; one rounding step there is beyond a tolerance scaled by the
    # output's rms. Two runs of the same program on two convolution algorithms differ in 20 of 277M elements.
    torch.manual_seed(0)
    n = 1 << 22
    ref = torch.zeros(n)
    ref[::1000] = 1e-3 * torch.randn(ref[::1000].numel())
    tol = 1e-4 * cmp.rms(ref)

    def with_errors(count: int, size: float) -> torch.Tensor:
        out = ref.clone()
        out[torch.randperm(n)[:count]] += size * tol  # at zeros of the reference, mostly: the atol decides
        return out

    assert cmp.outliers_allowed(n) == 5
    assert cmp.compare(with_errors(5, 2.0), ref).ok  # rounding outliers: few, and near the tolerance
    assert cmp.compare(with_errors(5, 2.0), ref).mismatched == 0
    assert not cmp.compare(with_errors(6, 2.0), ref).ok  # too many
    assert not cmp.compare(with_errors(1, 20.0), ref).ok  # far beyond the tolerance: a fault, not rounding
    # A timed call's samples: rounding beyond the tolerance at a few positions passes (within it on average, nowhere
    # beyond 10 times it); a fault at one position, or an error of the tolerance's size everywhere, does not.
    samples = torch.zeros(2048, dtype=torch.float64)
    wrong = samples.clone()
    wrong[7:17] = 3 * tol
    assert cmp.compare_samples(wrong, samples, cmp.rms(ref), 1e-4, 1e-4)
    wrong[7] = 20 * tol
    assert not cmp.compare_samples(wrong, samples, cmp.rms(ref), 1e-4, 1e-4)
    assert not cmp.compare_samples(samples + 1.5 * tol, samples, cmp.rms(ref), 1e-4, 1e-4)
