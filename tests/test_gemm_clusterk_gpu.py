"""GPU specifications of the CUDA cluster split-K family: every tile and cluster size, with one cluster per
output tile or several meeting in a workspace, is correct on ragged, even and uneven-split shapes in fp16
and bf16, replays in CUDA graphs, runs on two streams at once, gives the same bits on every run (the
reduction order is fixed), and refuses the problems it cannot run."""
import pytest
import torch

pytestmark = pytest.mark.gpu

from kernelrl.gemm import check as chk  # noqa: E402
from kernelrl.gemm.registry import make_launcher  # noqa: E402
from kernelrl.gemm.space import CLUSTERK_TILES, cluster_wave_blocks  # noqa: E402
from gemm_gpu_checks import captured, on_two_streams, replays_correctly  # noqa: E402

hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                            reason="tuned and tested on sm_90")
SPLITS = (2, 4, 8, 16)
FILL = (3, 5, 6, 7, 9, 10, 11, 12, 13)  # cluster sizes that do not divide the tile's rows: each owns ceil(BM / splits)


# (tile, cluster size, clusters per tile): every main loop, clusters of 2 to 16, 2 to 32 groups, and group
# counts that are not powers of two (uneven slices of K; the search proposes those that fill a wave)
GROUPED = [("64x64x128_s6_w4_tma", 8, 4), ("64x64x64_s8_w4_wg", 4, 8), ("64x128x64_s3_w4_tma", 2, 16),
           ("128x64x128_s3_w8_tma", 16, 2), ("64x64x128_s4_w4_tma", 4, 32), ("64x64x128_s4_w4_tma", 8, 15),
           ("64x64x64_s8_w4_wg", 4, 7), ("32x32x64_s4_w4", 8, 19), ("32x32x128_s3_w4", 16, 5),
           ("32x64x64_s4_w4", 8, 2)]
NAMES = ([tile.with_splits(s).name for tile in CLUSTERK_TILES for s in SPLITS + FILL]
         + [f"clusterk:{tile}/c{s}g{g}" for tile, s, g in GROUPED])


def grouped(name: str) -> bool:
    return "g" in name.rsplit("/", 1)[1]


def counters_are_zero(fn) -> bool:
    """Every workspace counter of a grouped launcher is back at 0 (each launch resets what it counted)."""
    torch.cuda.synchronize()
    return all(not bool(bufs[1].any()) for _, _, bufs in fn.workspaces.values())


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(200, 136, 1000), (64, 64, 4096), (64, 64, 16384), (256, 384, 2048),
                                   (128, 128, 192)])
def test_every_tile_cluster_size_and_grouping_is_correct(dtype, shape):
    # ragged (partial tiles, K not a multiple of BK); one tile; several tiles; more splits than K steps
    # (the last blocks of a 16-block cluster, or whole groups of clusters, get no K at all and add zeros)
    m, n, k = shape
    a, b = chk.random_inputs(m, n, k, dtype)
    ref = chk.reference(a, b)
    for name in NAMES:
        fn = make_launcher(name, m, n, k, dtype)
        res = chk.check(fn, a, b, ref)  # poison, guard bands, 2 calls
        assert res.ok, (name, shape, res.reason)
        assert not grouped(name) or counters_are_zero(fn), name


# mma.sync; wgmma fed by cp.async; wgmma fed by the bulk tensor copy engine
MAIN_LOOPS = pytest.mark.parametrize("tile", ["64x64x64_s4_w4", "64x64x64_s8_w4_wg", "64x64x128_s6_w4_tma"])


@hopper
@pytest.mark.parametrize("name", ["64x64x64_s4_w4/c16", "64x64x64_s8_w4_wg/c16", "64x64x128_s6_w4_tma/c16",
                                  "64x64x128_s6_w4_tma/c4g8", "64x64x64_s4_w4/c7", "128x64x64_s3_w8_tma/c6",
                                  "32x32x64_s4_w4/c16", "32x32x128_s3_w4/c8g4"])
def test_results_are_the_same_bits_on_every_run(name):
    # the reduction order is fixed; with groups, whichever cluster of a tile arrives last adds the groups' sums,
    # always in group order
    m, n, k = 64, 128, 8192
    a, b = chk.random_inputs(m, n, k)
    fn = make_launcher(f"clusterk:{name}", m, n, k)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(20)]
    for c in outs:
        fn(a, b, c)
    torch.cuda.synchronize()
    assert all(torch.equal(outs[0], c) for c in outs[1:])


@hopper
@pytest.mark.parametrize("name", ["64x128x64_s4_w4/c8", "64x128x64_s6_w4_wg/c8", "64x128x64_s6_w4_tma/c8",
                                  "64x128x64_s6_w4_tma/c4g4"])
def test_cluster_split_k_replays_in_a_cuda_graph_with_new_inputs(name):
    m, n, k = 192, 256, 3072
    fn = make_launcher(f"clusterk:{name}", m, n, k)
    replays_correctly(*captured(fn, m, n, k, calls=3))  # three launches per replay: the counters reset each time
    assert not grouped(f"clusterk:{name}") or counters_are_zero(fn)


@hopper
@MAIN_LOOPS
def test_two_streams_run_cluster_split_k_at_once(tile):
    m, n, k = 256, 256, 4096  # 16 tiles x 8 splits per launch: both streams' clusters fit on the GPU together
    on_two_streams(make_launcher(f"clusterk:{tile}/c8", m, n, k), m, n, k)


@hopper
def test_two_streams_run_groups_of_clusters_at_once_each_with_its_own_workspace():
    m, n, k = 128, 128, 8192  # 4 tiles x 4 groups x 4 splits per launch
    fn = make_launcher("clusterk:64x64x128_s6_w4_tma/c4g4", m, n, k)
    streams = on_two_streams(fn, m, n, k)
    mine = [fn.workspaces[s.cuda_stream][0] for s in streams]
    assert len(set(mine)) == 2  # sharing one workspace, the streams' groups would mix their sums
    assert counters_are_zero(fn)


@hopper
def test_problems_the_kernel_cannot_run_are_refused_when_the_launcher_is_made():
    with pytest.raises(ValueError, match="multiples of 8"):
        make_launcher("clusterk:64x64x64_s4_w4/c4", 64, 68, 1024)  # N % 8 != 0: rows not 16-byte aligned
    for splits in ("c32", "c14", "c15", "c6g2"):  # too large; not a power of two above 13; groups of a fill size
        with pytest.raises(ValueError, match="splits"):
            make_launcher(f"clusterk:64x64x64_s4_w4/{splits}", 64, 64, 1024)
    with pytest.raises(ValueError, match="groups"):
        make_launcher("clusterk:64x64x64_s4_w4/c2g2048", 64, 64, 1024)


@hopper
def test_the_search_knows_how_many_sms_each_cluster_size_fills():
    # the cost model's blocks per wave of clusters against CUDA's occupancy calculator, for every compiled
    # tile: a launch of more blocks than this runs a second wave
    from kernelrl.gemm.clusterk import max_active_clusters

    for tile in CLUSTERK_TILES:
        for s in SPLITS + FILL:
            for groups in ((1, 2) if s in SPLITS else (1,)):
                cfg = tile.with_splits(s, groups)
                assert max_active_clusters(cfg) * s == cluster_wave_blocks(s, tile.resident), cfg.name
                assert max_active_clusters(cfg, torch.bfloat16) == max_active_clusters(cfg), cfg.name
