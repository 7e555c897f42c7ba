"""The search space of each kernel family and an analytic cost model that prunes it per shape."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from kernelrl.gemm.shapes import Shape

NUM_SMS = 132  # H200 SXM
SMEM_BYTES = 227 * 1024  # largest dynamic shared memory one block may take on Hopper
SM_SMEM_BYTES = 228 * 1024  # shared memory of one SM, shared by its resident blocks (each also reserves 1 KiB)
DRAM_BYTES_PER_US = 4.2e6  # measured device copy rate, bytes per microsecond
PEAK_FLOPS_PER_US = 760e6  # measured fp16 torch.matmul rate on 8192^3, flop per microsecond
LAUNCH_US = 2.5  # fixed cost of one kernel in a graph replay, microseconds


@dataclass(frozen=True)
class TritonConfig:
    """One compile-time configuration of the Triton persistent TMA kernel."""

    bm: int
    bn: int
    bk: int
    stages: int
    warps: int
    ws: bool = False  # Triton warp specialisation of the tile loop
    group_m: int = 8

    @property
    def name(self) -> str:
        return f"triton:{self.bm}x{self.bn}x{self.bk}_s{self.stages}_w{self.warps}{'_ws' if self.ws else ''}"

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the pipeline plus the epilogue tile, bytes (16-bit elements)."""
        return 2 * (self.stages * (self.bm * self.bk + self.bk * self.bn) + self.bm * self.bn)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def parse(cls, name: str) -> "TritonConfig":
        """Inverse of `name`."""
        body = name.split(":", 1)[1]
        parts = body.split("_")
        bm, bn, bk = (int(x) for x in parts[0].split("x"))
        stages = int(parts[1][1:])
        warps = int(parts[2][1:])
        return cls(bm, bn, bk, stages, warps, ws="ws" in parts[3:])


def _tile_fields(text: str) -> tuple[int, int, int, int, int]:
    """(bm, bn, bk, stages, warps) from `<BM>x<BN>x<BK>_s<stages>_w<warps>`; ValueError otherwise."""
    dims, stages, warps = text.split("_")
    bm, bn, bk = (int(x) for x in dims.split("x"))
    if not (stages[0] == "s" and warps[0] == "w"):
        raise ValueError(text)
    return bm, bn, bk, int(stages[1:]), int(warps[1:])


def _tile_split_fields(name: str, letter: str) -> tuple[int, int, int, int, int, int]:
    """(bm, bn, bk, stages, warps, splits) from `<family>:<tile>/<letter><splits>`; ValueError otherwise."""
    tile, splits = name.split(":", 1)[1].split("/")
    if splits[0] != letter:
        raise ValueError(name)
    return (*_tile_fields(tile), int(splits[1:]))


@dataclass(frozen=True)
class _Tile:
    """The compile-time tile of the tiled, split-K and cluster split-K kernels."""

    bm: int
    bn: int
    bk: int
    stages: int
    warps: int

    @property
    def tile(self) -> str:
        """`<BM>x<BN>x<BK>_s<stages>_w<warps>`, the tile part of a kernel name."""
        return f"{self.bm}x{self.bn}x{self.bk}_s{self.stages}_w{self.warps}"

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the unpadded 16-bit pipeline, bytes."""
        return 2 * self.stages * (self.bm * self.bk + self.bk * self.bn)


@dataclass(frozen=True)
class TiledConfig(_Tile):
    """One configuration of the Triton tiled kernel (one program per output tile, no TMA, no workspace).
    `fixed`: the shape's sizes and strides compiled in (`matmul_tiled_fixed`, one binary per shape), for shapes
    the tiles cover exactly with a K that BK divides (`covers`)."""

    fixed: bool = False

    @property
    def name(self) -> str:
        return f"tiled:{self.tile}{FIXED_SUFFIX if self.fixed else ''}"

    def covers(self, shape: Shape) -> bool:
        """Whether the tiles cover the output exactly and BK divides K: no edge to handle."""
        return shape.m % self.bm == 0 and shape.n % self.bn == 0 and shape.k % self.bk == 0

    @classmethod
    def parse(cls, name: str) -> "TiledConfig":
        """Inverse of `name`."""
        try:
            body = name.split(":", 1)[1]
            return cls(*_tile_fields(body.removesuffix(FIXED_SUFFIX)), fixed=body.endswith(FIXED_SUFFIX))
        except (ValueError, IndexError) as e:
            raise ValueError(f"malformed tiled kernel name {name!r}: expected "
                             f"tiled:<BM>x<BN>x<BK>_s<stages>_w<warps>[{FIXED_SUFFIX}]") from e


FIXED_SUFFIX = "_fixed"  # a tiled kernel compiled for one shape (TiledConfig.fixed)


@dataclass(frozen=True)
class SplitKConfig(_Tile):
    """One configuration of the Triton split-K kernel: a compile-time tile plus the run-time K split."""

    splits: int = 1

    @property
    def name(self) -> str:
        return f"splitk:{self.tile}/k{self.splits}"

    def with_splits(self, splits: int) -> "SplitKConfig":
        return replace(self, splits=splits)

    @classmethod
    def parse(cls, name: str) -> "SplitKConfig":
        """Inverse of `name`."""
        try:
            cfg = cls(*_tile_split_fields(name, "k"))
        except (ValueError, IndexError) as e:
            raise ValueError(f"malformed split-K kernel name {name!r}: expected "
                             "splitk:<BM>x<BN>x<BK>_s<stages>_w<warps>/k<splits>") from e
        if cfg.splits < 1:
            raise ValueError(f"split-K kernel {name!r} needs at least one split")
        return cfg


@dataclass(frozen=True)
class ClusterKConfig(_Tile):
    """One configuration of the CUDA cluster split-K kernel (`kernels/cluster_splitk.cu`): a compile-time tile
    plus the run-time cluster size, which is the number of K splits (2-16). `wgmma` selects the main loop:
    asynchronous warpgroup MMAs from swizzled shared memory (one warpgroup of 4 warps per 64 rows) instead of
    ldmatrix and mma.sync; its names carry `_wg` after the tile. `tma` (with `wgmma`) fills that loop's stages
    with the bulk tensor copy engine instead of cp.async; its names carry `_tma` instead of `_wg`. `groups`
    (run time, default 1) clusters share each output tile's K, meeting in a global workspace after each has
    reduced on chip; its names carry `g<groups>` after the cluster size when above 1."""

    splits: int = 2
    wgmma: bool = False
    tma: bool = False
    groups: int = 1

    def __post_init__(self):
        if self.tma and not self.wgmma:
            raise ValueError("the bulk tensor copies (tma) feed the wgmma main loop: set wgmma too")

    @property
    def main_loop(self) -> str:
        """`mma` (ldmatrix and mma.sync), `wg` (wgmma fed by cp.async) or `tma` (wgmma fed by the copy engine)."""
        return "tma" if self.tma else "wg" if self.wgmma else "mma"

    @property
    def variant(self) -> str:
        """The tile part of the name with the main loop's marker: `<tile>`, `<tile>_wg` or `<tile>_tma`."""
        return self.tile if self.main_loop == "mma" else f"{self.tile}_{self.main_loop}"

    @property
    def name(self) -> str:
        return f"clusterk:{self.variant}/c{self.splits}" + (f"g{self.groups}" if self.groups > 1 else "")

    @property
    def symbol(self) -> str:
        """C identifier prefix of the compiled configuration's exported functions."""
        return f"kr_ck_{self.variant}"

    @property
    def warp_grid(self) -> tuple[int, int]:
        """(warps along M, warps along N): two along the shorter side where there are at least four (the
        wgmma loop: one warpgroup per 64 rows)."""
        w = self.warps
        if self.wgmma:
            return (w, 1)
        if w <= 2:
            return (w, 1) if self.bm >= self.bn else (1, w)
        return (2, w // 2) if self.bn >= self.bm else (w // 2, 2)

    @property
    def macros(self) -> dict[str, int | str]:
        wm, wn = self.warp_grid
        return {"KR_NAME": self.symbol, "KR_BM": self.bm, "KR_BN": self.bn, "KR_BK": self.bk,
                "KR_STAGES": self.stages, "KR_WM": wm, "KR_WN": wn, "KR_WGMMA": int(self.wgmma),
                "KR_TMA": int(self.tma)}

    @property
    def smem_bytes(self) -> int:
        """Shared memory of one block: the pipeline (padded rows for ldmatrix; unpadded but 1024-byte aligned
        for wgmma's swizzle) plus the fp32 tile the partial sums are sent to (and with `tma`, two 8-byte
        mbarriers per stage), bytes."""
        if self.wgmma:
            pipe = 1024 + 2 * self.stages * (self.bm * self.bk + self.bk * self.bn)
        else:
            pipe = 2 * self.stages * (self.bm * (self.bk + 8) + self.bk * (self.bn + 8))
        return pipe + 4 * (self.bm + CLUSTERK_SPARE_ROWS) * (self.bn + 4) + (16 * self.stages if self.tma else 0)

    @property
    def resident(self) -> int:
        """Blocks of this configuration one SM holds at once (by shared memory, its limit here)."""
        return max(1, SM_SMEM_BYTES // (self.smem_bytes + 1024))

    def with_splits(self, splits: int, groups: int = 1) -> "ClusterKConfig":
        return replace(self, splits=splits, groups=groups)

    def workspace_bytes(self, shape: Shape) -> int:
        """Global workspace of a launch on `shape`: each group's fp32 sum of every output tile (none with one
        group; the counters, 4 bytes per tile and rank, come on top)."""
        tiles = math.ceil(shape.m / self.bm) * math.ceil(shape.n / self.bn)
        return 0 if self.groups == 1 else tiles * self.groups * self.bm * self.bn * 4

    @classmethod
    def parse(cls, name: str) -> "ClusterKConfig":
        """Inverse of `name`; the tile must be one of CLUSTERK_TILES."""
        try:
            tma = "_tma/" in name
            head, _, tail = name.replace("_wg/", "/").replace("_tma/", "/").rpartition("/")
            splits, grouped, groups = tail.partition("g")  # c<splits>[g<groups>]
            cfg = cls(*_tile_split_fields(f"{head}/{splits}", "c"), wgmma=tma or "_wg/" in name, tma=tma,
                      groups=int(groups) if grouped else 1)
        except (ValueError, IndexError) as e:
            raise ValueError(f"malformed cluster split-K kernel name {name!r}: expected "
                             "clusterk:<BM>x<BN>x<BK>_s<stages>_w<warps>[_wg|_tma]/c<splits>[g<groups>]") from e
        if not 2 <= cfg.splits <= CLUSTERK_MAX_SPLITS or (
                cfg.splits & (cfg.splits - 1) and (cfg.splits not in CLUSTERK_ODD_SPLITS or cfg.groups > 1)):
            raise ValueError(f"cluster split-K kernel {name!r}: the cluster size (splits) must be a power of two "
                             f"from 2 to {CLUSTERK_MAX_SPLITS}, or one of {CLUSTERK_ODD_SPLITS} with one cluster "
                             "per tile")
        if not 1 <= cfg.groups <= CLUSTERK_MAX_GROUPS or (grouped and cfg.groups < 2):
            raise ValueError(f"cluster split-K kernel {name!r}: the clusters per tile (groups) must be from 2 to "
                             f"{CLUSTERK_MAX_GROUPS}, and left out for 1")
        if cfg.with_splits(2) not in CLUSTERK_TILES:
            raise KeyError(f"unknown cluster split-K configuration in {name!r}: one of "
                           f"{[t.variant for t in CLUSTERK_TILES]}")
        return cfg


@dataclass(frozen=True)
class CutlassConfig:
    """One compiled CUTLASS SM90 configuration (the template's -D macros)."""

    tm: int
    tn: int
    tk: int
    cm: int = 1
    cn: int = 1
    pingpong: bool = False
    streamk: bool = False  # stream-K tile scheduler (also does split-K and data-parallel at run time)
    epi_n: int = 0  # columns of the epilogue's subtile (0: CUTLASS's choice, 32)

    @property
    def symbol(self) -> str:
        """C identifier prefix of this configuration's exported functions."""
        sched = "pp" if self.pingpong else "coop"
        epi = f"_e{self.epi_n}" if self.epi_n else ""
        return f"kr_{sched}_{self.tm}x{self.tn}x{self.tk}_c{self.cm}x{self.cn}_{'sk' if self.streamk else 'p'}{epi}"

    @property
    def macros(self) -> dict[str, int | str]:
        macros: dict[str, int | str] = {
            "KR_NAME": self.symbol, "KR_TM": self.tm, "KR_TN": self.tn, "KR_TK": self.tk, "KR_CM": self.cm,
            "KR_CN": self.cn, "KR_PINGPONG": int(self.pingpong), "KR_STREAMK": int(self.streamk)}
        if self.epi_n:
            macros["KR_EPI_N"] = self.epi_n
        return macros

    def tiles(self, shape: Shape) -> int:
        """Output tiles of this configuration on `shape`."""
        return math.ceil(shape.m / self.tm) * math.ceil(shape.n / self.tn)


@dataclass(frozen=True)
class CutlassVariant:
    """A compiled configuration plus its run-time scheduler arguments."""

    config: CutlassConfig
    decomposition: int = 0  # 0 heuristic, 1 data-parallel, 2 split-K, 3 stream-K (stream-K scheduler only)
    splits: int = 1
    raster: int = 0  # 0 heuristic, 1 along M, 2 along N
    swizzle: int = 1

    @property
    def name(self) -> str:
        dec = {0: "auto", 1: "dp", 2: f"splitk{self.splits}", 3: "streamk"}[self.decomposition]
        return f"cutlass:{self.config.symbol[3:]}/{dec}_r{self.raster}_s{self.swizzle}"

    @classmethod
    def parse(cls, name: str) -> "CutlassVariant":
        """Inverse of `name`; the configuration must be one of CUTLASS_CONFIGS."""
        body = name.split(":", 1)[1]
        sym, rt = body.split("/")
        by_symbol = {c.symbol[3:]: c for c in CUTLASS_CONFIGS}
        if sym not in by_symbol:
            raise KeyError(f"unknown CUTLASS configuration {sym!r} in {name!r}")
        dec_s, r, s = rt.split("_")
        if dec_s.startswith("splitk"):
            dec, splits = 2, int(dec_s[6:])
        else:
            dec, splits = {"auto": 0, "dp": 1, "streamk": 3}[dec_s], 1
        return cls(by_symbol[sym], dec, splits, int(r[1:]), int(s[1:]))


TRITON_CONFIGS: tuple[TritonConfig, ...] = tuple(
    TritonConfig(bm, bn, bk, st, w, ws)
    for (bm, bn, bk, st, w) in [
        (128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 5, 8), (64, 256, 64, 4, 4),
        (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 128, 4, 4), (64, 64, 64, 6, 4),
    ]
    for ws in (False, True)
    # Triton 3.6's Hopper warp-specialisation pass fails on these two tile shapes (PassManager::run failed)
    if not (ws and (bm, bn) in ((64, 256), (128, 64)))
)

# 128x64x64 with 4 warps is left out: with K splits it failed the correctness gate on 19 of 150 H200 shapes
# (relative error 5e-3 to 6e-2), while every other tile passed on every shape (benchmarks/results/
# gemm_h200_findings.md, "Tried and not adopted").
SPLITK_TILES: tuple[SplitKConfig, ...] = (
    SplitKConfig(64, 64, 64, 4, 4), SplitKConfig(64, 64, 128, 3, 4), SplitKConfig(64, 128, 64, 4, 4),
    SplitKConfig(128, 128, 64, 4, 8), SplitKConfig(128, 256, 64, 3, 8),
)
SPLITK_MAX_OUTPUT = 1 << 22  # the fp32 workspace holds one output: at most this many elements (16 MiB)
# Where the search proposes split-K: measured on the H200 over 528 shapes, the family came within 10% of
# torch.matmul only for outputs of at most 64K elements with K >= 2048 (up to 1.14x on 64x64x4096), and ran
# at 0.39-0.72x (geomean) everywhere else.
SPLITK_SEARCH_MAX_OUTPUT = 1 << 16
SPLITK_SEARCH_MIN_K = 2048

# Small tiles and few warps first: the family is for shapes whose time is launch and memory latency.
TILED_CONFIGS: tuple[TiledConfig, ...] = tuple(
    TiledConfig(bm, bn, bk, st, w) for (bm, bn, bk, st, w) in [
        (32, 32, 64, 3, 1), (32, 32, 128, 3, 2), (32, 32, 256, 3, 2), (32, 64, 64, 3, 2), (64, 32, 64, 3, 2),
        (32, 64, 128, 4, 2), (64, 64, 64, 3, 4), (64, 64, 128, 3, 4), (64, 64, 128, 4, 4), (64, 64, 256, 3, 4),
        (64, 128, 64, 3, 4), (64, 128, 64, 4, 4), (128, 64, 64, 3, 4), (128, 128, 64, 3, 4),
        (128, 128, 64, 3, 8), (128, 128, 64, 4, 8),
        # deeper K steps and other pipelines for the tiles that won most often in the first search
        (32, 32, 512, 2, 2), (32, 32, 512, 2, 4), (32, 32, 256, 3, 4), (32, 32, 128, 4, 2), (32, 64, 256, 3, 2),
        (64, 32, 256, 3, 2), (64, 64, 256, 2, 4), (64, 64, 64, 2, 4),
    ])
# Where the search proposes the tiled family: on the H200 it beat torch.matmul by more than 1% on 97 of 277
# shapes that torch runs in under 6 us, all of them with a roofline estimate under 3.5 us (launch-bound
# shapes), and lost on the larger ones; searched again up to 6 us once its edge handling went and its fixed
# form came (benchmarks/results/gemm_h200_findings.md, "The tiled kernel").
TILED_SEARCH_MAX_EST_US = 6.0

# Tiles smaller than 64x64 (the mma.sync loop, four warps of 16x16 or 16x32) for the smallest outputs with a deep K:
# there a cluster's exchange moves most of each block's partial tile, and a 32x32 tile's is a quarter of a 64x64
# one's, while the output makes four times the tiles for the same cluster size. On the H200 they took 64x64x1024
# from 3.45 to 2.97 us and 64x64x4096 from 4.54 to 4.08 (torch.matmul 3.56 and 7.12), and lost from 256x256 up
# (benchmarks/results/gemm_runs/probe_small_tiles.log). The search proposes them on outputs of at most
# CLUSTERK_SMALL_MAX_OUTPUT elements (`clusterk_small_candidates`), not among the other tiles; they are
# compiled with them (CLUSTERK_TILES).
CLUSTERK_SMALL_TILES: tuple[ClusterKConfig, ...] = (
    ClusterKConfig(32, 32, 64, 4, 4), ClusterKConfig(32, 32, 128, 3, 4), ClusterKConfig(32, 64, 64, 4, 4),
    ClusterKConfig(32, 64, 128, 3, 4))
CLUSTERK_SMALL_MAX_OUTPUT = 128 * 256
# The cluster split-K tiles (compiled configurations); the split is the cluster size, chosen at run time.
CLUSTERK_TILES: tuple[ClusterKConfig, ...] = (
    ClusterKConfig(64, 64, 64, 4, 4), ClusterKConfig(64, 64, 128, 3, 4), ClusterKConfig(64, 128, 64, 4, 4),
    ClusterKConfig(128, 64, 64, 4, 4), ClusterKConfig(128, 128, 64, 3, 8),
    # the wgmma main loop: one warpgroup per 64 rows, deeper pipelines (no padding, no register fragments)
    ClusterKConfig(64, 64, 64, 8, 4, wgmma=True), ClusterKConfig(64, 64, 128, 4, 4, wgmma=True),
    ClusterKConfig(64, 64, 128, 6, 4, wgmma=True), ClusterKConfig(64, 128, 64, 6, 4, wgmma=True),
    ClusterKConfig(128, 64, 64, 6, 8, wgmma=True), ClusterKConfig(128, 128, 64, 4, 8, wgmma=True),
    # wgmma with its stages filled by the bulk tensor copy engine; deeper K steps, since each trip round the
    # loop has a fixed cost that the copy engine does not remove
    *(ClusterKConfig(bm, bn, bk, st, w, wgmma=True, tma=True) for (bm, bn, bk, st, w) in [
        (64, 64, 128, 4, 4), (64, 64, 128, 6, 4), (64, 64, 256, 3, 4), (64, 128, 64, 6, 4), (64, 128, 128, 3, 4),
        (128, 64, 64, 6, 8), (128, 64, 128, 3, 8), (128, 128, 64, 4, 8),
        # shallow pipelines that let two blocks share an SM, one block's trip round the loop overlapping the
        # other's tensor-core work
        (64, 64, 64, 5, 4), (64, 128, 64, 3, 4), (128, 64, 64, 3, 8)]),
    *CLUSTERK_SMALL_TILES,
)
# Cost-model factor of each main loop's time per K step (ranking only), from one block's time on
# 64x64x16384 on the H200 (benchmarks/results/gemm_runs/probe_clusterk_tma_summary.txt): mma.sync 435 ns per
# 64x64x64 step, wgmma fed by cp.async 245, fed by the copy engine 160 with K steps deeper than 64 (with
# 64-deep steps, 250: what cp.async costs).
CLUSTERK_LOOP_COST = {"mma": 1.0, "wg": 0.56, "tma": 0.37}
CLUSTERK_MAX_SPLITS = 16  # the largest (non-portable) cluster Hopper places
# Cluster sizes besides the powers of two (one cluster per tile): a block owns ceil(BM / splits) rows, and its
# receive region has CLUSTERK_SPARE_ROWS rows beyond the tile for the remainder (the kernel's kSpareRows).
# They fill a wave where the powers of two do not: the GPU places 15 clusters of 8 at once and 30 of 4, so 16
# output tiles in clusters of 8, or 32 in clusters of 4, ran a second wave.
CLUSTERK_ODD_SPLITS = (3, 5, 6, 7, 9, 10, 11, 12, 13)  # every size the kernel takes besides the powers of two
# The sizes the search proposes. Above 8 the GPU places about one cluster per GPC (9 of 9, 7 of 10 to 13), and a
# search of 9 to 13 on the 76 fp16 shapes they had candidates for chose none of them (gemm_h200_findings.md,
# "Tried and not adopted").
CLUSTERK_FILL_SPLITS = (3, 5, 6, 7)
CLUSTERK_SPARE_ROWS = 8
CLUSTERK_MAX_GROUPS = 1024  # clusters sharing one output tile's K (the kernel's own limit)
# Blocks that clusters of each size run at once on the H200, by (cluster size, blocks per SM): a cluster stays
# within one GPC, so the SMs of a GPC beyond a multiple of the cluster size stay idle. From CUDA's occupancy
# calculator (cudaOccupancyMaxActiveClusters, which Nsight Compute reports too) for every compiled tile: 66
# clusters of 2, 30 of 4, 15 of 8 and 7 of 16 with one block per SM; 132, 62, 30 and 14 with two
# (benchmarks/results/gemm_runs/cluster_capacity.txt, cluster_capacity_fill.txt). A launch of more blocks runs
# a second wave. Checked on the GPU against the built kernels (tests/test_gemm_clusterk_gpu.py).
CLUSTER_WAVE_BLOCKS = {(2, 1): 132, (4, 1): 120, (8, 1): 120, (16, 1): 112,
                       (2, 2): 264, (4, 2): 248, (8, 2): 240, (16, 2): 224,
                       # the other sizes the kernel takes (CLUSTERK_ODD_SPLITS; gemm_runs/cluster_capacity_fill.txt):
                       # 39 clusters of 3, 22 of 5, 17 of 6, 15 of 7, 9 of 9 and 7 of 10 to 13 with one block per
                       # SM (above 8, about one cluster per GPC)
                       (3, 1): 117, (5, 1): 110, (6, 1): 102, (7, 1): 105,
                       (9, 1): 81, (10, 1): 70, (11, 1): 77, (12, 1): 84, (13, 1): 91,
                       (3, 2): 237, (5, 2): 235, (6, 2): 234, (7, 2): 224,
                       (9, 2): 207, (10, 2): 210, (11, 2): 176, (12, 2): 192, (13, 2): 182,
                       # the tiles smaller than 64x64 (gemm_runs/cluster_capacity_small.txt): three
                       # blocks per SM (32x32x128_s3, 32x64x64_s4) and five (32x32x64_s4)
                       **{(s, 3): s * n for s, n in ((2, 198), (3, 124), (4, 92), (5, 69), (6, 62), (7, 47),
                                                     (8, 45), (9, 37), (10, 30), (11, 28), (12, 28), (13, 23),
                                                     (16, 21))},
                       **{(s, 5): s * n for s, n in ((2, 330), (3, 203), (4, 154), (5, 124), (6, 101), (7, 84),
                                                     (8, 77), (9, 60), (10, 58), (11, 51), (12, 44), (13, 42),
                                                     (16, 35))}}


def cluster_wave_blocks(cluster: int, resident: int = 1) -> int:
    """Blocks of clusters of `cluster` blocks that the GPU runs at once, `resident` blocks per SM (measured
    where CLUSTER_WAVE_BLOCKS has it; else whole clusters on every SM)."""
    return CLUSTER_WAVE_BLOCKS.get((cluster, resident), (NUM_SMS - NUM_SMS % cluster) * resident)


# Cost model of several clusters per tile: one round trip through the global workspace (the stores, the
# count, the last block's loads).
CLUSTERK_GROUP_US = 0.6
CLUSTERK_REDUCE_US = 0.15  # cost model: one more block's partials exchanged over distributed shared memory
# Cost model: the share of the loop's per-step cost left when two blocks share an SM (a guess to rank with)
CLUSTERK_SHARED_SM_COST = 0.7

# The ping-pong configurations again with an epilogue subtile of 64 x 128 (64 x 64 for the 64-column tile) instead
# of CUTLASS's 64 x 32: a consumer writes its tile in one or two steps instead of four to eight, and waits less
# often on the copy engine's stores. On the write-bound shapes (K <= 256) 64 x 128 ran 4.9% faster than 64 x 32,
# geomean, in the 128x128 tile (gemm_h200_findings.md, "CUTLASS"). Searched as a family of their own
# (`cutlass-epi`).
CUTLASS_EPI_CONFIGS: tuple[CutlassConfig, ...] = (
    CutlassConfig(128, 128, 64, pingpong=True, epi_n=128),
    CutlassConfig(128, 128, 64, cm=2, pingpong=True, epi_n=128),
    CutlassConfig(128, 128, 64, cn=2, pingpong=True, epi_n=128),
    CutlassConfig(64, 256, 64, pingpong=True, epi_n=128),
    CutlassConfig(64, 256, 64, cm=2, pingpong=True, epi_n=128),
    CutlassConfig(64, 128, 64, pingpong=True, epi_n=128),
    CutlassConfig(128, 64, 64, pingpong=True, epi_n=64),
)
CUTLASS_CONFIGS: tuple[CutlassConfig, ...] = (
    CutlassConfig(128, 128, 64, streamk=True),
    CutlassConfig(128, 256, 64, streamk=True),
    CutlassConfig(128, 64, 64, streamk=True),
    CutlassConfig(128, 256, 64, cm=2),
    CutlassConfig(256, 128, 64, cn=2),
    CutlassConfig(64, 128, 64, pingpong=True),
    CutlassConfig(128, 128, 64, pingpong=True),
    CutlassConfig(64, 256, 64, pingpong=True),
    # Pingpong won 46 of the family's 47 shapes in the first grid search (128x128x64 alone, 45): it with the
    # operand tiles multicast across a cluster of two, a smaller pingpong tile for mid-sized outputs, and the
    # large cooperative tiles with the cluster along the other dimension
    CutlassConfig(128, 128, 64, cm=2, pingpong=True),
    CutlassConfig(128, 128, 64, cn=2, pingpong=True),
    CutlassConfig(128, 64, 64, pingpong=True),
    CutlassConfig(64, 256, 64, cm=2, pingpong=True),
    CutlassConfig(128, 256, 64, cn=2),
    CutlassConfig(256, 128, 64, cm=2),
    *CUTLASS_EPI_CONFIGS,
)
# Where the search proposes the CUTLASS family: on the H200 it won no shape whose roofline estimate is under 8 us
# (the smallest winner's: 8.2 us; its persistent kernels' fixed cost), so the search skips those.
CUTLASS_SEARCH_MIN_EST_US = 6.0
# Raster swizzle variants (the persistent scheduler's max_swizzle_size) for outputs of several waves of tiles,
# where which tiles run together decides how often the operand tiles are found in L2.
CUTLASS_SWIZZLE_MIN_WAVES = 2
# The tiles of CUTLASS_EPI_CONFIGS searched with the swizzle too: in the plain family's records the swizzle paid on
# the 128x128 ping-pong tile alone (2.8% faster than without it, geomean over 636 shapes, and by more than 2% on
# 156), and on average not on the others (64x256: 0.6% slower, 128x64: 8% slower; the 128x128 tile in clusters of
# two: 3% slower on average, but more than 2% faster on 133 of 606 shapes)
CUTLASS_EPI_SWIZZLE_TILES = ((128, 128),)


def roofline_us(shape: Shape) -> float:
    """Roofline estimate of one product at torch.matmul's measured rates plus the launch cost, microseconds."""
    return LAUNCH_US + max(shape.flops / PEAK_FLOPS_PER_US, shape.bytes() / DRAM_BYTES_PER_US)


def tile_efficiency(bm: int, bn: int) -> float:
    """Fraction of peak tensor throughput a tile of bm x bn sustains (shared-memory feed limits small tiles)."""
    intensity = bm * bn / (bm + bn)  # flops per byte loaded, up to a constant
    return min(1.0, intensity / 85.3) ** 0.5  # 128x256 -> 1.0; 64x64 -> 0.61


def estimate_us(shape: Shape, bm: int, bn: int, splits: int = 1, streamk: bool = False,
                cluster: int = 1, fixup_share: float = 1.0, tiles_in_flight: int = 1, resident: int = 1) -> float:
    """Cost-model time of one product with bm x bn tiles and a K split, microseconds (for ranking only).
    `fixup_share`: the share of the split-K fix-up's DRAM traffic (partials written and read back) paid.
    `tiles_in_flight`: output tiles one SM computes at once (a pingpong kernel's two consumer warpgroups each
    own one), which its operand feed serves together. `resident`: blocks one SM holds at once (a wave is
    that many times larger, and its blocks share the SM's tensor cores)."""
    tiles = math.ceil(shape.m / bm) * math.ceil(shape.n / bn)
    padded = tiles * bm * bn * shape.k * 2
    per_sm = PEAK_FLOPS_PER_US / NUM_SMS * tile_efficiency(bm, bn * tiles_in_flight)
    if streamk:
        compute = padded / (NUM_SMS * per_sm) * 1.05 + 1.0  # balanced work plus fix-up
        fixup = 0.0
    else:
        work_units = tiles * splits
        # clusters place whole within one GPC: fewer SMs hold blocks at once than the GPU has
        slots = cluster_wave_blocks(cluster, resident)
        waves = math.ceil(work_units / slots)
        compute = waves * resident * (bm * bn * (shape.k / splits) * 2) / per_sm
        fixup = fixup_share * (splits - 1) * shape.m * shape.n * 4 * 2 / DRAM_BYTES_PER_US
    memory = shape.bytes() / DRAM_BYTES_PER_US
    k_latency = 0.05 * math.ceil(shape.k / splits / 64)  # each k-step has a latency floor when few tiles run
    return LAUNCH_US + max(compute, memory) + fixup + k_latency


def triton_candidates(shape: Shape, top: int = 4) -> list[TritonConfig]:
    """The `top` Triton configurations the cost model ranks best for `shape` (both WS variants of each tile)."""
    fits = [c for c in TRITON_CONFIGS if c.smem_bytes <= SMEM_BYTES]
    ranked = sorted(fits, key=lambda c: (estimate_us(shape, c.bm, c.bn), -c.bk, c.stages, c.ws))
    return ranked[:top]


def cutlass_candidates(shape: Shape, top: int = 6) -> list[CutlassVariant]:
    """The `top` CUTLASS variants (configuration x decomposition x swizzle) the cost model ranks best for
    `shape`; none for shapes whose estimate is under CUTLASS_SEARCH_MIN_EST_US."""
    if roofline_us(shape) < CUTLASS_SEARCH_MIN_EST_US:
        return []
    scored: list[tuple[float, int, CutlassVariant]] = []
    for i, cfg in enumerate(c for c in CUTLASS_CONFIGS if not c.epi_n):
        cluster = cfg.cm * cfg.cn
        base = (estimate_us(shape, cfg.tm, cfg.tn, cluster=cluster, tiles_in_flight=2) * 0.97 if cfg.pingpong
                else estimate_us(shape, cfg.tm, cfg.tn, cluster=cluster))
        tiles = cfg.tiles(shape)
        if cfg.streamk:
            scored.append((base, i, CutlassVariant(cfg, decomposition=1)))
            if tiles < NUM_SMS and shape.k >= 512:
                scored.append((estimate_us(shape, cfg.tm, cfg.tn, streamk=True), i,
                               CutlassVariant(cfg, decomposition=3)))
                for s in (2, 4, 8, 16):
                    if shape.k // s >= 256 and tiles * s <= 2 * NUM_SMS:
                        scored.append((estimate_us(shape, cfg.tm, cfg.tn, splits=s), i,
                                       CutlassVariant(cfg, decomposition=2, splits=s)))
        else:
            scored.append((base, i, CutlassVariant(cfg)))
            if _swizzle_may_pay(cfg, shape):
                # ranked just after the same configuration without the swizzle (the model cannot tell them apart)
                scored.append((base * 1.001, i, CutlassVariant(cfg, swizzle=4)))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [v for _, _, v in scored[:top]]


def cutlass_epi_candidates(shape: Shape, top: int = 7) -> list[CutlassVariant]:
    """The `top` configurations of CUTLASS_EPI_CONFIGS the cost model ranks best for `shape` (the same shapes as
    `cutlass_candidates`), each with the scheduler's own decomposition and raster; each 128x128 one, where the
    output has several waves of its tiles, also with the raster swizzle (CUTLASS_EPI_SWIZZLE_TILES)."""
    if roofline_us(shape) < CUTLASS_SEARCH_MIN_EST_US:
        return []
    scored = sorted((estimate_us(shape, c.tm, c.tn, cluster=c.cm * c.cn, tiles_in_flight=2), i, c)
                    for i, c in enumerate(CUTLASS_EPI_CONFIGS))
    out = []
    for _, _, c in scored[:top]:
        out.append(CutlassVariant(c))
        if (c.tm, c.tn) in CUTLASS_EPI_SWIZZLE_TILES and _swizzle_may_pay(c, shape):
            out.append(CutlassVariant(c, swizzle=4))
    return out


def _swizzle_may_pay(cfg: CutlassConfig, shape: Shape) -> bool:
    """Whether the output has enough waves of `cfg`'s tiles for the raster swizzle to matter."""
    return cfg.tiles(shape) >= CUTLASS_SWIZZLE_MIN_WAVES * NUM_SMS


def cutlass_runtime_variants(variant: CutlassVariant, shape: Shape) -> list[CutlassVariant]:
    """The run-time neighbours of a persistent-scheduler CUTLASS variant on `shape` (nothing to compile): the
    other two raster orders at its swizzle, where the output has a wave of its tiles or more, and the other
    swizzles (1, 2, 4, 8) in the scheduler's own raster order, where it has two waves or more. None for the
    stream-K scheduler's variants, whose decompositions the search covers."""
    cfg = variant.config
    if cfg.streamk:
        return []
    out = []
    if cfg.tiles(shape) >= NUM_SMS:
        out += [CutlassVariant(cfg, raster=r, swizzle=variant.swizzle) for r in (0, 1, 2) if r != variant.raster]
    if _swizzle_may_pay(cfg, shape):
        out += [CutlassVariant(cfg, swizzle=w) for w in (1, 2, 4, 8)
                if (0, w) != (variant.raster, variant.swizzle)]
    return list(dict.fromkeys(out))


def splitk_candidates(shape: Shape, top: int = 8) -> list[SplitKConfig]:
    """Up to `top` split-K configurations for `shape`: the cost model's best K split of every tile that fits
    the output, then each tile's second best. Only for shapes with a small output and a deep K (few output
    tiles, each a long serial K loop: SPLITK_SEARCH_*); empty for others."""
    if shape.m * shape.n > SPLITK_SEARCH_MAX_OUTPUT or shape.k < SPLITK_SEARCH_MIN_K:
        return []
    per_tile: list[list[tuple[float, SplitKConfig]]] = []
    for cfg in SPLITK_TILES:
        if cfg.bm > max(64, shape.m) or cfg.bn > max(64, shape.n):
            continue  # a tile larger than the output computes padding
        tiles = math.ceil(shape.m / cfg.bm) * math.ceil(shape.n / cfg.bn)
        scored = []
        s = 1
        while s <= 64 and shape.k >= 2 * s * cfg.bk and tiles * s <= 4 * NUM_SMS:
            # atomic adds resolve in L2: count half the DRAM fix-up traffic the generic model assumes
            scored.append((estimate_us(shape, cfg.bm, cfg.bn, splits=s, fixup_share=0.5), cfg.with_splits(s)))
            s *= 2
        if scored:
            per_tile.append(scored)
    return _firsts_then_seconds(per_tile, top)


def _firsts_then_seconds(per_tile: list[list[tuple[float, object]]], top: int) -> list:
    """From (estimate, config) lists, one per tile: every tile's best split, then every tile's second best,
    each group ranked by estimate; the first `top`. Keeps the search from spending all of `top` on one tile."""
    ranked = [sorted(scored, key=lambda t: (t[0], t[1].splits)) for scored in per_tile if scored]
    firsts = sorted((t[0] for t in ranked), key=lambda t: t[0])
    seconds = sorted((t[1] for t in ranked if len(t) > 1), key=lambda t: t[0])
    return [c for _, c in (firsts + seconds)[:top]]


# Where the search proposes cluster split-K: fewer output tiles of its largest tile than SMs, and a K deep
# enough that every split gets at least one K step.
CLUSTERK_SEARCH_MIN_K = 512


def clusterk_candidates(shape: Shape, top: int = 8, grouped_top: int = 0) -> list[ClusterKConfig]:
    """Up to `top` cluster split-K configurations for a shape with few output tiles and a deep K (empty for
    others): each tile that fits the output with its cost model's best cluster size, then its second best.
    Then up to `grouped_top` with several clusters per output tile (`clusterk_grouped_candidates`)."""
    if not _clusterk_searched(shape):
        return []
    per_tile = []
    for cfg, tiles, loop_cost in _clusterk_tiles(shape):
        scored = []
        s = 2
        while s <= CLUSTERK_MAX_SPLITS and shape.k >= s * cfg.bk and tiles * s <= 2 * NUM_SMS * cfg.resident:
            # the partial sums stay on chip: no DRAM fix-up, a short exchange per extra split instead
            est = estimate_us(shape, cfg.bm, cfg.bn, splits=s, cluster=s, fixup_share=0.0,
                              resident=cfg.resident) * loop_cost
            scored.append((est + CLUSTERK_REDUCE_US * (s - 1) ** 0.5, cfg.with_splits(s)))
            s *= 2
        per_tile.append(scored)
    return _firsts_then_seconds(per_tile, top) + clusterk_grouped_candidates(shape, grouped_top)


def clusterk_fill_candidates(shape: Shape, top: int = 4) -> list[ClusterKConfig]:
    """Up to `top` cluster split-K configurations (wgmma main loops, one cluster per tile) with a cluster size of
    CLUSTERK_FILL_SPLITS, where it splits K more ways than any power of two whose clusters all fit one wave
    (`cluster_wave_blocks`): each tile's best such size by the cost model, then its second best. Empty where
    the plain candidates are (few tiles, deep K only)."""
    if top <= 0 or not _clusterk_searched(shape):
        return []
    per_tile = []
    for cfg, tiles, loop_cost in _clusterk_tiles(shape, ("wg", "tma")):
        fits = _one_wave_sizes(shape, cfg, tiles)
        pow2 = max((s for s in fits if not s & (s - 1)), default=1)
        scored = []
        for s in fits:
            if s in CLUSTERK_FILL_SPLITS and s > pow2:
                est = estimate_us(shape, cfg.bm, cfg.bn, splits=s, cluster=s, fixup_share=0.0,
                                  resident=cfg.resident) * loop_cost
                scored.append((est + CLUSTERK_REDUCE_US * (s - 1) ** 0.5, cfg.with_splits(s)))
        per_tile.append(scored)
    return _firsts_then_seconds(per_tile, top)


def _one_wave_sizes(shape: Shape, cfg: ClusterKConfig, tiles: int) -> list[int]:
    """The cluster sizes (powers of two and CLUSTERK_FILL_SPLITS, ascending) at which `cfg`'s `tiles` output tiles,
    one cluster each, fit one wave (`cluster_wave_blocks`, with the blocks one SM holds) and every block gets at
    least one K step."""
    return [s for s in sorted((*CLUSTERK_FILL_SPLITS, 2, 4, 8, 16))
            if shape.k >= s * cfg.bk and tiles * s <= cluster_wave_blocks(s, cfg.resident)]


def _clusterk_searched(shape: Shape) -> bool:
    """Few output tiles (fewer of 128x128 than SMs), a deep K, and 16-byte rows (the kernel's loads need them)."""
    return (shape.k >= CLUSTERK_SEARCH_MIN_K and math.ceil(shape.m / 128) * math.ceil(shape.n / 128) < NUM_SMS
            and not shape.k % 8 and not shape.n % 8)


def _clusterk_tiles(shape: Shape, main_loops=("mma", "wg", "tma")):
    """(tile, output tiles, cost-model loop factor) of every cluster split-K tile that fits the output, but the
    small ones (CLUSTERK_SMALL_TILES, which `clusterk_small_candidates` proposes)."""
    for cfg in CLUSTERK_TILES:
        if (cfg in CLUSTERK_SMALL_TILES or cfg.main_loop not in main_loops or cfg.bm > max(64, shape.m)
                or cfg.bn > max(64, shape.n) or cfg.smem_bytes > SMEM_BYTES):
            continue
        loop_cost = CLUSTERK_LOOP_COST["wg" if cfg.main_loop == "tma" and cfg.bk == 64 else cfg.main_loop]
        if cfg.resident > 1:
            loop_cost *= CLUSTERK_SHARED_SM_COST
        yield cfg, math.ceil(shape.m / cfg.bm) * math.ceil(shape.n / cfg.bn), loop_cost


def clusterk_small_candidates(shape: Shape, top: int = 16) -> list[ClusterKConfig]:
    """Up to `top` cluster split-K configurations with a tile smaller than 64x64 (CLUSTERK_SMALL_TILES), for an
    output of at most CLUSTERK_SMALL_MAX_OUTPUT elements where cluster split-K is searched at all (empty for
    others). For each tile, the cluster sizes whose blocks fit one wave (`cluster_wave_blocks`, with the blocks
    one SM holds) and whose slices of K are at least one K step: the two largest powers of two, largest first,
    then the largest size of CLUSTERK_FILL_SPLITS above them; every tile's first, then every tile's second, and
    so on. Then, where K is deep enough, clusters of 16 and of 8 with several per tile: the count that fills the
    wave, then 2. The fastest measured on these tiles split K as many ways as one wave allows, so the cost model
    does not rank them."""
    if top <= 0 or not _clusterk_searched(shape) or shape.m * shape.n > CLUSTERK_SMALL_MAX_OUTPUT:
        return []
    per_tile, grouped = [], []
    for cfg in CLUSTERK_SMALL_TILES:
        tiles = math.ceil(shape.m / cfg.bm) * math.ceil(shape.n / cfg.bn)
        fits = _one_wave_sizes(shape, cfg, tiles)
        pow2 = [s for s in fits if not s & (s - 1)][-2:][::-1]
        fill = [s for s in fits if s in CLUSTERK_FILL_SPLITS and s > max(pow2, default=1)][-1:]
        per_tile.append([cfg.with_splits(s) for s in pow2 + fill])
        for s in (16, 8):
            counts = _group_counts(tiles * s, cluster_wave_blocks(s, cfg.resident), shape.k // (s * cfg.bk))
            grouped += [cfg.with_splits(s, g) for g in dict.fromkeys(counts[-1:] + counts[:1])]
    ranked = [sizes[i] for i in range(3) for sizes in per_tile if i < len(sizes)]  # every tile's first, ...
    return (ranked + grouped)[:top]


def clusterk_grouped_candidates(shape: Shape, top: int = 8) -> list[ClusterKConfig]:
    """Up to `top` cluster split-K configurations (wgmma main loops) with `groups` >= 2 clusters per output
    tile, for shapes where one cluster per tile leaves SMs idle: every (cluster size, groups) whose blocks fit
    one wave of clusters of that size (`cluster_wave_blocks`; powers of two, and the count that fills the wave)
    and whose slices of K are at least one K step, ranked by the cost model plus one round trip through the
    workspace; the best tile of each (cluster size, groups) first, then the second best of each (the model
    ranks tiles better than it ranks the split between cluster size and groups). Empty where the plain
    candidates are (few tiles, deep K only)."""
    if top <= 0 or not _clusterk_searched(shape):
        return []
    by_split: dict[tuple[int, int], list[tuple[float, ClusterKConfig]]] = {}
    for cfg, tiles, loop_cost in _clusterk_tiles(shape, ("wg", "tma")):
        for s in (2, 4, 8, 16):
            for g in _group_counts(tiles * s, cluster_wave_blocks(s, cfg.resident), shape.k // (s * cfg.bk)):
                est = estimate_us(shape, cfg.bm, cfg.bn, splits=s * g, cluster=s, fixup_share=0.0,
                                  resident=cfg.resident) * loop_cost
                ws = cfg.with_splits(s, g).workspace_bytes(shape) * 2 / DRAM_BYTES_PER_US  # written, read back
                by_split.setdefault((s, g), []).append(
                    (est + CLUSTERK_REDUCE_US * (s - 1) ** 0.5 + CLUSTERK_GROUP_US + ws, cfg.with_splits(s, g)))
    return _firsts_then_seconds(list(by_split.values()), top)


def _group_counts(blocks: int, wave: int, most: int) -> list[int]:
    """Clusters per tile (>= 2) for a launch of `blocks` per group: the powers of two whose blocks fit one
    `wave`, and the count that fills the wave (the K slices need not be even), at most `most` (each slice of K
    at least one step)."""
    fill = min(wave // blocks, most, CLUSTERK_MAX_GROUPS)
    counts = [1 << i for i in range(1, fill.bit_length()) if 1 << i <= fill]
    return counts + [fill] if fill >= 2 and fill not in counts else counts


def tiled_candidates(shape: Shape, top: int = 24) -> list[TiledConfig]:
    """Up to `top` tiled configurations for a launch-bound shape (roofline estimate under
    TILED_SEARCH_MAX_EST_US; empty for others): tiles no larger than the output, ranked by the cost model."""
    if roofline_us(shape) >= TILED_SEARCH_MAX_EST_US:
        return []
    fits = [c for c in TILED_CONFIGS
            if c.bm <= max(32, shape.m) and c.bn <= max(32, shape.n) and c.bk <= max(64, shape.k)
            and c.smem_bytes <= SMEM_BYTES]
    ranked = sorted(fits, key=lambda c: (estimate_us(shape, c.bm, c.bn), c.warps, -c.bk, c.stages))
    return ranked[:top]


def tiled_fixed_variant(cfg: TiledConfig, shape: Shape) -> TiledConfig | None:
    """`cfg` with the shape's sizes compiled in, where its tiles cover the shape exactly (None elsewhere). On the
    H200 that took 3-10% off the tiled kernel on most launch-bound shapes (the wgmma tiles, and single K steps) and
    added up to 20% on others (the 2-warp 32x32x128 tile over several K steps), so the search decides per shape
    (benchmarks/results/gemm_h200_findings.md, "The tiled kernel")."""
    return replace(cfg, fixed=True) if cfg.covers(shape) else None
