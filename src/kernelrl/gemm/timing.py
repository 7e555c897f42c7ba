"""Timing modes for one GEMM implementation on one shape, all in microseconds per call (medians).

graph: device time by CUDA-graph replay of many calls (the primary figure); offline: back-to-back eager calls
between two events; cold: L2 flushed before each call, events around the call; server: random idle gaps
(device synchronised) before each call, events around it; latency: host wall clock of call + synchronise;
host: host time to issue one call (the dispatch overhead when the device is not the bottleneck).
"""
from __future__ import annotations

import math
import random
import statistics
import time

import torch

L2_BYTES = 60 * 1024 * 1024  # H200: 60 MiB (read from the device where available)
MODES = ("graph", "offline", "cold", "server", "latency", "host")


class Inputs:
    """Rotating sets of fresh random-normal inputs and outputs so that timed calls do not all hit L2."""

    def __init__(self, m: int, n: int, k: int, dtype=torch.float16, sets: int | None = None,
                 max_bytes: int = 3 << 30, weights: bool = False):
        elem = torch.finfo(dtype).bits // 8
        per_set = elem * (m * k + (2 if weights else 1) * k * n + m * n)
        if sets is None:
            sets = math.ceil(3 * L2_BYTES / per_set)
        sets = max(1, min(sets, 64, max_bytes // per_set))
        self.m, self.n, self.k, self.dtype = m, n, k, dtype
        g = torch.Generator(device="cuda")
        g.manual_seed(random.getrandbits(62))
        self.a = [torch.randn(m, k, device="cuda", dtype=dtype, generator=g) for _ in range(sets)]
        self.b = [torch.randn(k, n, device="cuda", dtype=dtype, generator=g) for _ in range(sets)]
        self.c = [torch.empty(m, n, device="cuda", dtype=dtype) for _ in range(sets)]
        # with `weights`, each B also as an nn.Linear weight: (n, k) row-major, the same values (B = weight.T)
        self.w = [b.t().contiguous() for b in self.b] if weights else []
        self.sets = sets

    def __len__(self) -> int:
        return self.sets


def calls_for(est_us: float, target_us: float = 300.0, most: int = 100) -> int:
    """Calls per measurement so that one measurement lasts about target_us of device time."""
    return max(1, min(most, math.ceil(target_us / max(est_us, 0.5))))


def capture_graph(body) -> "torch.cuda.CUDAGraph":
    """A CUDA graph of `body()`, run once on a side stream first (compiles, loads modules, sets function
    attributes outside the capture) and replayed once after capture."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    g.replay()
    return g


def time_graph(fn, inp: Inputs, calls: int, replays: int = 5, out: bool = True) -> float:
    """Median device time per call over `replays` replays of a graph of `calls` calls, microseconds."""
    def body():
        for i in range(calls):
            _call(fn, inp, i, out)

    g = capture_graph(body)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    for e0, e1 in events:
        e0.record()
        g.replay()
        e1.record()
    torch.cuda.synchronize()
    per_call = [e0.elapsed_time(e1) * 1e3 / calls for e0, e1 in events]
    del g
    return statistics.median(per_call)


def time_graphs(fns: dict[str, tuple], inp: Inputs, calls: int, rounds: int = 10,
                rng: random.Random | None = None, per_round: dict | None = None) -> dict[str, float]:
    """Like time_graph for several implementations ({name: (fn, takes_out)}), their replays interleaved in a
    shuffled order each round so that clock and temperature drift hit all alike; median per call, us.
    `per_round`, if given, receives each name's per-call time in every round, in round order (for ratios
    paired within a round: `paired_ratio_ci`)."""
    rng = rng or random.Random(0)
    graphs = {}
    for name, (fn, out) in fns.items():
        def body(fn=fn, out=out):
            for i in range(calls):
                _call(fn, inp, i, out)

        graphs[name] = capture_graph(body)
    samples: dict[str, list] = {n: [] for n in graphs}
    order = list(graphs)
    for _ in range(2):  # untimed rounds first: clocks and temperature settle under this load before sampling
        for n in order:
            graphs[n].replay()
    for _ in range(rounds):
        rng.shuffle(order)
        for n in order:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            graphs[n].replay()
            e1.record()
            samples[n].append((e0, e1))
    torch.cuda.synchronize()
    times = {n: [e0.elapsed_time(e1) * 1e3 / calls for e0, e1 in ev] for n, ev in samples.items()}
    if per_round is not None:
        per_round.update(times)
    del graphs
    return {n: statistics.median(v) for n, v in times.items()}


def time_graphs_placed(fns: dict[str, tuple], inp: Inputs, calls: int, rounds: int, placements: int,
                       rng: random.Random | None = None, per_round: dict | None = None) -> dict[str, float]:
    """time_graphs with its rounds spread over `placements` sets of buffers: `inp`, then fresh ones like it,
    each allocated while the earlier ones are still held (so at other addresses), each with its own graphs;
    median per call over all rounds, us. A ratio can hold steady within one set of buffers and its graphs and
    move between sets (H200: 256x4096x2048 measured 1.06x and 0.95x in two runs a second apart), so one set
    speaks for that placement only. `per_round` receives every round's times, placement after placement."""
    rng = rng or random.Random(0)
    times: dict[str, list[float]] = {}
    held = [inp]
    for p in range(placements):
        if p:
            held.append(Inputs(inp.m, inp.n, inp.k, inp.dtype, sets=len(inp), weights=bool(inp.w)))
        group: dict[str, list[float]] = {}
        time_graphs(fns, held[-1], calls, math.ceil(rounds / placements), rng, group)
        for name, ts in group.items():
            times.setdefault(name, []).extend(ts)
    if per_round is not None:
        per_round.update(times)
    return {n: statistics.median(v) for n, v in times.items()}


def median_ci(values: list[float], conf: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median: the order statistics x(j) and x(n+1-j) with
    the largest j whose binomial tail P(Bin(n, 1/2) < j) stays within (1 - conf) / 2. Replay times are
    multimodal, so no normal approximation. Where no j >= 1 qualifies (8 values or fewer at 95%), the whole
    range; below 6 values even that covers the median with less than `conf`."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    tail, j = 0.0, 0
    while j < n // 2:
        nxt = tail + math.comb(n, j) / 2 ** n  # P(Bin(n, 1/2) <= j)
        if nxt > (1 - conf) / 2:
            break
        tail, j = nxt, j + 1
    j = max(j, 1)
    return xs[j - 1], xs[n - j]


def paired_ratio_ci(num: list[float], den: list[float], conf: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high) of the ratios num[i] / den[i] of two implementations timed in the same rounds
    (e.g. torch's time over kernelrl's: a speedup). Pairing within a round cancels the drift both saw."""
    if len(num) != len(den):
        raise ValueError(f"paired samples differ in length: {len(num)} and {len(den)}")
    ratios = [a / b for a, b in zip(num, den)]
    lo, hi = median_ci(ratios, conf)
    return (statistics.median(ratios) if ratios else math.nan), lo, hi


LINEAR = "linear"  # an implementation's calling convention: fn(a, weight) with the (n, k) weight (Inputs.w)


def _call(fn, inp: Inputs, i: int, out):
    """One call of `fn` on the i-th set of buffers: fn(a, b, c) when `out`, fn(a, weight) when `out` is LINEAR,
    else fn(a, b)."""
    j = i % len(inp)
    if out == LINEAR:
        return fn(inp.a[j], inp.w[j])
    return fn(inp.a[j], inp.b[j], inp.c[j]) if out else fn(inp.a[j], inp.b[j])


def time_offline(fn, inp: Inputs, calls: int, repeats: int = 3, out: bool = True) -> float:
    """Back-to-back eager calls between two events, per call, median of `repeats`, microseconds."""
    _call(fn, inp, 0, out)
    res = []
    for _ in range(repeats):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(calls):
            _call(fn, inp, i, out)
        e1.record()
        torch.cuda.synchronize()
        res.append(e0.elapsed_time(e1) * 1e3 / calls)
    return statistics.median(res)


class L2Flusher:
    """Writes a buffer larger than L2 to evict it."""

    def __init__(self, nbytes: int = 4 * L2_BYTES):
        self.buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def __call__(self) -> None:
        self.buf.zero_()


def time_cold(fn, inp: Inputs, samples: int, flusher: L2Flusher, out: bool = True) -> float:
    """Events around single calls, L2 flushed before each, median, microseconds."""
    _call(fn, inp, 0, out)
    ev = []
    for i in range(samples):
        flusher()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        _call(fn, inp, i, out)
        e1.record()
        ev.append((e0, e1))
    torch.cuda.synchronize()
    return statistics.median(e0.elapsed_time(e1) * 1e3 for e0, e1 in ev)


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def time_server(fn, inp: Inputs, samples: int, gap_us: tuple[float, float] = (20.0, 500.0),
                out: bool = True, rng: random.Random | None = None) -> float:
    """Events around single calls issued after a random idle gap (device idle), median, microseconds.

    The device waits for the host's launch, so this includes launch latency, as a server sees it."""
    rng = rng or random.Random(0)
    _call(fn, inp, 0, out)
    res = []
    for i in range(samples):
        torch.cuda.synchronize()
        _spin(rng.uniform(*gap_us))
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        _call(fn, inp, i, out)
        e1.record()
        e1.synchronize()
        res.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(res)


def time_latency(fn, inp: Inputs, samples: int, out: bool = True) -> float:
    """Host wall clock of one call plus device synchronisation, median, microseconds."""
    _call(fn, inp, 0, out)
    torch.cuda.synchronize()
    res = []
    for i in range(samples):
        t0 = time.perf_counter()
        _call(fn, inp, i, out)
        torch.cuda.synchronize()
        res.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(res)


def time_host(fn, inp: Inputs, calls: int = 50, out: bool = True) -> float:
    """Host time to issue one call (no synchronisation inside the loop), microseconds."""
    _call(fn, inp, 0, out)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(calls):
        _call(fn, inp, i, out)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / calls
