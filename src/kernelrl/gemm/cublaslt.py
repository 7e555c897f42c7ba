"""cuBLASLt through the project's binding: heuristic algorithm lists, split-K variants and launches."""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

import torch

from kernelrl.gemm.native import cublaslt_lib
from kernelrl.gemm.streams import WORKSPACE_BYTES as WORKSPACE_CAP
from kernelrl.gemm.streams import plan_launcher
ALGO_BYTES = 64
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}
_vp, _i, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
# What kr_lt_algo_info reports of a configuration, in its order.
CONFIG_KEYS = ("algo", "tile", "stages", "splitk", "reduction", "swizzle", "custom", "cluster")


def _lib():
    lib = cublaslt_lib()
    if not getattr(lib, "_kr_typed", False):
        lib.kr_lt_version.restype = _sz
        lib.kr_lt_heuristics.argtypes = [_i, _i, _i, _i, _sz, _i, _vp, ctypes.POINTER(_sz), ctypes.POINTER(_i)]
        lib.kr_lt_with_splitk.argtypes = [_i, _i, _i, _i, _vp, _i, _vp, ctypes.POINTER(_sz)]
        lib.kr_lt_algo_info.argtypes = [_vp, ctypes.POINTER(_i)]
        lib.kr_lt_matmul.argtypes = [_i, _vp, _vp, _vp, _vp, _i, _i, _i, _vp, _sz, _vp]
        lib.kr_lt_plan.argtypes = [_i, _i, _i, _i, _vp, _vp, _sz]
        lib.kr_lt_plan.restype = _vp
        lib.kr_lt_plan_run.argtypes = [_vp, _vp, _vp, _vp, _vp]
        lib.kr_lt_plan_free.argtypes = [_vp]
        lib.kr_lt_plan_free.restype = None
        lib.kr_lt_neighbours.argtypes = [_i, _i, _i, _i, _sz, _vp, ctypes.POINTER(_i), _i, ctypes.POINTER(_i), _i,
                                          ctypes.POINTER(_i), _i, _i, _vp, ctypes.POINTER(_sz), ctypes.POINTER(_i),
                                          ctypes.POINTER(_i)]
        lib.kr_lt_enumerate.argtypes = [_i, _i, _i, _i, _sz, ctypes.POINTER(_i), _i, _i, _i, _vp,
                                        ctypes.POINTER(_sz), ctypes.POINTER(ctypes.c_float), ctypes.POINTER(_i),
                                        ctypes.POINTER(_i)]
        lib._kr_typed = True
    return lib


def version() -> int:
    """cuBLASLt's version number (algorithm blobs are only valid for the version that made them)."""
    return int(_lib().kr_lt_version())


@dataclass(frozen=True)
class LtAlgo:
    """One cuBLASLt algorithm configuration: its opaque 64-byte blob and what the blob says."""

    blob: bytes
    workspace: int  # bytes it needs
    rank: int  # position in the heuristic's list (-1 for a derived split-K variant)

    @property
    def info(self) -> dict:
        vals = (ctypes.c_int * 8)()
        _lib().kr_lt_algo_info(self.blob, vals)
        return dict(zip(CONFIG_KEYS, list(vals)))

    @property
    def name(self) -> str:
        return "cublaslt:" + self.blob.hex()

    @classmethod
    def from_name(cls, name: str) -> "LtAlgo":
        return cls(bytes.fromhex(name.split(":", 1)[1]), 0, -1)


def heuristics(m: int, n: int, k: int, dtype: torch.dtype = torch.float16, count: int = 32,
               workspace_cap: int = WORKSPACE_CAP) -> list[LtAlgo]:
    """cuBLASLt's heuristic suggestions for row-major C (m x n) = A (m x k) B (k x n), best first."""
    buf = ctypes.create_string_buffer(ALGO_BYTES * count)
    ws = (_sz * count)()
    found = _i(0)
    st = _lib().kr_lt_heuristics(_DTYPE_CODE[dtype], m, n, k, workspace_cap, count, buf, ws, ctypes.byref(found))
    if st != 0:
        raise RuntimeError(f"cublasLtMatmulAlgoGetHeuristic failed with status {st} for {m}x{n}x{k}")
    raw = buf.raw
    return [LtAlgo(raw[i * ALGO_BYTES:(i + 1) * ALGO_BYTES], int(ws[i]), i) for i in range(found.value)]


# Cluster shapes tried by the enumeration (cublasLtClusterShape_t): auto, 1x1x1, 2x1x1, 1x2x1.
CLUSTERS = (0, 2, 3, 5)


@dataclass(frozen=True)
class Configured:
    """One configuration from the enumeration, with the wave count cuBLASLt's check computed for the problem."""

    algo: LtAlgo
    waves: float


def enumerate_space(m: int, n: int, k: int, dtype: torch.dtype = torch.float16, max_out: int = 1024,
                    max_checks: int = 20000, clusters: tuple[int, ...] = CLUSTERS,
                    workspace_cap: int = WORKSPACE_CAP) -> tuple[list[Configured], int]:
    """Every configuration cuBLASLt accepts for the problem (algorithm ids x tiles x clusters x swizzling, the
    first stage count that checks), and the number of checks it took; cuBLASLt's check, no timing."""
    buf = ctypes.create_string_buffer(ALGO_BYTES * max_out)
    ws, waves = (_sz * max_out)(), (ctypes.c_float * max_out)()
    cl = (_i * len(clusters))(*clusters)
    found, checked = _i(0), _i(0)
    st = _lib().kr_lt_enumerate(_DTYPE_CODE[dtype], m, n, k, workspace_cap, cl, len(clusters), max_checks, max_out,
                                buf, ws, waves, ctypes.byref(found), ctypes.byref(checked))
    if st != 0:
        raise RuntimeError(f"cublasLtMatmulAlgoGetIds failed with status {st} for {m}x{n}x{k}")
    raw = buf.raw
    return [Configured(LtAlgo(raw[i * ALGO_BYTES:(i + 1) * ALGO_BYTES], int(ws[i]), -1), float(waves[i]))
            for i in range(found.value)], checked.value


# Cluster shapes a neighbour may take: auto, 1x1, 2x1, 4x1, 1x2, 2x2, 1x4 (cublasLtClusterShape_t).
NEIGHBOUR_CLUSTERS = (0, 2, 3, 4, 5, 6, 8)
# Split counts a neighbour may take (1: no split), nearest the base's first (`splits_near`).
NEIGHBOUR_SPLITS = (1, 2, 3, 4, 5, 6, 8, 12, 16)
# The configuration attributes a neighbour changes, one each (`neighbours`), with the ones that change with them:
# a new tile may need another stage count, and a split count its reduction scheme.
NEIGHBOUR_ATTRIBUTES = {"stages": (), "cluster": (), "swizzle": (), "custom": (), "tile": ("stages",),
                        "splitk": ("reduction",)}


def splits_near(split: int, splits: tuple[int, ...] = NEIGHBOUR_SPLITS) -> list[int]:
    """`splits` without `split`, the nearest to it (by ratio) first."""
    return sorted((s for s in splits if s != split), key=lambda s: (abs(math.log(s / max(split, 1))), s))


def neighbours(algo: LtAlgo, m: int, n: int, k: int, dtype: torch.dtype = torch.float16,
               clusters: tuple[int, ...] = NEIGHBOUR_CLUSTERS, tiles: tuple[int, ...] = (),
               splits: tuple[int, ...] = (), max_out: int = 256, workspace_cap: int = WORKSPACE_CAP) -> list[LtAlgo]:
    """The configurations one attribute away from `algo` that cuBLASLt accepts for the problem: each other stage
    count the algorithm lists, each other cluster shape of `clusters`, CTA swizzling toggled, each other custom
    option, each other tile of `tiles` (the base's stage count where the tile takes it) and, where the algorithm
    splits K, each other split count of `splits` (cuBLASLt's check, no timing). The heuristic lists whole
    configurations; these are the ones around its best that it does not list."""
    buf = ctypes.create_string_buffer(ALGO_BYTES * max_out)
    ws = (_sz * max_out)()
    cl, tl, sp = (_i * len(clusters))(*clusters), (_i * len(tiles))(*tiles), (_i * len(splits))(*splits)
    found, checked = _i(0), _i(0)
    st = _lib().kr_lt_neighbours(_DTYPE_CODE[dtype], m, n, k, workspace_cap, algo.blob, cl, len(clusters), tl,
                                 len(tiles), sp, len(splits), max_out, buf, ws, ctypes.byref(found),
                                 ctypes.byref(checked))
    if st != 0:
        raise RuntimeError(f"cuBLASLt could not list the neighbours of {algo.name} for {m}x{n}x{k} (status {st})")
    raw = buf.raw
    return [LtAlgo(raw[i * ALGO_BYTES:(i + 1) * ALGO_BYTES], int(ws[i]), -1) for i in range(found.value)]


def changed_attribute(base: dict, other: dict) -> str | None:
    """The attribute of NEIGHBOUR_ATTRIBUTES in which configuration `other` differs from `base` (their
    `LtAlgo.info`), with only the attributes that go with it changed too; None when they differ otherwise."""
    diff = {key for key in CONFIG_KEYS if base[key] != other[key]}
    for attribute, companions in NEIGHBOUR_ATTRIBUTES.items():
        if attribute in diff and diff <= {attribute, *companions}:
            return attribute
    return None


def interleave(infos: list[dict], base: dict, top: int) -> list[int]:
    """Indices of up to `top` of the neighbours `infos` of `base`, taking the attributes in turn (a stage count,
    a cluster shape, the swizzle, a custom option, a tile, a split count, the next stage count, ...) so that a
    long list of one kind does not crowd out the others; each kind keeps cuBLASLt's order."""
    kinds: dict[str, list[int]] = {a: [] for a in NEIGHBOUR_ATTRIBUTES}
    for i, info in enumerate(infos):
        kind = changed_attribute(base, info)
        if kind is not None:
            kinds[kind].append(i)
    out: list[int] = []
    while len(out) < top and any(kinds.values()):
        for a in NEIGHBOUR_ATTRIBUTES:
            if kinds[a] and len(out) < top:
                out.append(kinds[a].pop(0))
    return out


def config_key(info: dict) -> tuple:
    """What makes two configurations the same kernel launch (the blob also carries internal fields)."""
    return tuple(info[k] for k in CONFIG_KEYS)


def wave_efficiency(waves: float) -> float:
    """Share of the last wave's SM slots that do work: 1.0 for whole waves, waves itself under one wave."""
    if waves <= 0:
        return 0.0
    return waves / math.ceil(waves)


def pick(configs: list[tuple[dict, float]], exclude: set[tuple], top: int) -> list[int]:
    """Indices of up to `top` configurations to time, from (info, waves) pairs.

    One per (algorithm, tile) first, the one with the best wave efficiency (cluster and swizzling break ties in
    list order), so the pick spreads over tile shapes, the choice that matters most; groups are ranked by wave
    efficiency, then by tile id (larger tiles come later in cuBLASLt's enum and reuse more of each load).
    Configurations in `exclude` (the heuristic's own) are skipped; leftovers fill the rest by efficiency.
    """
    groups: dict[tuple, list[int]] = {}
    for i, (info, _) in enumerate(configs):
        if config_key(info) in exclude:
            continue
        groups.setdefault((info["algo"], info["tile"]), []).append(i)
    firsts, rest = [], []
    for members in groups.values():
        members = sorted(members, key=lambda i: -wave_efficiency(configs[i][1]))
        firsts.append(members[0])
        rest += members[1:]

    def rank(i):
        return (-round(wave_efficiency(configs[i][1]), 3), -configs[i][0]["tile"])

    return (sorted(firsts, key=rank) + sorted(rest, key=rank))[:top]


def with_splitk(algo: LtAlgo, m: int, n: int, k: int, splits: int,
                dtype: torch.dtype = torch.float16) -> LtAlgo | None:
    """`algo` with `splits` K splits (fp32 reduction), or None when cuBLASLt says it cannot run the problem."""
    out = ctypes.create_string_buffer(ALGO_BYTES)
    ws = _sz(0)
    st = _lib().kr_lt_with_splitk(_DTYPE_CODE[dtype], m, n, k, algo.blob, splits, out, ctypes.byref(ws))
    if st != 0 or ws.value > WORKSPACE_CAP:
        return None
    return LtAlgo(out.raw, int(ws.value), -1)


def make_launcher(algo: LtAlgo | None, m: int, n: int, k: int, dtype: torch.dtype = torch.float16,
                  device_index: int | None = None):
    """A function (a, b, c) -> None running cuBLASLt with `algo` (None: cuBLASLt's own default) into c; each
    CUDA stream gets its own workspace (`streams.WORKSPACES`)."""
    lib = _lib()
    blob = None if algo is None else ctypes.create_string_buffer(algo.blob, ALGO_BYTES)

    def make_plan(ws: torch.Tensor) -> int:
        plan = lib.kr_lt_plan(_DTYPE_CODE[dtype], m, n, k, blob, ws.data_ptr(), ws.numel())
        if not plan:
            raise RuntimeError(f"could not prepare cuBLASLt for {m}x{n}x{k}")
        return plan

    dev = torch.cuda.current_device() if device_index is None else device_index
    return plan_launcher(make_plan, lib.kr_lt_plan_run, lib.kr_lt_plan_free, dev, f"cublasLtMatmul for {m}x{n}x{k}")
