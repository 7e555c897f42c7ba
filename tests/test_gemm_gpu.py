"""GPU specifications of kernelrl.gemm: every family is correct, the dispatch is correct over many shapes,
adds no allocation or synchronisation, and works under CUDA graphs and torch.compile."""
import json
import random

import pytest
import torch

pytestmark = pytest.mark.gpu

from kernelrl.gemm import check as chk  # noqa: E402
from kernelrl.gemm.dispatch import Dispatcher, default_dispatcher, matmul, warmup  # noqa: E402
from kernelrl.gemm.registry import make_launcher  # noqa: E402
from kernelrl.gemm.shapes import Shape  # noqa: E402
from kernelrl.gemm.space import CUTLASS_CONFIGS, TRITON_CONFIGS, CutlassVariant  # noqa: E402
from kernelrl.gemm.table import Entry, Table  # noqa: E402
from gemm_gpu_checks import captured, close, replays_correctly  # noqa: E402

hopper = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                            reason="the Triton TMA and CUTLASS kernels are built for sm_90a")


def _kind(name: str) -> str:
    """A kernel's family; cluster split-K with several clusters per tile (a workspace per stream) apart."""
    fam = name.split(":")[0]
    return f"{fam} grouped" if fam == "clusterk" and "g" in name.rsplit("/", 1)[1] else fam


def _tuned(n, seed=0, dtype="fp16"):
    """About n tuned (not torch) shapes of the committed table, spread over families (at least one each)."""
    names = default_dispatcher().table.lookup()
    keys = sorted((k for k in names if k[3] == dtype), key=lambda k: k[0] * k[1] * k[2])
    by_fam = {}
    for k in keys:
        by_fam.setdefault(_kind(names[k]), []).append(k)
    rng = random.Random(seed)
    picked = []
    for fam, ks in by_fam.items():
        small = [k for k in ks if k[0] * k[1] * k[2] <= 4096 ** 3]
        picked += rng.sample(small, min(len(small), max(1, n // len(by_fam))))  # every family, at least once
    return [Shape(m, n_, k) for m, n_, k, _ in picked]


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_triton_configuration_is_correct(dtype):
    a, b = chk.random_inputs(320, 192, 1088, dtype)  # ragged: partial tiles in m, n and k
    ref = chk.reference(a, b)
    for cfg in TRITON_CONFIGS:
        res = chk.check(make_launcher(cfg.name, 320, 192, 1088, dtype), a, b, ref)
        assert res.ok, (cfg.name, res.reason)


@hopper
@pytest.mark.parametrize("name", ["triton:64x64x128_s4_w4", "triton:64x64x128_s4_w4_ws", "tiled:64x64x128_s3_w4",
                                  "splitk:64x64x64_s4_w4/k4"])
def test_a_triton_launcher_takes_the_c_entry_and_stays_correct_as_its_operands_move(name):
    import triton

    from kernelrl.gemm.triton_family import _TENSOR_MAPS, DIRECT_TRITON

    m, n, k = 320, 192, 1088
    fn = make_launcher(name, m, n, k)
    a, b = chk.random_inputs(m, n, k)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(_TENSOR_MAPS + 6)]
    fn(a, b, outs[0])  # compiles
    assert fn.direct == triton.__version__.startswith(tuple(v + "." for v in DIRECT_TRITON))
    for c in outs:  # more output addresses than tensor maps kept per operand
        fn(a, b, c)
    assert all(close(c, a, b) for c in outs)
    a2, b2 = chk.random_inputs(m, n, k)
    a.copy_(a2)  # the same addresses with new values
    b.copy_(b2)
    fn(a, b, outs[1])
    assert close(outs[1], a2, b2)
    a3, b3 = chk.random_inputs(m, n, k)  # new addresses
    fn(a3, b3, outs[2])
    assert close(outs[2], a3, b3)
    replays_correctly(*captured(fn, m, n, k))


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_cutlass_configuration_and_decomposition_is_correct(dtype):
    from kernelrl.gemm.cutlass import built_for

    if not built_for(dtype):
        pytest.skip("the CUTLASS library was built without bf16 kernels (`kernelrl gemm build --bf16`)")
    a, b = chk.random_inputs(384, 256, 4096, dtype)
    ref = chk.reference(a, b)
    variants = [CutlassVariant(c, decomposition=1 if c.streamk else 0) for c in CUTLASS_CONFIGS]
    variants += [CutlassVariant(CUTLASS_CONFIGS[0], decomposition=d, splits=s) for d, s in ((2, 4), (3, 1))]
    for v in variants:
        res = chk.check(make_launcher(v.name, 384, 256, 4096, dtype), a, b, ref)
        assert res.ok, (v.name, res.reason)


@hopper
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_larger_epilogue_subtiles_write_exactly_the_output_on_ragged_and_write_bound_shapes(dtype):
    """The ping-pong kernels that write C in 64 x 128 subtiles: a ragged output (partial tiles and subtiles in M
    and N), and a write-bound one (one K step per tile); the guard bands around C catch a subtile written
    past its edge."""
    from kernelrl.gemm.cutlass import built_for
    from kernelrl.gemm.space import CUTLASS_EPI_CONFIGS

    if not built_for(dtype):
        pytest.skip("the CUTLASS library was built without bf16 kernels (`kernelrl gemm build --bf16`)")
    for m, n, k in ((200, 328, 264), (1000, 2056, 64)):
        a, b = chk.random_inputs(m, n, k, dtype)
        ref = chk.reference(a, b)
        for cfg in CUTLASS_EPI_CONFIGS:
            name = CutlassVariant(cfg).name
            res = chk.check(make_launcher(name, m, n, k, dtype), a, b, ref)
            assert res.ok, (name, m, n, k, res.reason)


@hopper
def test_every_raster_order_and_swizzle_writes_exactly_the_output():
    """The run-time variants the dispatch may take (`space.cutlass_runtime_variants`: raster along M or N,
    swizzles 1, 2, 4, 8) on a ragged output of several waves of tiles, inside guard bands, for a ping-pong kernel
    with the larger subtile and one without."""
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.space import CutlassConfig, cutlass_runtime_variants

    m, n, k = 2100, 4200, 136  # 17 x 33 = 561 tiles of 128x128: above two waves, partial tiles in M, N and K
    a, b = chk.random_inputs(m, n, k)
    ref = chk.reference(a, b)
    for cfg in (CutlassConfig(128, 128, 64, pingpong=True, epi_n=128), CutlassConfig(128, 128, 64, pingpong=True)):
        base, far = CutlassVariant(cfg), CutlassVariant(cfg, raster=2, swizzle=8)
        variants = [base, far, *cutlass_runtime_variants(base, Shape(m, n, k)),
                    *cutlass_runtime_variants(far, Shape(m, n, k))]
        assert {(v.raster, v.swizzle) for v in variants} >= {(1, 1), (2, 1), (0, 2), (0, 4), (0, 8), (1, 8), (2, 8)}
        for v in dict.fromkeys(variants):
            res = chk.check(make_launcher(v.name, m, n, k), a, b, ref)
            assert res.ok, (v.name, res.reason)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cublaslt_heuristic_algorithms_are_correct(dtype):
    from kernelrl.gemm import cublaslt

    a, b = chk.random_inputs(256, 512, 2048, dtype)
    ref = chk.reference(a, b)
    for algo in cublaslt.heuristics(256, 512, 2048, dtype, count=8):
        assert chk.check(make_launcher(algo.name, 256, 512, 2048, dtype), a, b, ref).ok


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_enumerated_cublaslt_space_goes_beyond_the_heuristic_and_its_picks_are_correct(dtype):
    from kernelrl.gemm import cublaslt

    m, n, k = 1024, 2048, 4096
    space, checked = cublaslt.enumerate_space(m, n, k, dtype)
    known = {cublaslt.config_key(a.info) for a in cublaslt.heuristics(m, n, k, dtype, count=64)}
    keys = {cublaslt.config_key(c.algo.info) for c in space}
    assert checked >= len(space) > 0 and keys - known, (checked, len(space))
    picked = cublaslt.pick([(c.algo.info, c.waves) for c in space], known, 8)
    assert len(picked) == min(8, len(keys - known))
    a, b = chk.random_inputs(m, n, k, dtype)
    ref = chk.reference(a, b)
    for i in picked:
        res = chk.check(make_launcher(space[i].algo.name, m, n, k, dtype), a, b, ref)
        assert res.ok, (space[i].algo.info, res.reason)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cublaslt_neighbours_differ_from_their_base_in_one_attribute_and_are_correct(dtype):
    from kernelrl.gemm import cublaslt

    m, n, k = 1024, 2048, 4096
    listed = cublaslt.heuristics(m, n, k, dtype, count=32)
    base = listed[0]
    tiles = tuple(dict.fromkeys(a.info["tile"] for a in listed))
    near = cublaslt.neighbours(base, m, n, k, dtype, tiles=tiles, splits=tuple(cublaslt.splits_near(1)))
    kinds = [cublaslt.changed_attribute(base.info, a.info) for a in near]
    # every neighbour changes one attribute, never the same configuration twice; other tiles and split counts
    # are among them
    assert near and None not in kinds and {"tile", "splitk"} <= set(kinds), kinds
    assert len({cublaslt.config_key(a.info) for a in near}) == len(near)
    assert {a.info["tile"] for a in near} <= set(tiles)
    a, b = chk.random_inputs(m, n, k, dtype)
    ref = chk.reference(a, b)
    picked = cublaslt.interleave([x.info for x in near], base.info, 8)
    assert {"tile", "splitk"} <= {kinds[i] for i in picked}
    for i in picked:
        res = chk.check(make_launcher(near[i].name, m, n, k, dtype), a, b, ref)
        assert res.ok, (near[i].info, res.reason)


@hopper
def test_gate_rejects_fp16_accumulation():
    from kernelrl.gemm import triton_family

    a, b = chk.random_inputs(256, 256, 1024)
    ref = chk.reference(a, b)
    res = chk.check(triton_family.make_launcher(TRITON_CONFIGS[2], 256, 256, 1024, acc_fp16=True), a, b, ref)
    assert not res.ok and "relative error" in res.reason


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_matmul_is_correct_on_tuned_shapes_of_every_family(dtype):
    shapes = _tuned(24, dtype=dtype)
    assert shapes, f"the committed table has no tuned {dtype} shapes"
    names = default_dispatcher().table.lookup()
    tested = {_kind(names[(s.m, s.n, s.k, dtype)]) for s in shapes}
    # every family the table runs on a shape of at most 4096^3 (larger ones take long to check)
    assert tested == {_kind(k) for key, k in names.items() if key[3] == dtype and key[0] * key[1] * key[2] <= 4096 ** 3}
    tdtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    for s in shapes:
        a, b = chk.random_inputs(s.m, s.n, s.k, tdtype)
        ref = chk.reference(a, b)
        err = chk.rel_err(matmul(a, b), ref)
        torch_err = chk.rel_err(torch.matmul(a, b), ref)
        assert err <= 2 * torch_err, (s, default_dispatcher().kernel_for(s.m, s.n, s.k, tdtype), err)


def test_matmul_returns_a_fresh_tensor_of_the_inputs_dtype_and_device():
    s = _tuned(3)[0]
    a, b = chk.random_inputs(s.m, s.n, s.k)
    c = matmul(a, b)
    assert type(c) is torch.Tensor and c.dtype == a.dtype and c.shape == (s.m, s.n) and c.is_contiguous()
    assert c.data_ptr() not in (a.data_ptr(), b.data_ptr())


def test_matmul_falls_back_for_a_transposed_input_and_stays_correct():
    s = _tuned(3)[0]
    a, b = chk.random_inputs(s.m, s.n, s.k)
    bt = b.t().contiguous().t()  # same values, not contiguous
    assert torch.allclose(matmul(a, bt).float(), torch.matmul(a, b).float(), rtol=1e-2, atol=1e-1)


def test_matmul_allocates_only_its_output_and_never_synchronises():
    shapes = _tuned(6)
    warmup(shapes)
    for s in shapes:
        a, b = chk.random_inputs(s.m, s.n, s.k)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(5):
                matmul(a, b)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 5, s


def test_matmul_replays_correctly_in_a_cuda_graph():
    for s in _tuned(6, seed=1):
        a, b = chk.random_inputs(s.m, s.n, s.k)
        warmup([s])
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            c = matmul(a, b)
        a2, b2 = chk.random_inputs(s.m, s.n, s.k)  # new values through the captured buffers
        a.copy_(a2)
        b.copy_(b2)
        g.replay()
        torch.cuda.synchronize()
        ref = chk.reference(a2, b2)
        assert chk.rel_err(c, ref) <= 2 * chk.rel_err(torch.matmul(a2, b2), ref), s


def test_matmul_compiles_with_torch_compile_without_graph_breaks():
    s = _tuned(3, seed=2)[0]

    def f(x, y):
        return torch.relu(matmul(x, y)) * 2

    compiled = torch.compile(f, fullgraph=True)
    a, b = chk.random_inputs(s.m, s.n, s.k)
    got = compiled(a, b)
    want = torch.relu(torch.matmul(a, b)) * 2
    assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=5e-2)


_NATIVE_KIND = {"cublaslt": "plan", "cutlass": "plan", "clusterk": "clusterk", "clusterk grouped": "clusterk",
                "tiled": "python", "triton": "python", "splitk": "python"}


@hopper
def test_the_cpp_hot_path_launches_every_family_as_the_python_dispatch_does(fastpath_module):
    table = default_dispatcher().table
    fast, slow = Dispatcher(table, fastpath=fastpath_module), Dispatcher(table, fastpath=False)
    families = set()
    for s in _tuned(24, seed=3):
        name = fast.kernel_for(s.m, s.n, s.k, torch.float16)
        a, b = chk.random_inputs(s.m, s.n, s.k)
        first = fast(a, b)  # decided in Python, added to the C++ table
        kind = fast._native.kind_of(a, b)
        assert kind == _NATIVE_KIND[_kind(name)], (s, name, kind)
        c = fast(a, b)  # through C++
        assert close(c, a, b) and close(first, a, b) and close(slow(a, b), a, b), (s, name)
        assert c.shape == (s.m, s.n) and c.data_ptr() not in (a.data_ptr(), b.data_ptr())
        if kind == "plan" or "g" in name.rsplit("/", 1)[-1]:  # per-stream state: one stream learned so far
            assert fast._native.streams_of(a, b) == 1, (s, name)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                c2 = fast(a, b)  # a new stream: prepared by the Python launcher, then learned
                c3 = fast(a, b)
            torch.cuda.current_stream().wait_stream(side)
            assert fast._native.streams_of(a, b) == 2 and close(c2, a, b) and close(c3, a, b), (s, name)
        families.add(_kind(name))
    in_table = {_kind(k) for key, k in table.lookup().items() if key[3] == "fp16" and key[0] * key[1] * key[2] <= 4096 ** 3}
    assert families == in_table and len(families) >= 2, (families, in_table)  # every family this GPU's table runs


@hopper
def test_the_cpp_hot_path_captures_in_a_cuda_graph_on_a_stream_it_has_not_seen(fastpath_module):
    table = default_dispatcher().table
    d = Dispatcher(table, fastpath=fastpath_module)
    for s in _tuned(8, seed=4):
        a, b = chk.random_inputs(s.m, s.n, s.k)
        d(a, b)
        d(a, b)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):  # torch's capture stream: new to every launcher
            c = d(a, b)
        replays_correctly(g, a, b, c)


def test_a_shape_whose_kernel_cannot_load_falls_back_to_torch_with_a_warning():
    d = Dispatcher(Table((Entry(128, 128, 128, "fp16", "cutlass:coop_9x9x9_c1x1_p/auto_r0_s1", 1.0, 2.0),)))
    a, b = chk.random_inputs(128, 128, 128)
    with pytest.warns(RuntimeWarning, match="using torch.matmul"):
        c = d(a, b)
    assert torch.equal(c, torch.matmul(a, b))


def test_a_tuned_shape_records_the_enumerated_cublaslt_candidates_and_a_correct_winner():
    from kernelrl.gemm.tune import TuneOptions, tune_shape

    rec = tune_shape(Shape(1024, 2048, 4096), torch.float16, TuneOptions(lt_enum_top=4, triton_top=1, cutlass_top=1))
    enumerated = [k for k in rec["candidates"] if k.startswith("cublaslt#") and k.endswith("e")]
    assert 1 <= len(enumerated) <= 4 and rec["lt_space"] > 0 and rec["lt_checks"] >= rec["lt_space"]
    assert all(rec["candidates"][k]["ok"] for k in enumerated), {k: rec["candidates"][k] for k in enumerated}
    assert rec["best_label"] in rec["candidates"] and rec["candidates"][rec["best_label"]]["ok"]
    assert rec["best_us"] <= rec["torch_us"] and rec["best_rel_err"] <= 2 * rec["torch_rel_err"]


def test_a_bf16_search_seeded_with_fp16_winners_times_them_and_keeps_a_correct_winner():
    from kernelrl.gemm import cublaslt
    from kernelrl.gemm.tune import SEEDED, tune_shape

    s = Shape(256, 256, 4096)
    fp16_algo = cublaslt.heuristics(s.m, s.n, s.k, torch.float16, count=1)[0].name  # checked afresh for bf16
    seeds = ("clusterk:64x64x64_s5_w4_tma/c8", "tiled:64x64x128_s3_w4", fp16_algo)
    rec = tune_shape(s, torch.bfloat16, SEEDED, seeds)
    assert rec["dtype"] == "bf16" and rec["seeds"] == list(seeds)
    for name in seeds[:2]:  # the seeds were checked and timed in bf16
        assert rec["candidates"][name]["ok"] and rec["candidates"][name]["us"] > 0, rec["candidates"][name]
    assert rec["best_label"] in rec["candidates"] and rec["best_rel_err"] <= 2 * rec["torch_rel_err"]
    assert rec["best_us"] <= rec["torch_us"]
    winner = make_launcher(rec["best"], s.m, s.n, s.k, torch.bfloat16) if rec["best"] != "torch" else None
    if winner is not None:
        a, b = chk.random_inputs(s.m, s.n, s.k, torch.bfloat16)
        assert chk.check(winner, a, b, chk.reference(a, b)).ok


def test_a_benchmark_row_has_every_column_and_paired_speedups_that_agree_with_its_times():
    from kernelrl.gemm.bench import PAIRED, bench_shape, columns
    from kernelrl.gemm.timing import L2Flusher

    s = Shape(512, 512, 4096)
    tiled = "tiled:64x64x128_s3_w4"
    d = Dispatcher(Table((Entry(s.m, s.n, s.k, "fp16", tiled, 1.0, 1.0),)))
    record = {"dtype": "fp16", "cublaslt_heuristic": None, "cublaslt_autotune": None}
    row = bench_shape(s, torch.float16, record, d, L2Flusher(), random.Random(0))
    assert row["kernel"] == tiled and row["rel_err"] < 2 * row["torch_rel_err"]
    assert set(row) <= set(columns())
    # torch.matmul against itself: the paired median sits at 1 within replay noise, inside its own interval
    assert row["control_ci_lo"] <= row[PAIRED["torch_control"]] <= row["control_ci_hi"]
    assert 0.9 < row[PAIRED["torch_control"]] < 1.1
    # the paired speedup lies inside its interval and near the ratio of the two medians
    assert row["speedup_ci_lo"] <= row[PAIRED["torch"]] <= row["speedup_ci_hi"]
    assert row[PAIRED["torch"]] == pytest.approx(row["torch_us"] / row["kernelrl_us"], rel=0.1)
    assert row[PAIRED["cublaslt_autotune"]] == ""  # no baseline recorded: no paired figure either


def test_an_nt_layout_row_times_f_linear_against_the_relaid_weight():
    from kernelrl.gemm.bench import PAIRED, bench_shape
    from kernelrl.gemm.timing import L2Flusher

    s = Shape(256, 512, 1024)
    tiled = "tiled:64x64x128_s3_w4"
    d = Dispatcher(Table((Entry(s.m, s.n, s.k, "fp16", tiled, 1.0, 1.0),)))
    record = {"dtype": "fp16", "cublaslt_heuristic": None, "cublaslt_autotune": None}
    row = bench_shape(s, torch.float16, record, d, L2Flusher(), random.Random(0), layout="nt")
    assert row["layout"] == "nt" and row["kernel"] == tiled and row["rel_err"] < 2 * row["torch_rel_err"]
    assert row["weight"] == "relaid"  # a tuned kernel and no F.linear times: patch lays the layer out
    assert 0.9 < row[PAIRED["torch_control"]] < 1.1  # F.linear against itself
    assert row["torch_us"] > 0 and row["kernelrl_us"] > 0
    # measured slower than F.linear at one token count: patch keeps the layer's weight, the row times F.linear
    d = Dispatcher(Table((Entry(s.m, s.n, s.k, "fp16", tiled, 1.0, 1.0, 0.9),)))
    row = bench_shape(s, torch.float16, record, d, L2Flusher(), random.Random(0), layout="nt")
    assert row["weight"] == "kept" and row["kernel"] == "torch" and row["rel_err"] == row["torch_rel_err"]
    assert 0.9 < row[PAIRED["torch"]] < 1.1


def test_timing_against_f_linear_records_each_shapes_ratio_and_resumes(tmp_path):
    from kernelrl.gemm.table import from_records, read_records
    from kernelrl.gemm.tune import against_linear

    path = tmp_path / "records.jsonl"
    recs = [{"m": 64, "n": 512, "k": 1024, "dtype": "fp16", "best": "tiled:64x64x128_s3_w4", "best_us": 1.0,
             "torch_us": 1.0},
            {"m": 128, "n": 512, "k": 1024, "dtype": "fp16", "best": "torch", "best_us": 1.0, "torch_us": 1.0},
            {"m": 128, "n": 512, "k": 1024, "dtype": "bf16", "best": "torch", "best_us": 1.0, "torch_us": 1.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert against_linear(path, dtype="fp16", log=lambda _: None) == 0
    got = {(r["m"], r["dtype"]): r for r in read_records(path)}
    assert len(got) == 3 and "vs_linear" not in got[(128, "bf16")]  # one record per shape; the other dtype left
    for key in ((64, "fp16"), (128, "fp16")):
        r = got[key]
        assert r["linear_us"] > 0 and r["relaid_us"] > 0 and r["vs_linear_ci"][0] <= r["vs_linear"] <= r["vs_linear_ci"][1]
        assert r["vs_linear"] == pytest.approx(r["linear_us"] / r["relaid_us"], rel=0.15)
    assert from_records(read_records(path), {}).entries[0].vs_linear == got[(64, "fp16")]["vs_linear"]
    before = path.read_text()
    assert against_linear(path, dtype="fp16", log=lambda _: None) == 0 and path.read_text() == before  # visited once


def test_placed_timing_spreads_its_rounds_over_fresh_buffers_each_with_its_own_graphs():
    from kernelrl.gemm import timing as tm

    inp = tm.Inputs(256, 256, 256, torch.float16)
    read: set[int] = set()

    def probe(a, b):  # called while each graph is captured: notes the buffers that graph reads
        read.add(a.data_ptr())
        return torch.matmul(a, b)

    per_round: dict = {}
    med = tm.time_graphs_placed({"torch": (torch.matmul, False), "probe": (probe, False)}, inp, 4, 7, 3,
                                random.Random(0), per_round)
    assert set(med) == {"torch", "probe"} and all(v > 0 for v in med.values())
    assert [len(v) for v in per_round.values()] == [9, 9]  # ceil(7 / 3) rounds on each of three placements
    first = {a.data_ptr() for a in inp.a[:4]}
    assert first < read and len(read) == 3 * len(first)  # the given buffers, then two fresh sets, all distinct
