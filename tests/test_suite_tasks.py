"""The project suite (suite/): every task is a valid KernelBench reference that runs at small size on CPU,
deterministically, with outputs that vary (nothing reducible to a constant)."""
import importlib.util
import os
from pathlib import Path

import pytest
import torch

from kernelrl.bench.suite import discover

SUITE = Path(__file__).resolve().parents[1] / "suite"
TASKS = discover(SUITE, SUITE / "candidates").tasks
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load(path: Path, name: str):
    assert os.environ.get("KERNELRL_SIZE") == "small"  # set by conftest before any task module is imported
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_reference(module, seed: int, inputs_seed: int):
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(inputs_seed)
    inputs = module.get_inputs()
    with torch.no_grad():
        return model(*inputs)


@pytest.fixture(scope="module", params=TASKS, ids=[t.name for t in TASKS])
def task(request):
    st = request.param
    return st, load(SUITE / st.rel_path, "suite_" + st.name.replace("/", "_"))


def test_the_task_declares_dtype_tolerances_and_a_one_line_description(task):
    st, _ = task
    meta = st.task.meta
    assert meta.dtype in DTYPES
    assert meta.atol is not None and meta.rtol is not None
    assert meta.description and "\n" not in meta.description


def test_the_reference_runs_in_its_dtype_with_finite_outputs(task):
    st, module = task
    out = run_reference(module, 0, 1)
    assert isinstance(out, torch.Tensor)
    assert out.dtype == DTYPES[st.task.meta.dtype]
    assert torch.isfinite(out.float()).all()


def test_the_reference_is_deterministic_given_the_seed(task):
    _, module = task
    assert torch.equal(run_reference(module, 0, 1), run_reference(module, 0, 1))


def test_the_output_is_not_constant(task):
    _, module = task
    a = run_reference(module, 0, 1).float()
    b = run_reference(module, 0, 2).float()
    assert not torch.allclose(a, b, rtol=1e-3, atol=1e-3), "other inputs must give other outputs"
    if a.numel() > 1:
        assert a.unique().numel() > min(16, a.numel() // 2), "the output must not be (nearly) constant"


def test_the_suite_has_both_full_precision_and_half_precision_tasks():
    dtypes = {t.task.meta.dtype for t in TASKS}
    assert "float32" in dtypes and dtypes & {"bfloat16", "float16"}


def test_every_task_has_a_small_size():
    for st in TASKS:
        assert "KERNELRL_SIZE" in st.task.source, f"{st.name} does not read KERNELRL_SIZE"


def test_the_tanh_gelu_tolerance_admits_other_tanh_implementations_and_refuses_half_precision_math():
    """tanh implementations part where tanh nears +-1: one that reaches +-1 at |z| = 5 is an honest fp32 GELU;
    the same GELU computed in fp16 or bf16 is not."""
    import math

    import torch.nn.functional as F

    from kernelrl.evaluate import compare as cmp

    st = next(t for t in TASKS if t.name == "level1/gelu_tanh_fp32")
    module = load(SUITE / st.rel_path, "suite_gelu_tolerance")
    want = run_reference(module, 0, 1)
    torch.manual_seed(1)
    (x,) = module.get_inputs()
    z = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
    saturating = 0.5 * x * (1.0 + torch.where(z.abs() >= 5.0, z.sign(), torch.tanh(z)))
    assert (saturating - want).abs().max() > 1.5e-4  # as far from the formula as the CPU that refused it before
    meta = st.task.meta
    assert cmp.compare(saturating, want, meta.atol, meta.rtol).ok
    for half in (torch.float16, torch.bfloat16):
        assert not cmp.compare(F.gelu(x.to(half), approximate="tanh").float(), want, meta.atol, meta.rtol).ok
