"""The suite's honest candidates: same math and precision as their references. Pure-PyTorch ones are
checked here on CPU; CUDA ones are compile-checked with nvcc (when present); all run on a GPU when there is one."""
import ast
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kernelrl.bench.suite import discover
from kernelrl.task import Candidate

SUITE = Path(__file__).resolve().parents[1] / "suite"
PAIRED = [t for t in discover(SUITE, SUITE / "candidates").tasks if t.candidate_path]
BY_LANGUAGE = {lang: [t for t in PAIRED if Candidate.from_file(t.candidate_path).language == lang]
               for lang in ("python", "cuda", "triton")}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def literals(path) -> dict:
    tree = ast.parse(Path(path).read_text())
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}


def test_a_quarter_of_the_suite_has_candidates_in_every_language():
    assert len(PAIRED) >= 11
    assert all(len(BY_LANGUAGE[lang]) >= 3 for lang in BY_LANGUAGE)


@pytest.mark.parametrize("st", BY_LANGUAGE["python"], ids=lambda t: t.name)
def test_a_pytorch_candidate_matches_its_reference_on_cpu(st):
    ref = load(SUITE / st.rel_path, "ref_" + st.name.replace("/", "_"))
    cand = load(st.candidate_path, "cand_" + st.name.replace("/", "_"))
    torch.manual_seed(0)
    model = ref.Model(*ref.get_init_inputs())
    torch.manual_seed(0)
    new = cand.ModelNew(*ref.get_init_inputs())
    meta = st.task.meta
    for seed in (1, 2):
        torch.manual_seed(seed)
        inputs = ref.get_inputs()
        with torch.no_grad():
            want = model(*[x.clone() for x in inputs])
            got = new(*[x.clone() for x in inputs])
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=meta.atol, rtol=meta.rtol)


def load_inline_options(path) -> dict:
    calls = [n for n in ast.walk(ast.parse(Path(path).read_text()))
             if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "load_inline"]
    assert len(calls) == 1, f"{path}: expected one load_inline call"
    return {k.arg: ast.literal_eval(k.value) for k in calls[0].keywords if k.arg in ("name", "extra_cuda_cflags")}


def test_cuda_candidates_build_under_unique_names():
    names = [load_inline_options(t.candidate_path)["name"] for t in BY_LANGUAGE["cuda"]]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("st", BY_LANGUAGE["cuda"], ids=lambda t: t.name)
def test_a_cuda_candidate_builds_with_O3(st):
    assert "-O3" in load_inline_options(st.candidate_path)["extra_cuda_cflags"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("st", BY_LANGUAGE["cuda"], ids=lambda t: t.name)
def test_a_cuda_candidates_kernels_compile_for_hopper(st, tmp_path):
    src = tmp_path / "kernels.cu"
    src.write_text(literals(st.candidate_path)["KERNELS"])
    res = subprocess.run(["nvcc", "-arch=sm_90", "-O3", "-std=c++17", "-c", str(src), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


@pytest.fixture(scope="module")
def gpu_ev(tmp_path_factory):
    from kernelrl.evaluate import EvalConfig, Evaluator

    # Correctness and every integrity check as always; fewer timed calls (bench times the suite in full).
    cfg = EvalConfig(device="cuda", cache_dir=str(tmp_path_factory.mktemp("cache")), timing_rounds=2,
                     timing_precision=0, calls_per_round=8)
    with Evaluator(cfg) as ev:
        yield ev


@pytest.mark.gpu
@pytest.mark.parametrize("st", PAIRED, ids=lambda t: t.name)
def test_every_candidate_is_judged_correct_on_the_gpu(st, gpu_ev):
    v = gpu_ev.evaluate(st.task, Candidate.from_file(st.candidate_path))
    assert v.status == "ok", v.message + repr(v.flags)
