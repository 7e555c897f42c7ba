"""CPU specifications of kernelrl.gemm: shapes, search space and pruning, correctness gate, table, tuner
resume, dispatch fallback, report and CLI."""
import gzip
import json
import lzma
import math
import shutil
import statistics
import subprocess
import sys
import types

import pytest
import torch
from typer.testing import CliRunner

from kernelrl.gemm import check as chk
from kernelrl.gemm.cli import app
from kernelrl.gemm.dispatch import Dispatcher, matmul
from kernelrl.gemm.report import markdown, read_rows, summarise, write_report
from kernelrl.gemm.shapes import GRID_SIZES, Shape, grid, read_shapes
from kernelrl.gemm.space import (CLUSTERK_TILES, CUTLASS_CONFIGS, SMEM_BYTES, SPLITK_MAX_OUTPUT, SPLITK_TILES,
                                 TILED_CONFIGS, TILED_SEARCH_MAX_EST_US, TRITON_CONFIGS, ClusterKConfig,
                                 CutlassVariant, SplitKConfig, TiledConfig, TritonConfig, cluster_wave_blocks,
                                 clusterk_candidates, clusterk_grouped_candidates, cutlass_candidates, estimate_us,
                                 roofline_us, splitk_candidates, tiled_candidates, triton_candidates)
from kernelrl.gemm.table import Entry, Table, from_records, read_records
from kernelrl.gemm.tune import done_keys, plain_results

runner = CliRunner()


# --- shapes ---------------------------------------------------------------------------------------------
def test_grid_is_the_1000_distinct_shapes_of_the_cuda_l2_sizes():
    shapes = grid()
    assert len(shapes) == 1000 and len(set(shapes)) == 1000
    assert {s.m for s in shapes} == set(GRID_SIZES) == {s.k for s in shapes}


def test_shape_parses_mxnxk_and_says_how_to_write_a_bad_one():
    assert Shape.parse("4096x1024x64") == Shape(4096, 1024, 64)
    with pytest.raises(ValueError, match="MxNxK"):
        Shape.parse("4096x1024")


def test_read_shapes_takes_a_list_or_a_csv(tmp_path):
    assert read_shapes("64x64x64,128x256x512") == [Shape(64, 64, 64), Shape(128, 256, 512)]
    f = tmp_path / "s.csv"
    f.write_text("m,n,k\n64,128,256\n")
    assert read_shapes(str(f)) == [Shape(64, 128, 256)]


# --- search space and pruning ---------------------------------------------------------------------------
def test_every_triton_configuration_fits_shared_memory_and_round_trips_its_name():
    for c in TRITON_CONFIGS:
        assert c.smem_bytes <= SMEM_BYTES
        assert TritonConfig.parse(c.name) == c


def test_cutlass_variant_names_round_trip():
    for c in CUTLASS_CONFIGS:
        for v in (CutlassVariant(c), CutlassVariant(c, decomposition=2, splits=4, raster=1, swizzle=2)):
            assert CutlassVariant.parse(v.name) == v


def test_larger_epilogue_subtiles_are_their_own_family_on_the_shapes_cutlass_is_searched_on():
    from kernelrl.gemm.build import nvcc_command
    from kernelrl.gemm.space import CUTLASS_EPI_CONFIGS, CutlassConfig, cutlass_epi_candidates
    from kernelrl.gemm.tune import FAMILY_CANDIDATES, SEEDED, TuneOptions

    assert CUTLASS_EPI_CONFIGS and set(CUTLASS_EPI_CONFIGS) <= set(CUTLASS_CONFIGS)
    for c in CUTLASS_EPI_CONFIGS:
        assert c.pingpong and c.epi_n in (64, 128) and c.tn % c.epi_n == 0
        assert c.symbol.endswith(f"_e{c.epi_n}") and c.macros["KR_EPI_N"] == c.epi_n
        assert f"-DKR_EPI_N={c.epi_n}" in nvcc_command(c, [])
    # the configurations without it build as they always did: no KR_EPI_N, their names unchanged
    plain = CutlassConfig(128, 128, 64, pingpong=True)
    assert "KR_EPI_N" not in plain.macros and plain.symbol == "kr_pp_128x128x64_c1x1_p"
    write_bound, small = Shape(4096, 4096, 256), Shape(256, 256, 256)
    epi = cutlass_epi_candidates(write_bound)
    assert [v.config for v in epi] and {v.config for v in epi} == set(CUTLASS_EPI_CONFIGS)
    assert epi[0].config == CutlassConfig(128, 128, 64, pingpong=True, epi_n=128)
    assert cutlass_epi_candidates(small) == [] == cutlass_candidates(small, 10)
    # the plain CUTLASS family leaves them out, so that neither family's candidates crowd out the other's
    assert not any(v.config.epi_n for v in cutlass_candidates(write_bound, 100))
    assert FAMILY_CANDIDATES["cutlass-epi"](write_bound, "fp16", TuneOptions()) == [v.name for v in epi]
    seeded = FAMILY_CANDIDATES["cutlass-epi"](write_bound, "fp16", SEEDED)
    assert len({CutlassVariant.parse(n).config for n in seeded}) == SEEDED.cutlass_epi_top
    # the 128x128 tiles also with the raster swizzle, right after themselves, where the output has several waves
    # of them (4096x4096: 1024 tiles), and not where it has fewer (1024x4096: 256 tiles, under two waves; 2048x4096:
    # 512 tiles, two waves)
    for i, v in enumerate(epi):
        many = (v.config.tm, v.config.tn) == (128, 128)
        assert (v.swizzle == 4) == (many and epi[i - 1].config == v.config and epi[i - 1].swizzle == 1)
        if many and v.swizzle == 1:
            assert epi[i + 1] == CutlassVariant(v.config, swizzle=4)
    assert sum(v.swizzle == 4 for v in epi) == 3
    fewer = cutlass_epi_candidates(Shape(1024, 4096, 1024))
    assert fewer and all(v.swizzle == 1 for v in fewer)
    assert sum(v.swizzle == 4 for v in cutlass_epi_candidates(Shape(2048, 4096, 1024))) == 3


def test_cutlass_runtime_neighbours_vary_raster_and_swizzle_where_the_output_has_waves_of_tiles(monkeypatch):
    from kernelrl.gemm import tune as tn
    from kernelrl.gemm.space import CutlassConfig, cutlass_runtime_variants

    pp = CutlassConfig(128, 128, 64, pingpong=True, epi_n=128)
    base = CutlassVariant(pp, swizzle=4)
    many, one, few = Shape(4096, 4096, 256), Shape(2048, 1024, 1024), Shape(1024, 1024, 1024)  # 1024, 128, 64 tiles
    assert [(v.raster, v.swizzle) for v in cutlass_runtime_variants(base, many)] == [
        (1, 4), (2, 4), (0, 1), (0, 2), (0, 8)]
    assert all(v.config == pp and v != base for v in cutlass_runtime_variants(base, many))
    # under two waves only the raster order, under one wave nothing; never the stream-K scheduler's variants
    assert [(v.raster, v.swizzle) for v in cutlass_runtime_variants(CutlassVariant(pp), Shape(2048, 2048, 64))] == [
        (1, 1), (2, 1)]  # 256 tiles: one wave, not two
    assert cutlass_runtime_variants(CutlassVariant(pp), one) == [] == cutlass_runtime_variants(CutlassVariant(pp), few)
    assert cutlass_runtime_variants(CutlassVariant(CutlassConfig(128, 128, 64, streamk=True), 1), many) == []
    # which records are visited: the fastest two CUTLASS candidates within `within` of the winner, each once
    seen = {}
    monkeypatch.setattr(tn, "_revisit", lambda path, names_for, tag, *a: seen.setdefault("f", names_for) and 0)
    assert tn.cutlass_runtime("records.jsonl", within=1.03) == 0
    names_for = seen["f"]
    other = CutlassVariant(CutlassConfig(128, 128, 64, cn=2, pingpong=True, epi_n=128))
    record = {"best_us": 10.0, "candidates": {
        base.name: {"ok": True, "us": 10.2}, other.name: {"ok": True, "us": 10.5},
        CutlassVariant(pp, raster=1, swizzle=4).name: {"ok": True, "us": 11.0}, "torch": {"ok": True, "us": 10.9}}}
    got = names_for(many, record)
    assert got == [v.name for v in cutlass_runtime_variants(base, many) if v.name not in record["candidates"]]
    assert CutlassVariant(pp, raster=1, swizzle=4).name not in got  # timed already (and not a base: 3rd fastest)
    record["candidates"][other.name]["us"] = 10.25  # both within 3% of the winner: the neighbours of both
    assert set(names_for(many, record)) > {v.name for v in cutlass_runtime_variants(other, many)}
    record["candidates"][base.name]["us"] = record["candidates"][other.name]["us"] = 10.31
    assert names_for(many, record) is None  # none close enough
    assert names_for(many, {**record, "augmented": [tn.CUTLASS_RUNTIME]}) is None  # visited


def test_pruning_keeps_only_the_requested_number_of_candidates():
    s = Shape(4096, 4096, 4096)
    assert len(triton_candidates(s, 3)) == 3
    assert len(cutlass_candidates(s, 5)) == 5


def test_pruning_proposes_split_k_or_stream_k_for_few_output_tiles_and_deep_k():
    names = [v.name for v in cutlass_candidates(Shape(64, 64, 16384), 6)]
    assert all("splitk" in n or "streamk" in n for n in names)


def test_pruning_proposes_no_k_split_for_a_large_square():
    names = [v.name for v in cutlass_candidates(Shape(8192, 8192, 8192), 6)]
    assert not any("splitk" in n or "streamk" in n for n in names)


def test_cutlass_search_skips_launch_bound_shapes_and_swizzles_only_many_waves():
    from kernelrl.gemm.space import CUTLASS_SEARCH_MIN_EST_US
    from kernelrl.gemm.tune import FAMILY_CANDIDATES, TuneOptions

    assert len({c.symbol for c in CUTLASS_CONFIGS}) == len(CUTLASS_CONFIGS)
    small, mid, big = Shape(256, 256, 256), Shape(1024, 1024, 4096), Shape(8192, 8192, 8192)
    assert roofline_us(small) < CUTLASS_SEARCH_MIN_EST_US and cutlass_candidates(small, 10) == []
    assert roofline_us(mid) >= CUTLASS_SEARCH_MIN_EST_US
    # 1024x1024 is 64 tiles of 128x128: under a wave, so no swizzle variants; 8192^2 is many waves
    assert all(v.swizzle == 1 for v in cutlass_candidates(mid, 10))
    big_names = cutlass_candidates(big, 10)
    assert any(v.swizzle == 4 for v in big_names)
    for i, v in enumerate(big_names):  # a swizzled variant comes after the same configuration without one
        if v.swizzle == 4:
            assert any(u.config == v.config and u.swizzle == 1 for u in big_names[:i])
    # the clustered pingpong configurations are ranked for large squares
    assert any(v.config.pingpong and v.config.cm * v.config.cn == 2 for v in big_names)
    opt = TuneOptions()
    assert FAMILY_CANDIDATES["cutlass"](big, "fp16", opt) == [v.name for v in cutlass_candidates(big, 10)]


def test_cutlass_bf16_kernels_are_searched_only_where_the_library_holds_them(monkeypatch):
    from kernelrl.gemm import tune as tn

    big = Shape(8192, 8192, 8192)
    monkeypatch.setattr(tn, "_cutlass_has_bf16", lambda: False)
    assert tn.FAMILY_CANDIDATES["cutlass"](big, "bf16", tn.TuneOptions()) == []
    assert tn.FAMILY_CANDIDATES["cutlass-epi"](big, "bf16", tn.TuneOptions()) == []
    monkeypatch.setattr(tn, "_cutlass_has_bf16", lambda: True)
    assert tn.FAMILY_CANDIDATES["cutlass"](big, "bf16", tn.TuneOptions()) == [
        v.name for v in cutlass_candidates(big, 10)]
    assert tn.FAMILY_CANDIDATES["cutlass-epi"](big, "bf16", tn.TuneOptions()) == [
        v.name for v in tn.cutlass_epi_candidates(big, 7)]
    monkeypatch.undo()
    from kernelrl.gemm import native

    monkeypatch.setattr(native, "search_dirs", lambda: [])  # no library at all: no bf16 kernels, no error
    native.load.cache_clear()
    try:
        assert tn._cutlass_has_bf16() is False
    finally:
        native.load.cache_clear()


def test_the_build_knows_from_its_manifest_which_kernels_a_library_holds(tmp_path, monkeypatch):
    from pathlib import Path

    from kernelrl.gemm import build as b

    linked = []

    def link(cmd, **kw):  # stands in for nvcc's link: writes the library it names
        linked.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"lib")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(b.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(b.subprocess, "run", link)
    configs = CUTLASS_CONFIGS[:2]
    digest = b._digest(b.SOURCE)
    stems = [c.symbol for c in configs]

    def compiled():  # the objects are there already: only the link runs
        for stem in stems + [f"{s}_bf16" for s in stems]:
            (tmp_path / f"{stem}.{digest}.o").write_bytes(b"")

    def link_cutlass(with_bf16):
        wanted = stems + ([f"{s}_bf16" for s in stems] if with_bf16 else [])
        b._compile_and_link({stem: ["nvcc"] for stem in wanted}, b.SOURCE, b.LIB_NAME, tmp_path, 1, lambda _: None)

    compiled()
    assert not b.cutlass_is_current(tmp_path, configs)  # nothing linked yet
    with monkeypatch.context() as m:  # objects built elsewhere link without the CUTLASS headers
        m.setattr(b, "cutlass_include_dirs", lambda: pytest.fail("headers looked up for objects already built"))
        b.build(tmp_path, configs, jobs=1, bf16=True, log=lambda _: None)
    assert b.cutlass_is_current(tmp_path, configs, bf16=True) and len(linked) == 1
    linked.clear()
    b.manifest_path(tmp_path, b.LIB_NAME).unlink()
    link_cutlass(with_bf16=False)
    assert b.cutlass_is_current(tmp_path, configs) and not b.cutlass_is_current(tmp_path, configs, bf16=True)
    link_cutlass(with_bf16=True)
    assert b.cutlass_is_current(tmp_path, configs, bf16=True) and len(linked) == 2
    # the library alone is enough (a machine given the library without its objects does not build again)
    for o in tmp_path.glob("*.o"):
        o.unlink()
    assert b.cutlass_is_current(tmp_path, configs, bf16=True)
    assert not b.cutlass_is_current(tmp_path, CUTLASS_CONFIGS[:3])  # a configuration it was not linked with
    with monkeypatch.context() as m:
        m.setattr(b, "_digest", lambda path: "0000000000")
        assert not b.cutlass_is_current(tmp_path, configs)  # the source changed since
    (tmp_path / f"{b.LIB_NAME}.objects").write_text("not json")
    assert not b.cutlass_is_current(tmp_path, configs)

    def failed(cmd, **kw):
        raise subprocess.CalledProcessError(1, cmd)

    compiled()
    link_cutlass(with_bf16=False)
    assert b.cutlass_is_current(tmp_path, configs)
    monkeypatch.setattr(b.subprocess, "run", failed)
    with pytest.raises(subprocess.CalledProcessError):
        link_cutlass(with_bf16=False)
    assert not b.cutlass_is_current(tmp_path, configs)  # a failed link leaves no manifest behind


def test_the_cublaslt_binding_is_built_once_for_its_source(tmp_path, monkeypatch):
    from pathlib import Path

    import kernelrl.gemm.build as b

    lib_dir = tmp_path / "cuda" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libcublasLt.so.13").write_bytes(b"")
    built = []

    def nvcc(cmd, **kw):
        built.append(cmd)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"lib")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(b, "cublas_dirs", lambda: (tmp_path / "cuda" / "include", lib_dir))
    monkeypatch.setattr(b.subprocess, "run", nvcc)
    out = tmp_path / "build"
    assert b.build_cublaslt(out, log=lambda _: None) == out / b.LT_LIB_NAME and b.cublaslt_is_current(out)
    assert len(built) == 1 and "-l:libcublasLt.so.13" in built[0]
    b.build_cublaslt(out, log=lambda _: None)
    assert len(built) == 1  # current: not compiled again
    with monkeypatch.context() as m:
        m.setattr(b, "_digest", lambda path: "0000000000")  # the binding's source changed since
        b.build_cublaslt(out, log=lambda _: None)
    assert len(built) == 2


def test_split_k_names_round_trip_and_a_malformed_one_says_the_form():
    for c in SPLITK_TILES:
        assert c.smem_bytes <= SMEM_BYTES
        for v in (c, c.with_splits(16)):
            assert SplitKConfig.parse(v.name) == v
    for bad in ("splitk:64x64_s4_w4/k2", "splitk:64x64x64_s4_w4", "splitk:64x64x64_s4_w4/k0"):
        with pytest.raises(ValueError, match="splitk:<BM>x<BN>x<BK>_s<stages>_w<warps>/k<splits>|at least one"):
            SplitKConfig.parse(bad)


def test_split_k_search_splits_deep_k_over_the_sms_and_keeps_tiles_within_the_output():
    cands = splitk_candidates(Shape(64, 64, 8192), 8)
    assert cands and all(c.bm == 64 and c.bn == 64 for c in cands)  # larger tiles would compute padding
    assert max(c.splits for c in cands) >= 16  # one output tile: the K loop is what there is to spread
    assert all(8192 // c.splits >= 2 * c.bk for c in cands)
    tiles = [c.name.split("/")[0] for c in splitk_candidates(Shape(256, 256, 4096), 8)]
    assert len(set(tiles[:4])) == 4  # every fitting tile gets its best split before any tile gets a second


def test_split_k_is_not_proposed_where_it_measured_far_behind_or_beyond_its_workspace():
    assert splitk_candidates(Shape(1024, 1024, 4096)) == []  # 1M outputs: measured at 0.39x torch
    assert splitk_candidates(Shape(256, 256, 1024)) == []  # a shallow K: little to split
    assert splitk_candidates(Shape(256, 256, 2048))
    with pytest.raises(ValueError, match="larger than the split-K workspace"):
        from kernelrl.gemm.triton_family import make_splitk_launcher

        make_splitk_launcher(SplitKConfig(64, 64, 64, 4, 4, 2), 4096, 2048, 512)
    assert 4096 * 2048 > SPLITK_MAX_OUTPUT


class _Recorder:
    """Stands where Triton's generated C launch entry stands: records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def _compiled_kernel(launch, global_scratch=0, profile_scratch=0):
    """A compiled kernel whose `run` has the form of Triton 3.6's CudaLauncher around `launch`."""
    run = types.SimpleNamespace(launch=launch, global_scratch_size=global_scratch,
                                profile_scratch_size=profile_scratch, launch_cooperative_grid=False,
                                launch_pdl=True)
    return types.SimpleNamespace(run=run, function=0xF00, packed_metadata=(4, 1, 0))


def _wrap_handle_tensordesc(launcher, tensordesc_meta):
    """The closure Triton 3.6 puts around the C entry of a kernel with tensor-descriptor arguments."""
    def inner(*args):
        return launcher(*args), tensordesc_meta

    return inner


def test_a_triton_launch_goes_straight_to_the_c_entry_only_where_its_form_is_known():
    from kernelrl.gemm.triton_family import _entry

    c_entry = _Recorder()
    kern = _compiled_kernel(c_entry)
    launch, head, meta = _entry(kern, "3.6.0")
    assert launch is c_entry and meta == ()
    launch(2, 1, 1, 77, *head, "a", "b")  # grid, stream, then what the C entry parses before the kernel's own
    assert c_entry.calls == [(2, 1, 1, 77, 0xF00, False, True, None, None, (4, 1, 0), None, None, None, "a", "b")]

    desc_meta = [{"swizzle": 3}, {"swizzle": 3}, {"swizzle": 2}]
    launch, _, meta = _entry(_compiled_kernel(_wrap_handle_tensordesc(c_entry, desc_meta)), "3.6.0")
    assert launch is c_entry and meta == tuple(desc_meta)  # unwrapped: the caller expands its tensor maps

    run_head = (0xF00, (4, 1, 0), None, None, None)  # what CompiledKernel.run takes after the stream
    for kern, version in [
        (_compiled_kernel(c_entry), "3.5.1"),  # another release: its C entry may parse other arguments
        (_compiled_kernel(c_entry), "3.60.0"),
        (_compiled_kernel(c_entry, global_scratch=128), "3.6.0"),  # run allocates scratch per call
        (_compiled_kernel(c_entry, profile_scratch=64), "3.6.0"),
        (_compiled_kernel(_wrap_handle_tensordesc(c_entry, [None, None, None])), "3.6.0"),  # not tensor maps
        (_compiled_kernel(_wrap_handle_tensordesc(c_entry, None)), "3.6.0"),
        (types.SimpleNamespace(run=types.SimpleNamespace(), function=0xF00, packed_metadata=(4, 1, 0)), "3.6.0"),
    ]:
        assert _entry(kern, version) == (kern.run, run_head, None), version


def test_two_first_calls_of_a_triton_launcher_leave_one_entry(monkeypatch):
    from kernelrl.gemm.triton_family import _keep

    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__="3.6.0"))
    compiled, c_entry = [], _Recorder()

    def launch(a, b, c):
        pass

    for _ in range(2):  # two threads that both compiled on a first call, both keeping what they got
        _keep(compiled, launch, _compiled_kernel(c_entry))
    entry, head, meta = compiled  # what a later call unpacks
    assert entry is c_entry and launch.direct and meta == ()


def test_tiled_names_round_trip_and_a_malformed_one_says_the_form():
    assert len({c.name for c in TILED_CONFIGS}) == len(TILED_CONFIGS)
    for c in TILED_CONFIGS:
        assert TiledConfig.parse(c.name) == c and c.smem_bytes <= SMEM_BYTES
    for bad in ("tiled:64x64_s3_w4", "tiled:64x64x64_w4_s3", "tiled:64x64x64_s3", "tiled:64x64x64_s3_w4_fix"):
        with pytest.raises(ValueError, match=r"tiled:<BM>x<BN>x<BK>_s<stages>_w<warps>\[_fixed\]"):
            TiledConfig.parse(bad)
    fixed = TiledConfig(64, 64, 128, 3, 4, fixed=True)
    assert fixed.name == "tiled:64x64x128_s3_w4_fixed" and TiledConfig.parse(fixed.name) == fixed
    from kernelrl.gemm.tune import compile_key

    assert compile_key(fixed.name) == fixed.name != compile_key(TiledConfig(64, 64, 128, 3, 4).name)


def test_a_fixed_tiled_kernel_is_offered_and_launched_only_where_its_tiles_cover_the_shape():
    from kernelrl.gemm.space import tiled_fixed_variant
    from kernelrl.gemm.triton_family import make_tiled_launcher

    cfg = TiledConfig(64, 32, 128, 3, 2)
    assert tiled_fixed_variant(cfg, Shape(128, 64, 256)) == TiledConfig(64, 32, 128, 3, 2, fixed=True)
    for ragged in (Shape(100, 64, 256), Shape(128, 48, 256), Shape(128, 64, 200)):  # m, n, then k not covered
        assert not cfg.covers(ragged) and tiled_fixed_variant(cfg, ragged) is None
        with pytest.raises(ValueError, match="tiled:64x32x128_s3_w2_fixed is compiled for shapes its 64x32x128 "
                                             "tiles cover exactly.*use tiled:64x32x128_s3_w2$"):
            make_tiled_launcher(tiled_fixed_variant(cfg, Shape(128, 64, 256)), ragged.m, ragged.n, ragged.k)


def test_the_fixed_tiled_search_takes_the_fastest_tiled_candidates_close_to_the_fastest_of_all(monkeypatch):
    from kernelrl.gemm import tune as tn

    seen = {}
    monkeypatch.setattr(tn, "_revisit", lambda path, names_for, tag, *a: seen.setdefault(tag, names_for) and 0)
    assert tn.tiled_fixed("records.jsonl", within=1.10, top=2) == 0
    names_for = seen[tn.TILED_FIXED]
    s = Shape(256, 128, 512)
    record = {"best_us": 2.0, "candidates": {  # the winner's final time is taken another way: not the reference
        "cublaslt#0": {"ok": True, "us": 3.0}, "tiled:64x64x128_s3_w4": {"ok": True, "us": 3.1},
        "tiled:32x32x128_s3_w2": {"ok": True, "us": 3.15}, "tiled:32x32x64_s3_w1": {"ok": True, "us": 3.18},
        "tiled:64x64x64_s3_w4_fixed": {"ok": True, "us": 2.9}, "torch": {"ok": True, "us": 3.5}}}
    # the two fastest plain tiled candidates within 10% of the fastest candidate (a fixed one), compiled for s
    assert names_for(s, record) == ["tiled:64x64x128_s3_w4_fixed", "tiled:32x32x128_s3_w2_fixed"]
    record["candidates"]["tiled:64x64x128_s3_w4_fixed"] = {"ok": False, "why": "did not compile"}
    assert names_for(s, record) == ["tiled:32x32x128_s3_w2_fixed"]  # a recorded one is not searched again
    assert names_for(Shape(256, 128, 520), record) is None  # K not covered: nothing to compile in
    record["candidates"]["tiled:32x32x128_s3_w2"]["us"] = 3.3  # beyond 10% of 2.9: the next one within it
    assert names_for(s, record) == ["tiled:32x32x64_s3_w1_fixed"]
    record["candidates"]["tiled:32x32x64_s3_w1"]["us"] = 3.3
    assert names_for(s, record) is None
    assert names_for(s, {**record, "augmented": [tn.TILED_FIXED]}) is None  # visited
    assert names_for(s, {"best_us": 2.0, "candidates": {"torch": {"ok": False, "why": "timed out"}}}) is None


def test_tiled_search_is_for_launch_bound_shapes_only_and_keeps_tiles_within_the_output():
    small = Shape(64, 128, 1024)
    cands = tiled_candidates(small, 12)
    assert roofline_us(small) < TILED_SEARCH_MAX_EST_US and 0 < len(cands) <= 12
    assert all(c.bm <= 64 and c.bn <= 128 for c in cands)
    assert {c.bm for c in tiled_candidates(Shape(1024, 1024, 128), 16)} >= {32, 64, 128}
    assert len(tiled_candidates(Shape(1024, 1024, 128), 3)) == 3
    for big in (Shape(4096, 4096, 64), Shape(1024, 1024, 4096), Shape(16384, 16384, 16384)):
        assert roofline_us(big) >= TILED_SEARCH_MAX_EST_US and tiled_candidates(big) == []
    from kernelrl.gemm.tune import FAMILY_CANDIDATES, TuneOptions

    opt = TuneOptions()
    assert FAMILY_CANDIDATES["tiled"](small, "fp16", opt) == [c.name for c in tiled_candidates(small, opt.tiled_top)]


def test_cluster_split_k_names_round_trip_and_a_bad_one_says_what_is_wrong():
    assert len({c.symbol for c in CLUSTERK_TILES}) == len(CLUSTERK_TILES)
    for c in CLUSTERK_TILES:
        assert c.smem_bytes <= SMEM_BYTES
        wm, wn = c.warp_grid
        assert wm * wn == c.warps and (c.bm // wm) % 16 == 0 and (c.bn // wn) % 16 == 0  # the kernel's asserts
        for s in (2, 16):
            assert ClusterKConfig.parse(c.with_splits(s).name) == c.with_splits(s)
    for bad in ("clusterk:64x64_s4_w4/c2", "clusterk:64x64x64_s4_w4", "clusterk:64x64x64_s4_w4/k2",
                "clusterk:64x64x64_s4_w4/c2g", "clusterk:64x64x64_s4_w4/c2gx"):
        with pytest.raises(ValueError, match=r"_s<stages>_w<warps>\[_wg\|_tma\]/c<splits>\[g<groups>\]"):
            ClusterKConfig.parse(bad)
    for bad in ("clusterk:64x64x128_s6_w4_tma/c8g1", "clusterk:64x64x128_s6_w4_tma/c8g0",
                "clusterk:64x64x128_s6_w4_tma/c8g2048"):
        with pytest.raises(ValueError, match="groups.* must be from 2 to 1024, and left out for 1"):
            ClusterKConfig.parse(bad)
    grouped = ClusterKConfig.parse("clusterk:64x64x128_s6_w4_tma/c8g16")  # 16 clusters of 8 share each tile
    assert (grouped.splits, grouped.groups, grouped.tma) == (8, 16, True) and grouped.name.endswith("/c8g16")
    assert grouped.symbol == "kr_ck_64x64x128_s6_w4_tma"  # the same compiled object: groups are a run-time choice
    assert ClusterKConfig.parse("clusterk:64x64x128_s6_w4_tma/c8").groups == 1
    # each group's fp32 sum of every output tile: 2 x 2 tiles of 64x64, 16 groups
    assert grouped.workspace_bytes(Shape(128, 100, 4096)) == 4 * 16 * 64 * 64 * 4
    assert grouped.with_splits(8).workspace_bytes(Shape(128, 100, 4096)) == 0
    for bad in ("clusterk:64x64x64_s4_w4/c1", "clusterk:64x64x64_s4_w4/c32", "clusterk:64x64x64_s4_w4/c14",
                "clusterk:64x64x64_s4_w4/c15", "clusterk:64x64x128_s6_w4_tma/c6g2"):
        with pytest.raises(ValueError, match=r"a power of two from 2 to 16, or one of \(3, 5, 6, 7, 9, 10, 11, 12, 13\) "
                                             "with one cluster"):
            ClusterKConfig.parse(bad)
    for s in (3, 5, 6, 7, 9, 12, 13):  # cluster sizes that fill a wave: one cluster per tile
        assert ClusterKConfig.parse(f"clusterk:64x64x128_s6_w4_tma/c{s}").splits == s
    with pytest.raises(KeyError, match="unknown cluster split-K configuration"):
        ClusterKConfig.parse("clusterk:32x32x32_s4_w4/c2")  # not compiled
    with pytest.raises(KeyError, match="unknown cluster split-K configuration"):
        ClusterKConfig.parse("clusterk:64x64x64_s4_w4_wg/c2")  # this tile is compiled for mma.sync only
    wg = ClusterKConfig.parse("clusterk:64x128x64_s6_w4_wg/c8")
    assert wg.wgmma and (wg.bm, wg.bn, wg.bk, wg.stages, wg.splits) == (64, 128, 64, 6, 8)
    assert wg.macros["KR_WGMMA"] == 1 and wg.symbol == "kr_ck_64x128x64_s6_w4_wg"
    assert not ClusterKConfig.parse("clusterk:64x128x64_s4_w4/c8").wgmma
    tma = ClusterKConfig.parse("clusterk:64x128x64_s6_w4_tma/c8")  # the same tile fed by tensor-map copies
    assert tma.wgmma and tma.tma and tma.with_splits(2) in CLUSTERK_TILES and not wg.tma
    assert tma.macros["KR_TMA"] == 1 and tma.macros["KR_WGMMA"] == 1 and tma.symbol == "kr_ck_64x128x64_s6_w4_tma"
    assert tma.smem_bytes == wg.smem_bytes + 16 * 6  # a full and an empty mbarrier per stage
    with pytest.raises(ValueError, match="feed the wgmma main loop"):
        ClusterKConfig(64, 64, 64, 4, 4, tma=True)
    for c in CLUSTERK_TILES:
        if c.wgmma:  # one warpgroup (4 warps) per 64 rows, whole 128-byte swizzle atoms
            assert c.warps == 4 * c.bm // 64 and c.bn % 64 == 0 and c.bk % 64 == 0 and c.stages >= 3


def test_cluster_split_k_search_is_for_few_output_tiles_and_deep_k():
    cands = clusterk_candidates(Shape(64, 64, 2048), 8)
    assert cands and all(c.bm == 64 and c.bn == 64 for c in cands)  # larger tiles would compute padding
    assert max(c.splits for c in cands) == 16  # one output tile: the widest cluster spreads its K loop
    assert all(2048 >= c.splits * c.bk for c in cands)  # every block of a cluster gets a K step
    tiles = [c.name.split("/")[0] for c in clusterk_candidates(Shape(512, 512, 4096), 8)]
    assert len(set(tiles[:5])) == 5  # every fitting tile gets its best cluster size before any a second
    for c in clusterk_candidates(Shape(1024, 1024, 8192), 24):
        # at most two waves of blocks, of as many blocks as the SMs hold at once
        assert (1024 // c.bm) * (1024 // c.bn) * c.splits <= 2 * 132 * c.resident
    # a configuration whose blocks share an SM two at a time: the model counts its waves by twice the SMs
    shared = ClusterKConfig.parse("clusterk:64x128x64_s3_w4_tma/c4")
    assert shared.resident == 2 and ClusterKConfig.parse("clusterk:64x128x64_s6_w4_tma/c4").resident == 1
    assert shared.with_splits(4) in clusterk_candidates(Shape(1024, 1024, 8192), 24)  # 512 blocks, 2 waves of 264
    assert clusterk_candidates(Shape(64, 64, 256)) == []  # a shallow K: little to split
    assert clusterk_candidates(Shape(2048, 2048, 4096)) == []  # 256 tiles of 128x128: the SMs are full
    assert clusterk_candidates(Shape(64, 68, 4096)) == []  # rows of N not 16-byte aligned
    from kernelrl.gemm.registry import family
    from kernelrl.gemm.tune import FAMILY_CANDIDATES, TuneOptions, candidates

    opt = TuneOptions(lt_autotune=0, lt_extra=0)
    names = FAMILY_CANDIDATES["clusterk"](Shape(64, 64, 2048), "fp16", opt)
    assert names == [c.name for c in clusterk_candidates(Shape(64, 64, 2048), opt.clusterk_top,
                                                         opt.clusterk_grouped_top)]
    assert set(names) <= set(candidates(Shape(64, 64, 2048), torch.float16, opt)[0])
    assert family(names[0]) == "clusterk"
    assert any("g" in n.split("/")[1] for n in names)  # clusters sharing a tile are searched too


def test_groups_of_clusters_are_searched_where_one_cluster_per_tile_leaves_sms_idle():
    one_tile = Shape(64, 64, 16384)
    cands = clusterk_grouped_candidates(one_tile, 10)
    assert len(cands) == 10 and all(c.groups >= 2 and c.wgmma for c in cands)
    for c in cands:
        assert c.splits * c.groups <= cluster_wave_blocks(c.splits, c.resident)  # one wave of blocks
        assert 16384 >= c.splits * c.groups * c.bk  # every slice of K gets a K step
    # every (cluster size, groups) pair's best tile before any pair's second: 10 distinct pairs here
    assert len({(c.splits, c.groups) for c in cands}) == 10
    assert max(c.splits * c.groups for c in cands) > 16  # more blocks than one 16-block cluster per tile
    assert clusterk_candidates(one_tile, 4, 3)[4:] == cands[:3]  # after the plain ones
    assert clusterk_grouped_candidates(one_tile, 0) == []
    # 64 tiles of 128x128: only a few small groups fit one wave
    for c in clusterk_grouped_candidates(Shape(1024, 1024, 4096), 10):
        assert math.ceil(1024 / c.bm) * math.ceil(1024 / c.bn) * c.splits * c.groups <= 132 * c.resident
    assert clusterk_grouped_candidates(Shape(2048, 2048, 4096)) == []  # the SMs are full
    assert clusterk_grouped_candidates(Shape(64, 64, 256)) == []  # a shallow K


def test_cluster_sizes_that_fill_a_wave_are_searched_where_no_power_of_two_splits_k_as_far():
    from kernelrl.gemm.space import CLUSTERK_FILL_SPLITS, cluster_wave_blocks, clusterk_fill_candidates

    shape = Shape(512, 256, 4096)  # 16 tiles of 128x64: clusters of 8 run two waves (15 at once), of 4 one
    cands = clusterk_fill_candidates(shape, 8)
    assert cands and len(cands) <= 8 and all(c.main_loop in ("wg", "tma") and c.groups == 1 for c in cands)
    for c in cands:
        tiles = math.ceil(shape.m / c.bm) * math.ceil(shape.n / c.bn)
        assert c.splits in CLUSTERK_FILL_SPLITS and tiles * c.splits <= cluster_wave_blocks(c.splits, c.resident)
        # a larger split than every power of two whose clusters all fit one wave
        assert all(tiles * p > cluster_wave_blocks(p, c.resident) or p < c.splits for p in (2, 4, 8, 16)
                   if shape.k >= p * c.bk)
        assert ClusterKConfig.parse(c.name) == c
    assert len(clusterk_fill_candidates(shape, 2)) == 2 and clusterk_fill_candidates(shape, 0) == []
    assert clusterk_fill_candidates(Shape(4096, 4096, 4096)) == []  # many output tiles: not the family's shapes
    assert clusterk_fill_candidates(Shape(256, 256, 256)) == []  # K too shallow
    from kernelrl.gemm.tune import FAMILY_CANDIDATES, TuneOptions

    names = FAMILY_CANDIDATES["clusterk"](shape, "fp16", TuneOptions())
    assert [c.name for c in clusterk_fill_candidates(shape, TuneOptions().clusterk_fill_top)] == names[-4:]


def test_tiles_smaller_than_64x64_are_searched_on_the_smallest_outputs_as_wide_as_one_wave_allows():
    from kernelrl.gemm.space import (CLUSTERK_SMALL_MAX_OUTPUT, CLUSTERK_SMALL_TILES, cluster_wave_blocks,
                                     clusterk_small_candidates)
    from kernelrl.gemm.tune import FAMILY_CANDIDATES, SEEDED, TuneOptions, candidates

    assert CLUSTERK_SMALL_TILES and all(t.with_splits(2) in CLUSTERK_TILES for t in CLUSTERK_SMALL_TILES)
    assert all(min(t.bm, t.bn) < 64 and t.main_loop == "mma" for t in CLUSTERK_SMALL_TILES)
    one = Shape(64, 64, 1024)  # four 32x32 tiles, two 32x64 ones
    cands = clusterk_small_candidates(one)
    # each tile's widest cluster first (K = 1024 holds 16 steps of 64, 8 of 128), then its second widest
    assert [c.name for c in cands[:4]] == ["clusterk:32x32x64_s4_w4/c16", "clusterk:32x32x128_s3_w4/c8",
                                           "clusterk:32x64x64_s4_w4/c16", "clusterk:32x64x128_s3_w4/c8"]
    assert [c.splits for c in cands[4:8]] == [8, 4, 8, 4]
    assert all(c.groups == 1 for c in cands[:8])  # then several clusters per tile, where K is deep enough
    assert [c.name for c in cands[8:]] == ["clusterk:32x32x64_s4_w4/c8g2", "clusterk:32x64x64_s4_w4/c8g2"]
    for shape in (one, Shape(128, 128, 1024), Shape(128, 256, 4096), Shape(64, 512, 16384), Shape(64, 64, 16384)):
        for c in clusterk_small_candidates(shape):
            tiles = math.ceil(shape.m / c.bm) * math.ceil(shape.n / c.bn)
            # one wave, counted with the blocks an SM holds (several of these small tiles), every slice a K step
            assert tiles * c.splits * c.groups <= cluster_wave_blocks(c.splits, c.resident)
            assert shape.k >= c.splits * c.groups * c.bk and (c.groups == 1 or c.splits in (8, 16))
            assert c.with_splits(2) in CLUSTERK_SMALL_TILES and ClusterKConfig.parse(c.name) == c
    deep = [c.name.split(":")[1] for c in clusterk_small_candidates(Shape(64, 64, 16384))]
    # the group count that fills the wave, then 2: 4 tiles of 32x32 x 8 blocks x 19 = 608 of the 616 it holds
    assert {"32x32x64_s4_w4/c8g19", "32x32x64_s4_w4/c8g2", "32x32x64_s4_w4/c16g8"} <= set(deep)
    assert len(deep) == 16 == TuneOptions().clusterk_small_top
    # the blocks per wave of the small tiles, measured (three and five blocks per SM)
    assert cluster_wave_blocks(8, 5) == 616 and cluster_wave_blocks(16, 3) == 336
    assert len(clusterk_small_candidates(one, 3)) == 3 and clusterk_small_candidates(one, 0) == []
    assert clusterk_small_candidates(Shape(256, 256, 1024)) == []  # 256 * 256 > CLUSTERK_SMALL_MAX_OUTPUT
    assert 256 * 256 > CLUSTERK_SMALL_MAX_OUTPUT >= 128 * 256
    assert clusterk_small_candidates(Shape(64, 64, 256)) == []  # K too shallow
    # the other cluster split-K searches keep to their tiles
    assert not {c.with_splits(2) for c in clusterk_candidates(one, 24)} & set(CLUSTERK_SMALL_TILES)
    opt = TuneOptions(lt_autotune=0, lt_extra=0)
    names = FAMILY_CANDIDATES["clusterk-small"](one, "fp16", opt)
    assert names == [c.name for c in clusterk_small_candidates(one, opt.clusterk_small_top)]
    assert set(names) <= set(candidates(one, torch.float16, opt)[0])  # a full search takes them too
    assert len(FAMILY_CANDIDATES["clusterk-small"](one, "fp16", SEEDED)) == SEEDED.clusterk_small_top


def test_groups_that_fill_the_wave_are_searched_besides_powers_of_two():
    from kernelrl.gemm.space import _group_counts

    assert _group_counts(8, 120, 1000) == [2, 4, 8, 15]  # clusters of 8, one tile: 15 fill 120 SMs
    assert _group_counts(8, 128, 1000) == [2, 4, 8, 16]
    assert _group_counts(8, 120, 6) == [2, 4, 6]  # K has steps for 6 slices per cluster only
    assert _group_counts(64, 120, 1000) == []  # one group already fills the wave
    one_per_sm = {c.name.split("/")[1] for c in clusterk_grouped_candidates(Shape(64, 64, 16384), 40)
                  if c.resident == 1}
    assert {"c8g15", "c4g30", "c16g7"} <= one_per_sm and not one_per_sm & {"c8g16", "c4g32"}  # 128: 2 waves


def test_the_cost_model_places_clusters_within_gpcs():
    # 32 output tiles split 4 ways: 128 blocks fit the 132 SMs, but clusters of 4 hold 120 (30 clusters)
    from kernelrl.gemm.space import LAUNCH_US

    shape = Shape(512, 256, 16384)
    plain = estimate_us(shape, 64, 64, splits=4, fixup_share=0.0) - LAUNCH_US
    clustered = estimate_us(shape, 64, 64, splits=4, cluster=4, fixup_share=0.0) - LAUNCH_US
    assert clustered > 1.6 * plain  # a second wave
    assert estimate_us(shape, 64, 64, splits=4, cluster=2, fixup_share=0.0) - LAUNCH_US == plain  # 66 of 2 fit


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cluster_split_k_library_builds_for_sm90a_and_refuses_what_it_cannot_run(tmp_path):
    # Compiles the kernel source for Hopper and loads the library; the refusals below run before any CUDA
    # call, so they need no GPU.
    import ctypes

    from kernelrl.gemm import build as b

    tile = CLUSTERK_TILES[0]
    lib_path = b.build_clusterk(tmp_path, configs=(tile,), log=lambda _: None)
    assert b.clusterk_is_current(tmp_path, configs=(tile,))
    lib = ctypes.CDLL(str(lib_path))
    can = getattr(lib, f"{tile.symbol}_can_implement")
    can.argtypes = [ctypes.c_int] * 6
    assert can(64, 68, 1024, 4, 1, 0) == 1  # N % 8
    assert can(64, 64, 1020, 4, 1, 1) == 1  # K % 8
    assert can(64, 64, 1024, 32, 1, 0) == 2  # more splits than a cluster holds
    # above 13, or with several clusters per tile, only powers of two (3, 5, 6, 7 and 9 to 13 pass this check and
    # go on to the occupancy query, which needs a GPU)
    assert can(64, 64, 1024, 14, 1, 0) == 2 and can(64, 64, 1024, 15, 1, 0) == 2 and can(64, 64, 1024, 6, 2, 0) == 2
    assert can(64, 64, 1024, 6, 1, 0) != 2 and can(64, 64, 1024, 12, 1, 0) != 2
    assert can(1 << 20, 1 << 20, 1024, 2, 1, 0) == 3  # more tiles than a grid dimension holds
    assert can(64, 64, 1024, 2, 0, 0) == 5 and can(64, 64, 1024, 2, 2048, 0) == 5  # groups of clusters
    # the workspace of 4 groups per tile on 3 x 2 tiles of 64x64 (ragged): their fp32 sums, a counter per
    # tile and rank; none with one group
    ws = getattr(lib, f"{tile.symbol}_workspace")
    floats, counters = ctypes.c_longlong(), ctypes.c_longlong()
    ws(130, 72, 8, 4, ctypes.byref(floats), ctypes.byref(counters))
    assert (floats.value, counters.value) == (6 * 4 * 64 * 64, 6 * 8)
    ws(130, 72, 8, 1, ctypes.byref(floats), ctypes.byref(counters))
    assert (floats.value, counters.value) == (0, 0)
    assert not b.clusterk_is_current(tmp_path, configs=CLUSTERK_TILES[:2])  # a configuration not built yet


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("tma", [False, True], ids=["cp.async", "tensor-map copies"])
def test_cluster_split_k_wgmma_main_loop_compiles_to_warpgroup_mmas(tmp_path, tma):
    # The wgmma configurations compile against CuTe (the nvidia-cutlass wheel's headers) for sm_90a; the
    # object holds the fp16 and bf16 kernels and their exported functions. Their stages are filled by cp.async
    # or by the bulk tensor copy engine.
    import ctypes

    from kernelrl.gemm import build as b

    tile = next(c for c in CLUSTERK_TILES if c.wgmma and c.tma == tma)
    assert any(a.startswith("-I") for a in b.clusterk_command(tile))  # the CUTLASS headers
    assert not any(a.startswith("-I") for a in b.clusterk_command(CLUSTERK_TILES[0]))  # CUDA's own suffice
    lib_path = b.build_clusterk(tmp_path, configs=(tile,), log=lambda _: None)
    lib = ctypes.CDLL(str(lib_path))
    can = getattr(lib, f"{tile.symbol}_can_implement")
    can.argtypes = [ctypes.c_int] * 6
    assert can(64, 64, 1020, 4, 1, 0) == 1 and can(64, 64, 1024, 14, 1, 1) == 2
    # the same compile stopped at PTX: the main loop is warpgroup MMAs, and no mma.sync is left
    cmd = [a for a in b.clusterk_command(tile) if not a.startswith("-gencode")]
    cmd[cmd.index("-c")] = "-ptx"
    ptx = tmp_path / "wg.ptx"
    subprocess.run([*cmd, "-arch=sm_90a", "-o", str(ptx)], check=True, capture_output=True)
    text = ptx.read_text()
    assert "wgmma.mma_async" in text and "mma.sync" not in text
    assert ("cp.async.bulk.tensor" in text) == tma and ("cp.async.cg" in text) == (not tma)


def test_per_stream_buffers_give_each_stream_its_own_set_grow_it_and_use_the_spare_under_capture(monkeypatch):
    from kernelrl.gemm.streams import PerStream

    made = []

    def make(dev, sizes):
        made.append(sizes)
        return tuple(torch.zeros(s) for s in sizes)

    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    pool = PerStream(make)
    s1 = pool.get(stream=11, device=0, sizes=(100, 4))
    assert pool.get(11, 0, (50, 2)) is s1  # fits: the same set
    s2 = pool.get(22, 0, (100, 4))
    assert s2 is not s1 and s2[0].data_ptr() != s1[0].data_ptr()  # another stream: its own set
    s1b = pool.get(11, 0, (10, 8))
    assert s1b is not s1 and [b.numel() for b in s1b] == [100, 8]  # grown to both sizes
    pool.reserve(0, (64, 4))
    spare = pool._spare[0]
    pool.reserve(0, (32, 2))
    assert pool._spare[0] is spare  # a spare that fits is kept
    capturing[0] = True
    pool.reserve(0, (1000, 4))
    assert pool._spare[0] is spare  # nothing is made during capture
    assert pool.get(33, 0, (64, 4)) is spare and 0 not in pool._spare  # a stream first seen in capture
    n = len(made)
    pool.get(44, 0, (64, 4))  # no spare left: made during the capture
    assert len(made) == n + 1
    assert len(pool.all_buffers()) == 4


def test_a_triton_compile_failure_marks_the_configuration_not_the_run_time_split():
    from kernelrl.gemm.tune import compile_key

    assert compile_key("splitk:64x64x64_s4_w4/k8") == compile_key("splitk:64x64x64_s4_w4/k32")
    assert compile_key("triton:128x128x64_s4_w8") == "triton:128x128x64_s4_w8"
    assert compile_key("tiled:64x64x128_s3_w4") == "tiled:64x64x128_s3_w4"
    assert compile_key("cutlass:pp_64x128x64_c1x1_p/auto_r0_s1") is None


def test_registry_knows_the_split_k_family():
    from kernelrl.gemm.registry import family

    assert family("splitk:64x64x64_s4_w4/k8") == "splitk"
    assert family("tiled:64x64x128_s3_w4") == "tiled"
    with pytest.raises(ValueError, match="unknown kernel family"):
        family("splitc:64x64x64_s4_w4/k8")


def test_cost_model_prefers_large_tiles_on_large_problems_and_grows_with_k():
    big = Shape(8192, 8192, 8192)
    assert estimate_us(big, 128, 256) < estimate_us(big, 64, 64)
    assert estimate_us(Shape(1024, 1024, 4096), 128, 128) > estimate_us(Shape(1024, 1024, 1024), 128, 128)


# --- correctness gate -----------------------------------------------------------------------------------
def _inputs(m=64, n=48, k=256):
    return chk.random_inputs(m, n, k, torch.float16, device="cpu", seed=1)


def test_check_accepts_an_exact_product():
    a, b = _inputs()
    ref = chk.reference(a, b)
    res = chk.check(lambda a, b, c: c.copy_((a.double() @ b.double()).half()), a, b, ref)
    assert res.ok, res.reason


def test_check_rejects_a_write_past_the_end_of_c():
    a, b = _inputs()
    ref = chk.reference(a, b)

    def spills(a, b, c):
        c.copy_((a.double() @ b.double()).half())
        c.as_strided((8,), (1,), c.storage_offset() + c.numel()).zero_()

    res = chk.check(spills, a, b, ref)
    assert not res.ok and "guard" in res.reason


def test_check_rejects_a_partly_unwritten_output():
    a, b = _inputs()
    ref = chk.reference(a, b)
    res = chk.check(lambda a, b, c: c[:-1].copy_((a.double() @ b.double()).half()[:-1]), a, b, ref)
    assert not res.ok and "unwritten" in res.reason


def test_check_rejects_reduced_precision_arithmetic():
    a, b = _inputs(k=1024)
    ref = chk.reference(a, b)
    # operands rounded to bf16 first: the error of a precision downgrade, far above fp32 accumulation's
    res = chk.check(lambda a, b, c: c.copy_((a.bfloat16().float() @ b.bfloat16().float()).half()), a, b, ref)
    assert not res.ok and "relative error" in res.reason


# --- table and tuner records ----------------------------------------------------------------------------
def _table():
    return Table((Entry(64, 64, 64, "fp16", "torch", 2.2, 2.2),
                  Entry(128, 64, 64, "fp16", "triton:64x64x64_s6_w4", 2.0, 2.3),
                  Entry(256, 64, 64, "fp16", "cublaslt:00", 2.1, 2.3)), {"gpu": "NVIDIA H200"})


def test_table_round_trips_through_json(tmp_path):
    p = tmp_path / "t.json"
    _table().save(p)
    assert Table.load(p) == _table()


def test_table_lookup_leaves_torch_winners_out():
    assert _table().lookup() == {(128, 64, 64, "fp16"): "triton:64x64x64_s6_w4",
                                 (256, 64, 64, "fp16"): "cublaslt:00"}


def test_table_without_a_family_sends_its_shapes_to_torch():
    assert (256, 64, 64, "fp16") not in _table().without_family("cublaslt").lookup()


def test_unreadable_table_names_the_file_and_the_fix(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="kernelrl gemm tune"):
        Table.load(p)


def test_table_from_records_keeps_the_last_record_of_a_shape():
    recs = [{"m": 64, "n": 64, "k": 64, "dtype": "fp16", "best": "torch", "best_us": 3.0, "torch_us": 3.0},
            {"m": 64, "n": 64, "k": 64, "dtype": "fp16", "best": "triton:x", "best_us": 2.0, "torch_us": 3.0}]
    assert from_records(recs, {}).lookup() == {(64, 64, 64, "fp16"): "triton:x"}


def test_tuner_resume_skips_recorded_shapes_and_a_line_cut_short(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"m": 64, "n": 64, "k": 64, "dtype": "fp16"}) + "\n" + '{"m": 128, "n"')
    assert done_keys(p) == {(64, 64, 64, "fp16")}


def test_adding_a_family_searches_only_shapes_it_has_candidates_for_and_resumes(tmp_path, monkeypatch):
    from kernelrl.gemm import tune as tn

    def rec(m, n, k):
        return {"m": m, "n": n, "k": k, "dtype": "fp16", "best": "torch", "best_label": "torch", "candidates": {}}

    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(rec(*s)) + "\n" for s in [(64, 64, 8192), (128, 128, 4096), (8192, 8192, 64)]))
    seen = []

    def fake_augment_shape(record, names, opt, tag):  # stands in for the GPU measurement only
        seen.append((record["m"], record["n"], record["k"]))
        assert names and all(n.startswith("splitk:") for n in names)
        return {**record, "best": names[0], "best_label": names[0], "best_us": 1.0, "torch_us": 2.0,
                "augmented": [tag], "candidates": {**record["candidates"], **{n: {"ok": True} for n in names}}}

    monkeypatch.setattr(tn, "augment_shape", fake_augment_shape)
    logs = []
    assert tn.augment(p, "splitk", deadline_s=0.0, log=logs.append) == 2  # nothing fits a zero deadline
    assert "2 shapes left" in logs[-1] and seen == []
    real = fake_augment_shape

    def dies_on_the_second(record, names, opt, tag):
        if seen:
            raise RuntimeError("the device went away")
        return real(record, names, opt, tag)

    monkeypatch.setattr(tn, "augment_shape", dies_on_the_second)
    with pytest.raises(RuntimeError):
        tn.augment(p, "splitk", log=logs.append)
    assert len(seen) == 1  # the first shape's record was written before the run died
    monkeypatch.setattr(tn, "augment_shape", fake_augment_shape)
    assert tn.augment(p, "splitk", log=logs.append) == 0
    assert sorted(seen) == [(64, 64, 8192), (128, 128, 4096)]  # a large output with a shallow K has none
    recs = {(r["m"], r["n"], r["k"]): r for r in map(json.loads, p.read_text().splitlines())}
    assert len(recs) == 3 and recs[(64, 64, 8192)]["best"].startswith("splitk:")
    assert tn.augment(p, "splitk", log=logs.append) == 0 and len(seen) == 2  # done shapes are not searched again
    grown = tn.FAMILY_CANDIDATES["splitk"]
    asked = []

    def only_new(record, names, opt, tag):
        asked.append(names)
        return fake_augment_shape(record, names, opt, tag)

    monkeypatch.setitem(tn.FAMILY_CANDIDATES, "splitk",
                        lambda s, dtype, opt: (grown(s, dtype, opt) + ["splitk:64x64x64_s9_w4/k2"]
                                               if grown(s, dtype, opt) else []))
    monkeypatch.setattr(tn, "augment_shape", only_new)
    assert tn.augment(p, "splitk", log=logs.append) == 0
    assert asked == [["splitk:64x64x64_s9_w4/k2"]] * 2  # the space grew: only its new member is searched
    with pytest.raises(ValueError, match="unknown family to add"):
        tn.augment(p, "triton")


def test_seeds_are_a_records_winner_then_its_fastest_candidates_that_launch_by_name():
    from kernelrl.gemm.tune import seed_names

    rec = {"best": "cublaslt:0badc0de", "candidates": {
        "torch": {"us": 1.0}, "cublaslt#3": {"us": 1.1},  # rank-only cuBLASLt names cannot be launched again
        "tiled:64x64x64_s3_w4": {"us": 1.3}, "clusterk:64x64x128_s4_w4_tma/c4": {"us": 1.2},
        "cutlass:pp_128x128x64_c1x1_p/auto_r0_s1": {"ok": False, "why": "mismatch"},  # failed: not timed
        "cublaslt:0badc0de": {"us": 1.25}, "triton:128x128x64_s4_w8": {"us": 1.4}}}
    assert seed_names(rec, 3) == ["cublaslt:0badc0de", "clusterk:64x64x128_s4_w4_tma/c4", "tiled:64x64x64_s3_w4"]
    assert seed_names({**rec, "best": "torch"}, 2) == ["clusterk:64x64x128_s4_w4_tma/c4", "cublaslt:0badc0de"]
    assert seed_names({"best": "torch", "candidates": {}}) == []


def test_a_search_seeded_from_another_dtype_times_the_seeds_first(tmp_path, monkeypatch):
    from kernelrl.gemm import tune as tn

    def rec(m, dtype, best, us):
        return {"m": m, "n": 64, "k": 64, "dtype": dtype, "best": best,
                "candidates": {best: {"us": us}, "tiled:32x32x64_s3_w1": {"us": us + 1}}}

    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in [
        rec(64, "fp16", "tiled:64x64x64_s3_w4", 2.0), rec(64, "fp16", "tiled:64x64x128_s3_w4", 1.5),  # last counts
        rec(128, "fp16", "clusterk:64x64x64_s4_w4/c2", 2.5), rec(64, "bf16", "tiled:other", 9.0)]))
    seeds = tn.seeds_from(p, "fp16")
    assert seeds == {(64, 64, 64): ["tiled:64x64x128_s3_w4", "tiled:32x32x64_s3_w1"],
                     (128, 64, 64): ["clusterk:64x64x64_s4_w4/c2", "tiled:32x32x64_s3_w1"]}
    with pytest.raises(ValueError, match="dtype 'fp32' to seed from"):
        tn.seeds_from(p, "fp32")
    # the seeds come right after torch.matmul, once each, before the families' own candidates (no GPU here:
    # the cuBLASLt family is unavailable and says so)
    names, _, _ = tn.candidates(Shape(64, 64, 64), torch.bfloat16, tn.SEEDED,
                                seeds=("tiled:64x64x128_s3_w4", "tiled:64x64x64_s3_w4"))
    assert names[:3] == ["torch", "tiled:64x64x128_s3_w4", "tiled:64x64x64_s3_w4"]
    assert len(names) == len(set(names)) and any(n.startswith("tiled:") for n in names[3:])
    timed = []

    def fake_tune_shape(s, dtype, opt, seeds=()):  # stands in for the GPU measurement only
        timed.append(((s.m, s.n, s.k), dtype, opt, seeds))
        return {"m": s.m, "n": s.n, "k": s.k, "dtype": "bf16", "torch_us": 2.0, "best": "torch", "best_us": 2.0,
                "seconds": 0.1}

    monkeypatch.setattr(tn, "tune_shape", fake_tune_shape)
    out = tmp_path / "bf16.jsonl"
    shapes = [Shape(64, 64, 64), Shape(256, 64, 64)]
    assert tn.tune(shapes, out, "bf16", tn.SEEDED, seeds=seeds, log=lambda m: None) == 2
    assert timed == [((64, 64, 64), torch.bfloat16, tn.SEEDED, ("tiled:64x64x128_s3_w4", "tiled:32x32x64_s3_w1")),
                     ((256, 64, 64), torch.bfloat16, tn.SEEDED, ())]  # a shape without a seeding record: none


def test_adding_a_family_to_one_dtype_leaves_the_other_dtypes_records_alone(tmp_path, monkeypatch):
    from kernelrl.gemm import tune as tn

    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps({"m": 64, "n": 64, "k": 8192, "dtype": dt, "best": "torch", "best_label": "torch",
                                     "candidates": {}}) + "\n" for dt in ("fp16", "bf16")))
    seen = []

    def fake_augment_shape(record, names, opt, tag):  # stands in for the GPU measurement only
        seen.append(record["dtype"])
        return {**record, "augmented": [tag], "candidates": {n: {"ok": False} for n in names}, "torch_us": 2.0,
                "best_us": 2.0}

    monkeypatch.setattr(tn, "augment_shape", fake_augment_shape)
    assert tn.augment(p, "splitk", dtype="bf16", log=lambda m: None) == 0 and seen == ["bf16"]
    recs = {r["dtype"]: r for r in map(json.loads, p.read_text().splitlines())}
    assert recs["bf16"]["candidates"] and not recs["fp16"]["candidates"]
    assert tn.augment(p, "splitk", log=lambda m: None) == 0 and seen == ["bf16", "fp16"]  # default: every dtype


def test_demoting_sends_back_to_torch_only_kernels_the_benchmark_found_measurably_slower(tmp_path):
    from kernelrl.gemm import tune as tn
    from kernelrl.gemm.table import from_records, read_records

    def rec(m, best):
        return {"m": m, "n": 64, "k": 64, "dtype": "fp16", "best": best, "best_label": best, "best_us": 2.0,
                "torch_us": 2.2, "torch_rel_err": 2e-4, "best_rel_err": 2e-4, "candidates": {}}

    recs = [rec(64, "tiled:a"), rec(128, "tiled:b"), rec(256, "tiled:c"), rec(512, "torch"), rec(1024, "tiled:e")]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))

    def row(m, kernel, lo, hi):
        return {"m": str(m), "n": "64", "k": "64", "dtype": "fp16", "kernel": kernel,
                "speedup_ci_lo": str(lo), "speedup_ci_hi": str(hi)}

    rows = [row(64, "tiled:a", 0.93, 0.96),  # measurably slower: demoted
            row(128, "tiled:b", 0.97, 1.01),  # its interval reaches 1: kept
            row(256, "tiled:other", 0.90, 0.95),  # the row benchmarked another kernel than the record's winner
            row(512, "torch", 0.98, 0.99),  # already torch
            row(1024, "tiled:e", "", "")]  # no interval in the file: not judged
    logs = []
    assert tn.demote(p, rows, log=logs.append) == 1 and len(logs) == 1 and "64x64x64" in logs[0]
    out = {r["m"]: r for r in read_records(p)}
    assert len(out) == 5 and out[64]["best"] == "torch" and out[64]["best_us"] == 2.2
    assert out[64]["demoted"] == {"kernel": "tiled:a", "label": "tiled:a", "benchmark_speedup_interval": [0.93, 0.96]}
    assert [out[m]["best"] for m in (128, 256, 512, 1024)] == ["tiled:b", "tiled:c", "torch", "tiled:e"]
    assert (64, 64, 64, "fp16") not in from_records(list(out.values()), {}).lookup()
    assert tn.demote(p, rows) == 0  # done once: nothing left to demote


def test_a_winner_no_benchmark_run_put_ahead_of_torch_goes_back_to_torch(tmp_path):
    from kernelrl.gemm import tune as tn
    from kernelrl.gemm.table import read_records

    def rec(m, best):
        return {"m": m, "n": 64, "k": 64, "dtype": "fp16", "best": best, "best_label": best, "best_us": 2.0,
                "torch_us": 2.2, "torch_rel_err": 2e-4, "best_rel_err": 2e-4, "candidates": {}}

    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(rec(m, b)) + "\n" for m, b in
                         [(64, "tiled:a"), (128, "tiled:b"), (256, "tiled:c"), (512, "tiled:d"), (1024, "torch")]))

    def row(m, kernel, speedup):
        return {"m": str(m), "n": "64", "k": "64", "dtype": "fp16", "kernel": kernel, "speedup_paired": str(speedup)}

    runs = [[row(64, "tiled:a", 0.99), row(128, "tiled:b", 0.98), row(256, "tiled:c", 0.97), row(512, "tiled:x", 0.9),
             row(1024, "torch", 0.97)],
            [row(64, "tiled:a", 0.985), row(128, "tiled:b", 1.01), row(256, "tiled:c", 0.99), row(512, "tiled:x", 0.9),
             row(1024, "torch", 0.98)],
            [row(64, "tiled:a", 0.975), row(128, "tiled:b", 0.97), row(512, "tiled:x", 0.9)]]
    logs = []
    # 64: below 1 in all three runs; 128: ahead in one; 256: in two runs only; 512: the runs timed another kernel
    assert tn.demote_consistent(p, runs, log=logs.append) == 1 and "64x64x64" in logs[0] and "3 benchmarks" in logs[0]
    out = {r["m"]: r for r in read_records(p)}
    assert out[64]["best"] == "torch" and out[64]["best_us"] == 2.2
    assert out[64]["demoted"] == {"kernel": "tiled:a", "label": "tiled:a", "benchmark_speedups": [0.99, 0.985, 0.975]}
    assert [out[m]["best"] for m in (128, 256, 512, 1024)] == ["tiled:b", "tiled:c", "tiled:d", "torch"]
    assert tn.demote_consistent(p, runs, min_runs=2) == 1  # 256 has its two runs now; 64 is torch already
    assert tn.demote_consistent(p, runs) == 0
    # runs that timed the record's winner and runs that timed an earlier one: each kernel is judged on its own
    p.write_text(json.dumps(rec(2048, "tiled:g")) + "\n")
    two = [[row(2048, "tiled:g", 0.95)], [row(2048, "tiled:old", 0.9)]]
    assert tn.demote_consistent(p, two, min_runs=1) == 1 and read_records(p)[0]["best"] == "torch"


def test_a_kernel_a_benchmark_demoted_is_never_chosen_again_for_its_shape(tmp_path, monkeypatch):
    from kernelrl.gemm import tune as tn

    rec = {"m": 256, "n": 64, "k": 8192, "dtype": "fp16", "best": "cutlass:x", "best_label": "cutlass:x",
           "best_us": 8.0, "torch_us": 10.0, "torch_rel_err": 2e-4, "best_rel_err": 2e-4,
           "cublaslt_heuristic": "cublaslt:aa", "cublaslt_autotune": "cublaslt:aa", "calls_per_graph": 10,
           "candidates": {"torch": {"us": 10.0}, "cutlass:x": {"us": 8.0}, "tiled:y": {"us": 9.0}}}
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    row = {"m": "256", "n": "64", "k": "8192", "dtype": "fp16", "kernel": "cutlass:x",
           "speedup_ci_lo": "0.82", "speedup_ci_hi": "0.83"}
    assert tn.demote(p, [row], log=lambda m: None) == 1
    rec = read_records(p)[0]
    assert rec["best"] == "torch" and tn.demoted_kernels(rec) == {"cutlass:x"}
    assert tn._runners_up(rec, 2) == ["tiled:y"]  # the demoted kernel is no runner-up
    # later demotions add to the list; the evidence is the last one's
    assert tn.demoted_kernels({**rec, "demoted": {"kernel": "tiled:y"}}) == {"cutlass:x", "tiled:y"}

    # a later search: the demoted kernel is not timed as a candidate, and a demoted baseline never wins
    final_times = {"torch": 10.0, "cublaslt:aa": 7.0, "tiled:y": 9.0, "tiled:z": 9.5, "cutlass:x": 6.0}
    measured = []

    def fake_measure(s, dtype, names, inp, calls, opt):  # stands in for the GPU measurement only
        measured.extend(names)
        return ({n: {"us": final_times[n], "rel_err": 2e-4, "ok": True} for n in names},
                {n: (lambda a, b, c: None) for n in names})

    def fake_graphs(fns, inp, calls, rounds, placements, per_round):
        per_round.update({n: [final_times[n]] * rounds for n in fns})
        return {n: final_times[n] for n in fns}

    monkeypatch.setattr(tn, "Inputs", lambda *a, **k: None)
    monkeypatch.setattr(tn, "_measure", fake_measure)
    monkeypatch.setattr(tn, "time_graphs_placed", fake_graphs)
    out = tn.augment_shape(rec, ["cutlass:x", "tiled:z"])
    assert "cutlass:x" not in measured and "tiled:z" in measured  # the fastest, but demoted
    assert out["best"] == "cublaslt:aa"
    out = tn.augment_shape({**rec, "demoted_kernels": ["cutlass:x", "cublaslt:aa"]}, ["tiled:z"])
    assert out["best"] == "tiled:y" and out["cublaslt_autotune_us"] == 7.0  # still timed as the baseline
    measured.clear()
    out = tn.augment_shape({**rec, "demoted_kernels": [], "demoted": {}}, ["tiled:z"])
    assert "cutlass:x" in measured and out["best"] == "cutlass:x"  # nothing barred: a runner-up, and the fastest


def test_redeciding_visits_every_record_once_with_its_runners_up_and_resumes(tmp_path, monkeypatch):
    from kernelrl.gemm import tune as tn

    cands = {"torch": {"us": 5.0}, "cublaslt#0": {"us": 3.0}, "tiled:32x32x64_s3_w1": {"us": 4.0},
             "cutlass:pp_64x128x64_c1x1_p/auto_r0_s1": {"us": 4.5}, "tiled:64x64x64_s3_w4": {"us": 6.0},
             "triton:64x64x64_s6_w4": {"ok": False}}
    recs = [{"m": m, "n": 64, "k": 64, "dtype": "fp16", "best": "cublaslt:ab", "best_label": "cublaslt#0",
             "candidates": cands} for m in (64, 128, 256)]
    assert tn._runners_up(recs[0], 2) == ["tiled:32x32x64_s3_w1", "cutlass:pp_64x128x64_c1x1_p/auto_r0_s1"]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    seen = []

    def fake(record, names, opt, tag):  # stands in for the GPU measurement only
        if len(seen) == 2 and tag == tn.REDECIDED:  # the first pass stops half way
            raise RuntimeError("the device went away")
        seen.append((record["m"], names, tag))
        return {**record, "augmented": [*record.get("augmented", []), tag], "torch_us": 2.0, "best_us": 1.0}

    monkeypatch.setattr(tn, "augment_shape", fake)
    with pytest.raises(RuntimeError):
        tn.redecide(p)
    assert seen == [(64, [], tn.REDECIDED), (128, [], tn.REDECIDED)]
    seen.clear()
    seen.append(None)  # let one more through
    assert tn.redecide(p) == 0 and [x[0] for x in seen[1:]] == [256]  # decided shapes are not visited again
    assert len(read_records(p)) == 3
    seen.clear()
    assert tn.redecide(p, tag="again") == 0 and [x[2] for x in seen] == ["again"] * 3  # a new tag: all again
    assert all(r["augmented"] == [tn.REDECIDED, "again"] for r in read_records(p))


def test_retiming_a_changed_kernel_visits_only_shapes_where_it_came_close(tmp_path, monkeypatch):
    from kernelrl.gemm import tune as tn

    bulk = r"clusterk:.*_(wg|tma)/c(8|16)(g\d+)?"

    def rec(m, dtype, cands, best_us=10.0):
        return {"m": m, "n": 64, "k": 8192, "dtype": dtype, "best": "torch", "best_label": "torch",
                "best_us": best_us, "candidates": cands}

    near = {"clusterk:64x64x128_s6_w4_tma/c8": {"ok": True, "us": 10.5},
            "clusterk:64x64x64_s8_w4_wg/c16g2": {"ok": True, "us": 10.9},
            "clusterk:64x64x128_s6_w4_tma/c16": {"ok": True, "us": 12.0},
            "clusterk:64x64x128_s6_w4_tma/c4": {"ok": True, "us": 9.0},  # the kernel did not change there
            "clusterk:64x64x64_s4_w4/c8": {"ok": True, "us": 9.5},  # nor in the mma.sync loop
            "clusterk:64x64x128_s4_w4_tma/c8": {"ok": False}}
    far = {"clusterk:64x64x128_s6_w4_tma/c8": {"ok": True, "us": 11.5}}
    recs = [rec(64, "fp16", near), rec(128, "fp16", far), rec(256, "fp16", {}), rec(512, "bf16", near)]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    seen = []

    def fake(record, names, opt, tag):  # stands in for the GPU measurement only
        seen.append((record["m"], names, tag))
        return {**record, "augmented": [*record.get("augmented", []), tag], "torch_us": 20.0}

    monkeypatch.setattr(tn, "augment_shape", fake)
    assert tn.retime(p, bulk, within=1.1, dtype="fp16", log=lambda m: None) == 0
    # the two fastest changed candidates of the one fp16 shape where the fastest came within 10% of the winner
    assert seen == [(64, ["clusterk:64x64x128_s6_w4_tma/c8", "clusterk:64x64x64_s8_w4_wg/c16g2"],
                     f"retime:{bulk}")]
    assert tn.retime(p, bulk, within=1.1, log=lambda m: None) == 0 and [x[0] for x in seen] == [64, 512]
    assert tn.retime(p, bulk, within=1.2, log=lambda m: None) == 0 and seen[-1][0] == 128  # visited: not again
    assert len(seen) == 3


def test_a_cublaslt_neighbourhood_is_searched_only_around_configurations_that_came_close():
    from kernelrl.gemm.tune import neighbour_bases

    def rec(best, best_us, autotune="cublaslt:aa", autotune_us=10.0):
        return {"best": best, "best_us": best_us, "cublaslt_autotune": autotune, "cublaslt_autotune_us": autotune_us}

    assert neighbour_bases(rec("torch", 10.2)) == ["cublaslt:aa"]  # torch wins by 2%: the fastest listed is close
    assert neighbour_bases(rec("cublaslt:aa", 10.0)) == ["cublaslt:aa"]  # the winner is the fastest listed
    # a split-K variant wins: both it and the fastest listed configuration are searched around
    assert neighbour_bases(rec("cublaslt:bb", 9.0)) == ["cublaslt:aa", "cublaslt:bb"]
    assert neighbour_bases(rec("clusterk:64x64x128_s6_w4_tma/c8", 8.0)) == []  # 25% behind another family
    assert neighbour_bases(rec("clusterk:64x64x128_s6_w4_tma/c8", 8.0), within=1.3) == ["cublaslt:aa"]
    assert neighbour_bases(rec("torch", 10.0, autotune=None, autotune_us=None)) == []  # no cuBLASLt at all


def test_listed_cublaslt_configurations_are_named_back_from_their_rank_and_their_close_ones_searched_too():
    from kernelrl.gemm.tune import close_listed, listed_names, neighbour_bases

    heuristic = ["cublaslt:h0", "cublaslt:h1", "cublaslt:h2"]
    cands = {"cublaslt#0": {"us": 10.2}, "cublaslt#1": {"us": 10.0}, "cublaslt#2": {"us": 10.25},
             "cublaslt#3": {"us": 9.0},  # a split-K variant, numbered after the list
             "tiled:32x32x64_s3_w1": {"us": 8.0}}
    rec = {"best": "torch", "best_us": 10.1, "cublaslt_autotune": "cublaslt:h1", "cublaslt_autotune_us": 10.0,
           "candidates": cands}
    ranks = listed_names(rec, heuristic)
    assert ranks == {"cublaslt#0": "cublaslt:h0", "cublaslt#1": "cublaslt:h1", "cublaslt#2": "cublaslt:h2"}
    # a list that does not give back the recorded baseline is not the one the record was made with
    assert listed_names(rec, ["cublaslt:h1", "cublaslt:h0", "cublaslt:h2"]) == {}
    assert listed_names(rec, heuristic, autotune=1) == {}  # the baseline came from the first one only
    # a seeded record numbered its cuBLASLt seeds first
    seeded = {**rec, "seeds": ["cublaslt:h2", "tiled:32x32x64_s3_w1"],
              "candidates": {"cublaslt#0": {"us": 10.0}, "cublaslt#1": {"us": 10.5}, "cublaslt#2": {"us": 10.1}}}
    assert listed_names({**seeded, "cublaslt_autotune": "cublaslt:h2"}, heuristic) == {
        "cublaslt#0": "cublaslt:h2", "cublaslt#1": "cublaslt:h0", "cublaslt#2": "cublaslt:h1"}
    # beside the baseline, the fastest others of the list within 3% of it
    bases = neighbour_bases(rec)
    assert bases == ["cublaslt:h1"]
    assert close_listed(rec, ranks, 1.03, 1, bases) == ["cublaslt:h0"]
    assert close_listed(rec, ranks, 1.03, 2, bases) == ["cublaslt:h0", "cublaslt:h2"]
    assert close_listed(rec, ranks, 1.01, 2, bases) == []
    assert close_listed(rec, {}, 1.03, 2, bases) == []
    # one of the list faster than the baseline (beyond the first 32, say) is searched around too
    faster = {**rec, "candidates": {**cands, "cublaslt#2": {"us": 9.95}}}
    assert close_listed(faster, ranks, 1.03, 2, bases) == ["cublaslt:h2", "cublaslt:h0"]


def test_cublaslt_neighbours_are_taken_one_attribute_at_a_time_in_turn():
    from kernelrl.gemm.cublaslt import changed_attribute, interleave

    base = _info(66, 20)

    def near(**changes):
        return {**base, **changes}

    infos = [near(stages=1), near(stages=2), near(stages=3), near(cluster=3), near(cluster=5), near(swizzle=1),
             near(custom=1), near(tile=30), near(tile=29, stages=5), near(splitk=4, reduction=2), near(splitk=2),
             near(stages=4, cluster=3), near(reduction=2), near(tile=30, cluster=3), near(splitk=2, stages=4)]
    assert [changed_attribute(base, i) for i in infos] == (
        ["stages"] * 3 + ["cluster"] * 2 + ["swizzle", "custom", "tile", "tile", "splitk", "splitk"] + [None] * 4)
    assert changed_attribute(base, base) is None
    # a new tile may bring its own stage count and a split count its reduction scheme; nothing else goes with them
    assert changed_attribute(near(splitk=4, reduction=2), base) == "splitk"
    # one of each kind in turn, each kind in its own order; a change of two attributes is never taken
    assert interleave(infos, base, 6) == [0, 3, 5, 6, 7, 9]
    assert interleave(infos, base, 100) == [0, 3, 5, 6, 7, 9, 1, 4, 8, 10, 2]
    assert interleave(infos, base, 0) == []


def test_split_counts_are_offered_nearest_first_and_only_where_splitting_may_pay():
    from kernelrl.gemm.cublaslt import splits_near
    from kernelrl.gemm.tune import splits_may_pay

    assert splits_near(1) == [2, 3, 4, 5, 6, 8, 12, 16]
    assert splits_near(4) == [5, 3, 6, 2, 8, 12, 1, 16]  # by ratio: 5/4 is nearer than 4/3
    assert splits_near(6, (1, 2, 6, 8, 12)) == [8, 12, 2, 1]
    assert splits_may_pay(Shape(256, 512, 8192)) and splits_may_pay(Shape(2048, 2048, 1024))
    assert not splits_may_pay(Shape(256, 512, 512))  # shallow K
    assert not splits_may_pay(Shape(4096, 2048, 8192))  # more than two waves of tiles
    assert not splits_may_pay(Shape(2048, 2048, 1024), max_outputs=1024 * 1024)  # the first search's bound


def test_the_cublaslt_neighbourhood_visits_each_close_shape_once(tmp_path, monkeypatch):
    from kernelrl.gemm import cublaslt
    from kernelrl.gemm import tune as tn

    base, listed = _info(66, 20), _info(66, 29, cluster=3)
    blobs = {"aa": base, "a1": {**base, "stages": 7}, "a2": listed, "a3": {**base, "swizzle": 1}}

    class Algo:
        def __init__(self, hexname):
            self.name, self.info = "cublaslt:" + hexname, blobs[hexname]

    monkeypatch.setattr(cublaslt.LtAlgo, "from_name", classmethod(lambda cls, name: Algo(name.split(":")[1])))
    monkeypatch.setattr(cublaslt, "heuristics", lambda m, n, k, dt, count: [Algo("aa"), Algo("a2")])
    asked = []

    def neighbours(algo, m, n, k, dt, tiles, splits):
        asked.append((tiles, splits))
        return [Algo("a1"), Algo("a2"), Algo("a3")]

    monkeypatch.setattr(cublaslt, "neighbours", neighbours)

    def rec(m, best_us, cands=None):
        return {"m": m, "n": 256, "k": 4096, "dtype": "fp16", "best": "torch", "best_label": "torch",
                "best_us": best_us, "cublaslt_autotune": "cublaslt:aa", "cublaslt_autotune_us": 10.0,
                "candidates": cands or {}}

    recs = [rec(64, 10.1), rec(128, 5.0), rec(256, 10.0, {"cublaslt:a3": {"ok": True, "us": 11.0}})]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    seen = []

    def fake(record, names, opt, tag):  # stands in for the GPU measurement only
        seen.append((record["m"], names))
        return {**record, "augmented": [*record.get("augmented", []), tag], "torch_us": 20.0}

    monkeypatch.setattr(tn, "augment_shape", fake)
    assert tn.neighbourhood(p, within=1.05, log=lambda m: None) == 0
    # the heuristic's own configuration (a2) and one already timed (a3 on the third shape) are left out; the
    # shape another kernel wins by 2x is not visited
    assert seen == [(64, ["cublaslt:a1", "cublaslt:a3"]), (256, ["cublaslt:a1"])]
    # other tiles are the ones the heuristic lists, in its order; deep K over a small output: other split counts
    assert asked == [((20, 29), tuple(cublaslt.splits_near(1)))] * 2
    assert tn.neighbourhood(p, within=1.05, log=lambda m: None) == 0 and len(seen) == 2  # visited: not again


def test_the_final_timing_calls_a_kernel_as_the_dispatch_does():
    from kernelrl.gemm.tune import as_dispatched

    calls = []

    def kernel(a, b, c):
        calls.append(c)
        torch.matmul(a, b, out=c)

    a, b = torch.randn(8, 4), torch.randn(4, 6)
    c1, c2 = as_dispatched(kernel)(a, b), as_dispatched(kernel)(a, b)
    assert c1.shape == (8, 6) and torch.allclose(c1, a @ b) and calls == [c1, c2] and c1 is not c2


def test_the_final_choice_takes_a_kernel_only_when_it_is_measurably_not_slower(monkeypatch):
    # medians alone would take k in all three cases; the paired interval rejects the noisy one
    import kernelrl.gemm.tune as tn

    def run(torch_rounds, k_rounds):
        def fake_time_graphs(fns, inp, calls, rounds, placements, rng=None, per_round=None):
            per_round.update(torch=torch_rounds, k=k_rounds)
            return {"torch": statistics.median(torch_rounds), "k": statistics.median(k_rounds)}

        monkeypatch.setattr(tn, "time_graphs_placed", fake_time_graphs)
        results = {"torch": {"us": 10.0, "rel_err": 1e-3}, "k": {"us": 9.0, "rel_err": 1e-3}}
        return tn._final(results, {"k": lambda a, b, c: None}, [], None, 1, tn.TuneOptions())[1]

    ten = [10.0] * 15
    assert run(ten, [9.7] * 15) == "k"  # 3% faster in every round
    assert run(ten, [9.99] * 15) == "torch"  # within the 0.5% margin
    noisy = [9.0, 10.6] * 7 + [9.0]  # median 9.0 (10% faster), but slower in 7 of the 15 rounds
    assert statistics.median(noisy) < 9.9 and run(ten, noisy) == "torch"


@pytest.mark.parametrize("suffix, packer", [(".gz", gzip.open), (".xz", lzma.open)])
def test_packed_records_are_unpacked_appended_and_packed_again(tmp_path, suffix, packer):
    p = tmp_path / f"r.jsonl{suffix}"
    with packer(p, "wt") as f:
        f.write(json.dumps({"m": 1}) + "\n")
    with plain_results(p) as work:
        with work.open("a") as f:
            f.write(json.dumps({"m": 2}) + "\n")
    assert [r["m"] for r in read_records(p)] == [1, 2]
    with packer(p, "rt") as f:  # packed again the same way
        assert [json.loads(line)["m"] for line in f] == [1, 2]


# --- dispatch -------------------------------------------------------------------------------------------
def test_matmul_on_cpu_tensors_is_torch_matmul():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    assert torch.equal(matmul(a, b), torch.matmul(a, b))


def test_dispatcher_names_the_tuned_kernel_and_torch_for_unknown_shapes():
    d = Dispatcher(_table())
    assert d.kernel_for(128, 64, 64, torch.float16) == "triton:64x64x64_s6_w4"
    assert d.kernel_for(64, 64, 64, torch.float16) == "torch"
    assert d.kernel_for(128, 64, 64, torch.bfloat16) == "torch"


def test_dispatcher_keeps_tuned_shapes_correct_off_the_gpu():
    d = Dispatcher(_table())
    a, b = torch.randn(128, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16)
    assert torch.equal(d(a, b), torch.matmul(a, b))


@pytest.mark.parametrize("hot_path", ["python", "c++"])
def test_the_fallback_answers_like_torch_matmul_for_every_kind_of_input(hot_path, request):
    d = Dispatcher(_table(), fastpath=request.getfixturevalue("fastpath_module") if hot_path == "c++" else False)
    assert d.uses_fastpath == (hot_path == "c++")
    cases = [(torch.randn(5, 7), torch.randn(7, 3)), (torch.randn(2, 5, 7), torch.randn(7, 3)),
             (torch.randn(7), torch.randn(7, 3)), (torch.randn(5, 7), torch.randn(7)),
             (torch.randn(128, 64, dtype=torch.float16), torch.randn(64, 64, dtype=torch.float16))]
    for a, b in cases:
        for _ in range(2):  # the first call learns the signature, the second takes the remembered path
            assert torch.equal(d(a, b), torch.matmul(a, b))
    for _ in range(2):
        with pytest.raises(RuntimeError):
            d(torch.randn(5, 7), torch.randn(6, 3))
        with pytest.raises(RuntimeError):
            d(torch.randn(5, 7), torch.randn(7, 3, dtype=torch.float64))
    a = torch.randn(5, 7, requires_grad=True)
    d(a, torch.ones(7, 3)).sum().backward()
    assert torch.equal(a.grad, torch.full((5, 7), 3.0))


# --- report and CLI -------------------------------------------------------------------------------------
def _csv(tmp_path, speedup=1.1):
    from kernelrl.gemm.bench import columns

    rows = []
    for i, (m, n, k) in enumerate([(64, 64, 64), (4096, 4096, 4096), (64, 64, 16384)]):
        t = 3.0 * (i + 1)
        r = {c: "" for c in columns()}
        r.update(m=m, n=n, k=k, dtype="fp16", kernel="torch" if i == 0 else "triton:x",
                 rel_err=2e-4, torch_rel_err=2e-4, cublaslt_autotune_kernel="")
        for impl, f in (("torch", 1.0), ("cublaslt_heuristic", 1.02), ("cublaslt_autotune", 0.99),
                        ("kernelrl", 1 / speedup)):
            r[f"{impl}_us"] = t * f
            for mode in ("offline", "cold", "server", "latency", "host"):
                r[f"{impl}_{mode}_us"] = t * f * 2
        r["torch_control_us"] = t
        rows.append(r)
    p = tmp_path / "gemm_test.csv"
    with p.open("w") as f:
        f.write(",".join(columns()) + "\n")
        for r in rows:
            f.write(",".join(str(r[c]) for c in columns()) + "\n")
    return p


def test_summary_computes_the_goal_numbers(tmp_path):
    rows = read_rows(_csv(tmp_path, speedup=1.2))
    rows[1]["torch_control_us"] = str(float(rows[1]["torch_us"]) * 1.05)  # the control ran 5% slower
    s = summarise(rows)
    assert s.control_below_098 == 1 and s.control_worst == pytest.approx(1 / 1.05)
    assert s.vs_torch == pytest.approx(1.2)
    assert s.vs_autotune == pytest.approx(1.2 * 0.99)
    assert s.goal_met()["vs_torch"] and s.goal_met()["vs_autotune"]


def test_median_interval_is_distribution_free_and_paired_ratios_cancel_shared_drift():
    from kernelrl.gemm.timing import median_ci, paired_ratio_ci

    xs = list(range(1, 22))  # 21 values: P(Bin(21, 1/2) <= 5) = 0.013, <= 6: 0.039 -> x(6) and x(16)
    assert median_ci(xs) == (6, 16)
    assert median_ci(list(range(1, 12))) == (2, 10)  # 11 values: x(2), x(10)
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for 95%: the whole range
    # the clock drifts from round to round; both implementations see it, so the paired ratio stays put
    drift = [1.0, 1.3, 0.9, 1.1, 1.25, 0.95, 1.2, 1.05, 0.92, 1.15, 1.0]
    slow, fast = [10.0 * d for d in drift], [9.0 * d for d in drift]
    med, lo, hi = paired_ratio_ci(slow, fast)
    assert med == pytest.approx(10 / 9) and lo == pytest.approx(10 / 9) and hi == pytest.approx(10 / 9)
    assert median_ci([s / f for s, f in zip(sorted(slow), fast)])[1] > 1.2  # unpaired: the drift shows
    with pytest.raises(ValueError, match="differ in length"):
        paired_ratio_ci([1.0], [1.0, 2.0])


def test_report_counts_shapes_measurably_below_the_floor(tmp_path):
    rows = read_rows(_csv(tmp_path, speedup=1.2))
    assert summarise(rows).surely_below_098 is None  # no intervals in the file: not claimed either way
    rows[0]["kernelrl_us"] = str(float(rows[0]["torch_us"]) / 0.95)  # 0.95x ...
    rows[0].update(speedup_ci_lo="0.94", speedup_ci_hi="0.99")  # ... but the interval reaches above 0.98
    rows[1].update(speedup_ci_lo="0.90", speedup_ci_hi="0.97", control_ci_lo="0.97", control_ci_hi="1.01")
    rows[2].update(speedup_ci_lo="1.1", speedup_ci_hi="1.3")
    s = summarise(rows)
    assert s.below_098 == 1 and s.surely_below_098 == 1 and s.control_surely_below_098 == 0
    assert "Measurably below 0.98x" in markdown(rows)


def test_report_reads_paired_speedups_where_the_file_has_them(tmp_path):
    from kernelrl.gemm.bench import PAIRED
    from kernelrl.gemm.timing import paired_ratio_ci

    rows = read_rows(_csv(tmp_path, speedup=1.0))
    # rounds in two clock states: torch's own median came from a fast round, kernelrl's (the same kernel) from
    # a slow one, so the ratio of the medians says 0.90x while every round says 1.00x
    rows[1].update(torch_us="148.7", kernelrl_us="164.3")
    assert summarise(rows).worst_vs_torch == pytest.approx(148.7 / 164.3)
    state = [148.7] * 10 + [164.3] * 11
    paired = paired_ratio_ci(state, state)[0]
    for r in rows:
        r.update({PAIRED["torch"]: "1.0", PAIRED["cublaslt_heuristic"]: "1.02",
                  PAIRED["cublaslt_autotune"]: "0.99", PAIRED["torch_control"]: "1.0"})
    rows[1][PAIRED["torch"]] = str(paired)
    s = summarise(rows)
    assert s.worst_vs_torch == pytest.approx(1.0) and s.below_098 == 0
    assert s.vs_autotune == pytest.approx(0.99) and s.vs_heuristic == pytest.approx(1.02)
    md = markdown(rows)
    assert "ratio of each implementation's own median instead" in md and "worst 0.905" in md
    rows[2][PAIRED["torch"]] = ""  # one row without paired figures: the whole file falls back to the medians
    assert summarise(rows).worst_vs_torch == pytest.approx(148.7 / 164.3)


def test_a_benchmark_file_with_other_columns_is_not_appended_to(tmp_path):
    from kernelrl.gemm.bench import bench

    old = tmp_path / "old.csv"
    old.write_text("m,n,k,dtype,torch_us\n64,64,64,fp16,2.0\n")
    with pytest.raises(ValueError, match="--fresh-bench"):
        bench([Shape(64, 64, 128)], {}, None, old)


def test_a_gzipped_benchmark_file_is_read_as_the_plain_one_and_left_as_it_was(tmp_path):
    from kernelrl.gemm.bench import bench

    kept = tmp_path / "kept.csv.gz"
    kept.write_bytes(gzip.compress(b"m,n,k,dtype,torch_us\n64,64,64,fp16,2.0\n"))
    before = kept.read_bytes()
    with pytest.raises(ValueError, match="--fresh-bench"):  # its columns were read through the gzip
        bench([Shape(64, 64, 128)], {}, None, kept)
    assert kept.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["kept.csv.gz"]


def test_report_says_when_a_goal_is_not_met(tmp_path):
    md = markdown(read_rows(_csv(tmp_path, speedup=1.01)))
    assert "**not met**" in md and "1.010" in md and "fp16 in" in md
    assert "Layout nt" not in md


def test_report_of_the_nt_layout_says_its_torch_baseline_is_f_linear(tmp_path):
    rows = read_rows(_csv(tmp_path))
    for r in rows:
        r["layout"] = "nt"
    md = markdown(rows)
    assert "`F.linear` on that weight" in md
    assert "| geomean speedup vs torch.matmul | >= 1.1 |" in md and "| >= 1.03 |" in md  # the linear layers' goals


def test_report_says_by_how_much_and_where_the_speedup_goal_is_missed(tmp_path):
    from kernelrl.gemm.report import gap_by

    rows = read_rows(_csv(tmp_path, speedup=1.01))  # torch.matmul 3, 6 and 9 us: one shape under 5 us, two over
    rows[2]["kernelrl_us"] = str(float(rows[2]["torch_us"]) / 1.2)  # one shape above the goal's 1.15x
    short = 2 * math.log(1.15 / 1.01) + math.log(1.15 / 1.2)
    (_, n_lo, g_lo, share_lo, whole_lo), (_, n_hi, g_hi, share_hi, whole_hi) = gap_by(
        rows, [("fast", rows[:1]), ("rest", rows[1:])])
    assert (n_lo, n_hi) == (1, 2) and g_lo == pytest.approx(1.01) and g_hi == pytest.approx((1.01 * 1.2) ** 0.5)
    assert share_lo == pytest.approx(math.log(1.15 / 1.01) / short) and share_lo + share_hi == pytest.approx(1.0)
    # the first shape at 1.15x, the others as measured
    assert whole_lo == pytest.approx((1.15 * 1.01 * 1.2) ** (1 / 3))
    (_, _, g_top, share_top, whole_top), = gap_by(rows, [("above", rows[2:])])
    assert g_top == pytest.approx(1.2) and share_top < 0  # above the goal: nothing to gain, a negative share
    assert whole_top == pytest.approx((1.01 * 1.01 * 1.2) ** (1 / 3))  # the whole geomean as measured
    md = markdown(rows)
    geo = (1.01 * 1.01 * 1.2) ** (1 / 3)
    assert f"**not met**: {1.15 - geo:.3f} short" in md and "## Where the speedup goal is missed" in md
    assert f"| 0-5 us | 1 | 1.010 | {math.log(1.15 / 1.01) / short:.0%} |" in md
    assert "## Where the speedup goal is missed" not in markdown(read_rows(_csv(tmp_path, speedup=1.2)))


def test_the_shortfall_is_split_by_what_bounds_each_shape_with_torch_matmuls_own_rates(tmp_path):
    from kernelrl.gemm.report import shape_kinds, torch_rates

    rows = read_rows(_csv(tmp_path, speedup=1.01))  # 64x64x64 in 3 us, 4096^3 in 6 us, 64x64x16384 in 9 us
    def row(m, n, k, us):
        return {**rows[1], "m": str(m), "n": str(n), "k": str(k), "torch_us": str(us)}
    more = [row(8192, 128, 256, 40.0), row(128, 8192, 8192, 40.0), row(8192, 256, 4096, 20.0)]
    kinds = dict(shape_kinds(rows + more))
    assert [r["m"] + "x" + r["n"] + "x" + r["k"] for r in kinds["launch-bound: torch.matmul under 5 us"]] == ["64x64x64"]
    assert [r["k"] for r in kinds["small output (at most 256x256), deep K"]] == ["16384"]
    assert [r["k"] for r in kinds["write-bound: K <= 256"]] == ["256"]  # K decides before the output's sides
    assert [(r["m"], r["n"]) for r in kinds["skinny: M or N <= 256"]] == [("128", "8192"), ("8192", "256")]
    assert [r["m"] for r in kinds["large: compute-bound"]] == ["4096"]
    assert sum(len(rs) for rs in kinds.values()) == 6
    tflops, tbs = torch_rates(rows[1:2])
    assert tflops == pytest.approx(2 * 4096 ** 3 / 6.0 / 1e6) and tbs == pytest.approx(2 * 3 * 4096 ** 2 / 6.0 / 1e6)
    tflops2, _ = torch_rates(rows[1:3])
    assert tflops2 == pytest.approx((tflops * 2 * 64 * 64 * 16384 / 9.0 / 1e6) ** 0.5)  # a geomean over the rows
    md = markdown(rows)
    assert "| what bounds the shape | shapes |" in md and "| large: compute-bound | 1 | 1.010 |" in md
    assert f"| {tflops:.0f} | {tbs:.2f} |" in md  # the large shape's own rates, in the last two columns


def test_the_ceiling_is_torch_matmuls_time_over_the_runs_own_roofline(tmp_path):
    from kernelrl.gemm.report import ceilings, roofline

    rows = read_rows(_csv(tmp_path, speedup=1.01))  # cuBLASLt autotune the fastest everywhere, at 0.99 of torch
    rows[1]["torch_us"] = "12.0"  # torch.matmul at half its earlier rate on 4096^3: the roofline keeps the best
    tflops, tbs, floor = roofline(rows)
    assert tflops == pytest.approx(2 * 4096 ** 3 / (6 * 0.99) / 1e6)
    assert tbs == pytest.approx(2 * 3 * 4096 ** 2 / (6 * 0.99) / 1e6) and floor == pytest.approx(3 * 0.99)
    big, deep, tiny = dict(rows[1], torch_us="200"), rows[2], rows[0]  # 4096^3, 64x64x16384, 64^3
    flops, moved = 2 * 4096 ** 3 / 1000 / 1e6, 2 * (2 * 64 * 16384 + 64 * 64) / 2.0 / 1e6
    assert ceilings([big, deep, tiny], (1000.0, 2.0, 1.0)) == pytest.approx(
        [200 / flops, 9 / moved, 3 / 1.0])  # bound by the tensor cores, by memory, by the shortest time
    md = markdown(read_rows(_csv(tmp_path, speedup=1.01)))  # the goal missed: the report's gap section
    whole = (1 / 0.99 * 1 / 0.99 * 9 / (3 * 0.99)) ** (1 / 3)  # 64x64x16384 in 9 us against the 2.97 us floor
    assert f"Over all shapes: {whole:.3f}." in md and "| ceiling |" in md


def test_report_names_the_dtype_the_file_measured(tmp_path):
    rows = read_rows(_csv(tmp_path, speedup=1.01))
    for r in rows:
        r["dtype"] = "bf16"
    assert "bf16 in, fp32 accumulate" in markdown(rows)


def test_report_reads_a_gzipped_benchmark_csv_as_the_plain_one(tmp_path):
    plain = _csv(tmp_path)
    packed = tmp_path / "kept.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_rows(packed) == read_rows(plain) and len(read_rows(packed)) == 3
    assert write_report(packed, tmp_path / "a").read_text() == write_report(plain, tmp_path / "b").read_text()


def test_a_report_of_two_dtypes_holds_a_goal_table_and_plots_for_each_and_names_the_gpu(tmp_path):
    import csv as _csvmod

    rows = read_rows(_csv(tmp_path, speedup=1.01))
    for r in rows[:1]:
        r["dtype"] = "bf16"
    path = tmp_path / "gemm_models_h100.csv"
    with path.open("w", newline="") as f:
        w = _csvmod.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    md = write_report(path, tmp_path / "out", "gemm_models_h100").read_text()
    assert md.count("# HGEMM on the H100") == 2 and "(bf16)" in md and "(fp16)" in md
    assert "1 shapes, bf16 in" in md and "2 shapes, fp16 in" in md
    assert {p.name for p in (tmp_path / "out").glob("*.png")} == {
        f"gemm_models_h100_{d}_{kind}.png" for d in ("bf16", "fp16") for kind in ("speedup", "families")}


def test_report_writes_markdown_and_plots(tmp_path):
    md = write_report(_csv(tmp_path), tmp_path)
    assert md.is_file() and len(list(tmp_path.glob("*.png"))) == 2


def test_cli_show_prints_the_kernel_of_a_shape(tmp_path):
    p = tmp_path / "t.json"
    _table().save(p)
    r = runner.invoke(app, ["show", "--table", str(p), "--shape", "128x64x64"])
    assert r.exit_code == 0 and "triton:64x64x64_s6_w4" in r.output


def test_cli_show_summarises_families_as_json(tmp_path):
    p = tmp_path / "t.json"
    _table().save(p)
    r = runner.invoke(app, ["show", "--table", str(p), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["families"]["triton"]["shapes"] == 1


def test_cli_rejects_a_malformed_shape_list():
    r = runner.invoke(app, ["tune", "--shapes", "64x64"])
    assert r.exit_code == 2 and "MxNxK" in r.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cli_tune_refuses_to_seed_a_dtype_from_itself_or_from_no_records(tmp_path):
    r = runner.invoke(app, ["tune", "--shapes", "64x64x64", "--dtype", "bf16", "--seed-dtype", "bf16"])
    assert r.exit_code == 2 and "another dtype" in r.output
    r = runner.invoke(app, ["tune", "--shapes", "64x64x64", "--dtype", "bf16", "--seed-dtype", "fp16",
                            "--results", str(tmp_path / "none.jsonl")])
    assert r.exit_code == 2 and "no records" in r.output
    r = runner.invoke(app, ["bench", "--shapes", "64x64x64", "--dtype", "fp32"])
    assert r.exit_code == 2 and "use fp16 or bf16" in r.output


def test_cli_tune_without_a_gpu_says_where_to_run_it():
    r = runner.invoke(app, ["tune", "--shapes", "64x64x64"])
    assert r.exit_code == 2 and "no CUDA device" in r.output


def test_cli_report_writes_the_report(tmp_path):
    r = runner.invoke(app, ["report", str(_csv(tmp_path))])
    assert r.exit_code == 0 and (tmp_path / "gemm_test_report.md").is_file()
    packed = tmp_path / "kept_bench.csv.gz"
    packed.write_bytes(gzip.compress(_csv(tmp_path).read_bytes()))
    r = runner.invoke(app, ["report", str(packed), "--out-dir", str(tmp_path / "kept")])
    assert r.exit_code == 0 and (tmp_path / "kept" / "kept_bench_report.md").is_file()
    packed.write_bytes(packed.read_bytes()[:40])  # cut short
    r = runner.invoke(app, ["report", str(packed)])
    assert r.exit_code != 0 and "is not a gemm benchmark CSV" in r.output


def _info(algo, tile, cluster=0, swizzle=0):
    return {"algo": algo, "tile": tile, "stages": 0, "splitk": 1, "reduction": 0, "swizzle": swizzle,
            "custom": 0, "cluster": cluster}


def test_wave_efficiency_rewards_whole_waves():
    from kernelrl.gemm.cublaslt import wave_efficiency

    assert wave_efficiency(2.0) == 1.0 and wave_efficiency(0.5) == 0.5
    assert wave_efficiency(1.1) == pytest.approx(0.55) and wave_efficiency(0.0) == 0.0


def test_the_enumeration_pick_spreads_over_tiles_and_skips_the_heuristics_own():
    from kernelrl.gemm.cublaslt import config_key, pick

    configs = [(_info(66, 20), 1.1), (_info(66, 20, cluster=2), 2.0),  # one tile, two clusters
               (_info(66, 30), 0.9), (_info(66, 40), 1.0), (_info(70, 20), 3.0)]
    heuristic = {config_key(_info(66, 40))}
    top = pick(configs, heuristic, 3)
    # one per (algorithm, tile), the best cluster of tile 20 first; the heuristic's own never comes back
    assert top == [1, 4, 2]
    assert 3 not in pick(configs, heuristic, 10) and len(pick(configs, heuristic, 10)) == 4
    assert pick(configs, set(), 0) == []
