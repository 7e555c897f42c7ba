"""GPU specifications of the CUDA cluster split-K family: every tile and cluster size is correct on ragged,
even and uneven-split shapes in fp16 and bf16, replays in CUDA graphs, runs on two streams at once, gives
the same bits on every run (the reduction order is fixed), and refuses the problems it cannot run."""
import pytest
import torch

pytestmark = pytest.mark.gpu

from kernelrl.gemm import check as chk  # noqa: E402
from kernelrl.gemm.registry import make_launcher  # noqa: E402
from kernelrl.gemm.space import CLUSTERK_TILES  # noqa: E402
from gemm_gpu_checks import captured, on_two_streams, replays_correctly  # noqa: E402

hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                            reason="tuned and tested on sm_90")
SPLITS = (2, 4, 8, 16)


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(200, 136, 1000), (64, 64, 4096), (256, 384, 2048), (128, 128, 192)])
def test_every_tile_and_cluster_size_is_correct(dtype, shape):
    # ragged (partial tiles, K not a multiple of BK); one tile; several tiles; more splits than K steps
    # (the last blocks of a 16-block cluster get no K at all and add zeros)
    m, n, k = shape
    a, b = chk.random_inputs(m, n, k, dtype)
    ref = chk.reference(a, b)
    for tile in CLUSTERK_TILES:
        for s in SPLITS:
            cfg = tile.with_splits(s)
            res = chk.check(make_launcher(cfg.name, m, n, k, dtype), a, b, ref)  # poison, guard bands, 2 calls
            assert res.ok, (cfg.name, shape, res.reason)


# mma.sync; wgmma fed by cp.async; wgmma fed by the bulk tensor copy engine
MAIN_LOOPS = pytest.mark.parametrize("tile", ["64x64x64_s4_w4", "64x64x64_s8_w4_wg", "64x64x128_s6_w4_tma"])


@hopper
@MAIN_LOOPS
def test_results_are_the_same_bits_on_every_run(tile):
    m, n, k = 64, 128, 8192
    a, b = chk.random_inputs(m, n, k)
    fn = make_launcher(f"clusterk:{tile}/c16", m, n, k)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(5)]
    for c in outs:
        fn(a, b, c)
    torch.cuda.synchronize()
    assert all(torch.equal(outs[0], c) for c in outs[1:])


@hopper
@pytest.mark.parametrize("tile", ["64x128x64_s4_w4", "64x128x64_s6_w4_wg", "64x128x64_s6_w4_tma"])
def test_cluster_split_k_replays_in_a_cuda_graph_with_new_inputs(tile):
    m, n, k = 192, 256, 3072
    replays_correctly(*captured(make_launcher(f"clusterk:{tile}/c8", m, n, k), m, n, k))


@hopper
@MAIN_LOOPS
def test_two_streams_run_cluster_split_k_at_once(tile):
    m, n, k = 256, 256, 4096  # 16 tiles x 8 splits per launch: both streams' clusters fit on the GPU together
    on_two_streams(make_launcher(f"clusterk:{tile}/c8", m, n, k), m, n, k)


@hopper
def test_problems_the_kernel_cannot_run_are_refused_when_the_launcher_is_made():
    with pytest.raises(ValueError, match="multiples of 8"):
        make_launcher("clusterk:64x64x64_s4_w4/c4", 64, 68, 1024)  # N % 8 != 0: rows not 16-byte aligned
    with pytest.raises(ValueError, match="splits"):
        make_launcher("clusterk:64x64x64_s4_w4/c32", 64, 64, 1024)
