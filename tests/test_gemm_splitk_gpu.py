"""GPU specifications of the Triton split-K family: correct for every tile and split on ragged shapes, leaves
its workspace zeroed, works in CUDA graphs (a stream first seen during capture), on concurrent streams, and
steps aside for torch's deterministic mode."""
import pytest
import torch

pytestmark = pytest.mark.gpu

from kernelrl.gemm import check as chk  # noqa: E402
from kernelrl.gemm.registry import make_launcher  # noqa: E402
from kernelrl.gemm.space import SPLITK_TILES  # noqa: E402
from gemm_gpu_checks import captured, on_two_streams, replays_correctly  # noqa: E402

hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                            reason="tuned and tested on sm_90")


def _scratch_is_zero() -> bool:
    from kernelrl.gemm.triton_family import SCRATCH

    torch.cuda.synchronize()
    pairs = SCRATCH.all_buffers()
    return bool(pairs) and all(int(ws.count_nonzero()) == 0 and int(cnt.count_nonzero()) == 0 for ws, cnt in pairs)


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_split_k_tile_and_split_is_correct_on_a_ragged_shape_and_leaves_the_workspace_zeroed(dtype):
    m, n, k = 200, 136, 3000  # partial tiles in m and n, a K that no split divides evenly
    a, b = chk.random_inputs(m, n, k, dtype)
    ref = chk.reference(a, b)
    for cfg in SPLITK_TILES:
        for splits in (1, 3, 8, 16):
            name = cfg.with_splits(splits).name
            fn = make_launcher(name, m, n, k, dtype)
            res = chk.check(fn, a, b, ref)  # poisoned output, guard bands, two calls
            assert res.ok, (name, res.reason)
            c = torch.empty(m, n, device="cuda", dtype=dtype)
            for _ in range(3):  # repeated calls stay correct: each leaves the workspace and counters at zero
                fn(a, b, c)
            assert chk.rel_err(c, ref) <= 2 * chk.rel_err(torch.matmul(a, b), ref), name
    assert _scratch_is_zero()


@hopper
def test_split_k_replays_in_a_cuda_graph_captured_on_a_stream_it_has_not_seen():
    m, n, k = 128, 128, 8192
    fn = make_launcher("splitk:64x64x64_s4_w4/k32", m, n, k)
    # compiled and run eagerly first; the capture stream then takes a pre-zeroed spare workspace
    replays_correctly(*captured(fn, m, n, k, calls=4))
    assert _scratch_is_zero()


@hopper
def test_split_k_on_two_streams_at_once_stays_correct():
    m, n, k = 256, 256, 4096
    on_two_streams(make_launcher("splitk:64x64x64_s4_w4/k16", m, n, k), m, n, k)  # checks both results
    assert _scratch_is_zero()


@hopper
def test_split_k_runs_torch_matmul_in_deterministic_mode(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # what torch's deterministic cuBLAS needs
    m, n, k = 128, 64, 4096
    fn = make_launcher("splitk:64x64x64_s4_w4/k16", m, n, k)
    a, b = chk.random_inputs(m, n, k)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    torch.use_deterministic_algorithms(True)
    try:
        fn(a, b, c)
        want = torch.matmul(a, b)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(c, want)


@hopper
def test_adding_split_k_to_a_tuned_shape_records_its_candidates_and_decides_afresh():
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.space import splitk_candidates
    from kernelrl.gemm.tune import TuneOptions, augment_shape, tune_shape

    s = Shape(64, 64, 4096)
    opt = TuneOptions(lt_enum_top=0, triton_top=1, cutlass_top=1, splitk_top=0)
    rec = tune_shape(s, torch.float16, opt)
    assert not any(k.startswith("splitk:") for k in rec["candidates"])
    names = [c.name for c in splitk_candidates(s, 4)]
    new = augment_shape(rec, names, opt, tag="splitk")
    assert new["augmented"] == ["splitk"] and set(names) <= set(new["candidates"])
    assert all(new["candidates"][n]["ok"] and new["candidates"][n]["us"] > 0 for n in names)
    assert set(rec["candidates"]) <= set(new["candidates"])  # earlier results are kept
    assert new["best_us"] <= new["torch_us"] and new["best_rel_err"] <= 2 * new["torch_rel_err"]
