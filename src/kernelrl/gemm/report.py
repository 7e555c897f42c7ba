"""Summaries, a markdown report and plots from the benchmark CSV (one row per shape)."""
from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass
from pathlib import Path

from kernelrl.gemm.bench import EAGER_MODES, IMPLS, PAIRED

GOALS = {"vs_torch": 1.15, "vs_autotune": 1.05, "worst_vs_torch": 0.98, "err_ratio": 2.0}
# the goals of the nt layout (the linear layers of models, against F.linear)
LINEAR_GOALS = {**GOALS, "vs_torch": 1.10, "vs_autotune": 1.03}


def goals_for(rows: list[dict]) -> dict:
    """The goals a benchmark's rows are held to: LINEAR_GOALS for the nt layout, GOALS otherwise."""
    return LINEAR_GOALS if rows and all(r.get("layout") == "nt" for r in rows) else GOALS
SIZE_CLASSES = ((0, 5), (5, 10), (10, 30), (30, 100), (100, 1000), (1000, math.inf))  # torch device time, us


def read_rows(path: Path) -> list[dict]:
    """The rows of a benchmark CSV, plain or gzipped (`.csv.gz`)."""
    path = Path(path)
    with (gzip.open(path, "rt", newline="") if path.suffix == ".gz" else path.open(newline="")) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows: run `kernelrl gemm bench` first")
    return rows


def report_prefix(path: Path) -> str:
    """The name a benchmark CSV's report and plots take: the file's name without `.csv` or `.csv.gz`."""
    name = Path(path).name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _f(row: dict, col: str) -> float:
    v = row.get(col, "")
    return float(v) if v not in ("", None) else float("nan")


def has_paired(rows: list[dict]) -> bool:
    """Whether the file has graph-mode speedups paired within each timing round (`bench.PAIRED`)."""
    return all(r.get(PAIRED["torch"]) not in ("", None) for r in rows)


def speedups(rows: list[dict], mode: str = "graph", over: str = "torch", paired: bool = True) -> list[float]:
    """Per-shape speedup of kernelrl over `over` in `mode` (graph = the primary device-time figure). In graph
    mode, where the file has them and `paired`, the medians of the per-round paired ratios; otherwise time of
    `over` / time of kernelrl, each the median of its own samples."""
    if mode == "graph" and paired and has_paired(rows):
        return [_f(r, PAIRED[over]) for r in rows]
    suffix = "_us" if mode == "graph" else f"_{mode}_us"
    return [_f(r, over + suffix) / _f(r, "kernelrl" + suffix) for r in rows]


@dataclass(frozen=True)
class Summary:
    """The goal's numbers for one benchmark file."""

    shapes: int
    vs_torch: float
    vs_autotune: float
    vs_heuristic: float
    worst_vs_torch: float
    below_098: int
    worst_err_ratio: float
    err_over_2x: int
    tuned_shapes: int  # shapes dispatched to a kernel other than torch.matmul
    per_mode: dict
    below_098_tuned: int = 0  # of the shapes below 0.98x, those dispatched to a kernel other than torch.matmul
    control_below_098: int = 0  # torch.matmul timed against itself (A/A control): shapes below 0.98x
    control_worst: float = float("nan")  # worst torch / torch-control ratio
    # shapes below 0.98x with the whole 95% interval of the per-round paired ratio below 0.98 as well (None:
    # the file has no intervals); the same for the control
    surely_below_098: int | None = None
    control_surely_below_098: int | None = None

    def goal_met(self, goals: dict = GOALS) -> dict[str, bool]:
        return {"vs_torch": self.vs_torch >= goals["vs_torch"],
                "vs_autotune": self.vs_autotune >= goals["vs_autotune"],
                "worst_vs_torch": self.worst_vs_torch >= goals["worst_vs_torch"],
                "err_ratio": self.worst_err_ratio <= goals["err_ratio"]}


def summarise(rows: list[dict]) -> Summary:
    sp = speedups(rows)
    # the control read the way a kernel's speedup is read: torch.matmul's time over the control's
    control = ([_f(r, PAIRED["torch_control"]) for r in rows] if has_paired(rows) else
               [_f(r, "torch_us") / _f(r, "torch_control_us") for r in rows if _f(r, "torch_control_us") > 0])
    ratios = [_f(r, "rel_err") / _f(r, "torch_rel_err") for r in rows]
    per_mode = {}
    for mode in ("graph",) + EAGER_MODES:
        per_mode[mode] = {over: geomean(speedups(rows, mode, over)) for over in IMPLS if over != "kernelrl"}
    return Summary(
        shapes=len(rows), vs_torch=geomean(sp), vs_autotune=geomean(speedups(rows, over="cublaslt_autotune")),
        vs_heuristic=geomean(speedups(rows, over="cublaslt_heuristic")), worst_vs_torch=min(sp),
        below_098=sum(s < 0.98 for s in sp), worst_err_ratio=max(ratios), err_over_2x=sum(x > 2 for x in ratios),
        tuned_shapes=sum(r["kernel"] != "torch" for r in rows), per_mode=per_mode,
        below_098_tuned=sum(s_ < 0.98 and r["kernel"] != "torch" for s_, r in zip(sp, rows)),
        control_below_098=sum(x < 0.98 for x in control),
        control_worst=min(control, default=float("nan")),
        surely_below_098=_surely_below(rows, "speedup_ci_hi"),
        control_surely_below_098=_surely_below(rows, "control_ci_hi"))


def _surely_below(rows: list[dict], hi_col: str, bound: float = GOALS["worst_vs_torch"]) -> int | None:
    """Shapes whose interval's upper end (column `hi_col`) is below `bound`; None if no row has one."""
    his = [r.get(hi_col) for r in rows]
    if not any(his):
        return None
    return sum(float(h) < bound for h in his if h)


def size_classes(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """(class name, its rows) per class of torch.matmul's device time (`SIZE_CLASSES`), empty classes left out."""
    classes = [(f"{lo}-{hi} us", [r for r in rows if lo <= _f(r, "torch_us") < hi]) for lo, hi in SIZE_CLASSES]
    return [(name, rs) for name, rs in classes if rs]


def families(rows: list[dict]) -> dict[str, list[dict]]:
    """{kernel family: its rows}, by family name (the part of the kernel's name before the colon)."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["kernel"].split(":", 1)[0], []).append(r)
    return dict(sorted(out.items()))


# What bounds a shape, in the order a shape is classed (the first that applies): (name, test on the row and its sizes).
SHAPE_KINDS = (
    ("launch-bound: torch.matmul under 5 us", lambda r, m, n, k: _f(r, "torch_us") < 5),
    ("small output (at most 256x256), deep K", lambda r, m, n, k: m * n <= 256 * 256),
    ("write-bound: K <= 256", lambda r, m, n, k: k <= 256),
    ("skinny: M or N <= 256", lambda r, m, n, k: min(m, n) <= 256),
    ("large: compute-bound", lambda r, m, n, k: True),
)


def _sizes(r: dict) -> tuple[int, int, int]:
    return int(r["m"]), int(r["n"]), int(r["k"])


def shape_kinds(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """(kind, its rows) by what bounds a shape (`SHAPE_KINDS`): the launch, a deep K over few output tiles, writing
    C, reading a skinny product's larger operand, the tensor cores. Empty kinds left out."""
    groups: dict[str, list[dict]] = {name: [] for name, _ in SHAPE_KINDS}
    for r in rows:
        groups[next(name for name, hit in SHAPE_KINDS if hit(r, *_sizes(r)))].append(r)
    return [(name, rs) for name, rs in groups.items() if rs]


def _work(r: dict) -> tuple[float, float]:
    """A row's product in megaflops and megabytes (A, B and C counted once each, 2-byte elements): over a time in
    us, TFLOP/s and TB/s."""
    m, n, k = _sizes(r)
    return 2 * m * n * k / 1e6, 2 * (m * k + k * n + m * n) / 1e6


def torch_rates(rows: list[dict]) -> tuple[float, float]:
    """Geomean over `rows` of torch.matmul's own rates: TFLOP/s and TB/s (`_work`)."""
    rates = [(flops / us, moved / us) for r in rows for (flops, moved), us in [(_work(r), _f(r, "torch_us"))]]
    return geomean([f for f, _ in rates]), geomean([b for _, b in rates])


TIMED = ("torch_us", "torch_control_us", "cublaslt_heuristic_us", "cublaslt_autotune_us", "kernelrl_us")


def roofline(rows: list[dict]) -> tuple[float, float, float]:
    """The best any implementation did in `rows` (graph mode): TFLOP/s, TB/s (`_work`), and the shortest time in
    us."""
    best = [(_work(r), min(_f(r, c) for c in TIMED if r.get(c))) for r in rows]
    return (max(flops / us for (flops, _), us in best), max(moved / us for (_, moved), us in best),
            min(us for _, us in best))


def ceilings(rows: list[dict], roof: tuple[float, float, float]) -> list[float]:
    """Per row, the speedup over torch.matmul of a kernel at the roofline `roof` (`roofline`): torch's time over
    max(flops / TFLOP/s, bytes / TB/s, shortest time)."""
    tflops, tbs, floor = roof
    return [_f(r, "torch_us") / max(flops / tflops, moved / tbs, floor) for r in rows for flops, moved in [_work(r)]]


def by_size(rows: list[dict]) -> list[tuple[str, int, float, float]]:
    """(torch time class, shapes, geomean vs torch, geomean vs cuBLASLt autotune) per class."""
    return [(name, len(rs), geomean(speedups(rs)), geomean(speedups(rs, over="cublaslt_autotune")))
            for name, rs in size_classes(rows)]


def gap_by(rows: list[dict], groups: list[tuple[str, list[dict]]], target: float = GOALS["vs_torch"]
           ) -> list[tuple[str, int, float, float, float]]:
    """Where a geomean speedup falls short of `target`: per group of rows (name, rows), its shapes, its geomean,
    its share of the shortfall, and the whole geomean if that group's geomean were `target` (a group above it
    as measured) with the other rows as measured. The shares are of the sum over all shapes of
    log(target / speedup), so they add up to 1 over groups that cover every row; a group above the target has
    a negative share."""
    sp = {id(r): x for r, x in zip(rows, speedups(rows))}
    total = sum(math.log(target / x) for x in sp.values())
    out = []
    for name, rs in groups:
        own = sum(math.log(target / sp[id(r)]) for r in rs)
        out.append((name, len(rs), geomean([sp[id(r)] for r in rs]), own / total if total else float("nan"),
                    math.exp(math.log(target) - (total - max(own, 0.0)) / len(sp))))
    return out


def _gap_lines(rows: list[dict], s: Summary) -> list[str]:
    """The report's section on where the speedup goal is missed (none where it is met)."""
    goals = goals_for(rows)
    if s.goal_met(goals)["vs_torch"]:
        return []
    target = goals["vs_torch"]
    lines = ["## Where the speedup goal is missed", "",
             f"The geomean vs torch.matmul is {s.vs_torch:.3f}, {target - s.vs_torch:.3f} short of {target} "
             f"({(target - s.vs_torch) / target:.1%} of the target). Each group's share of the shortfall is its part "
             f"of the sum over all shapes of log({target} / speedup); the last column is the whole geomean if that "
             f"group's geomean were {target}x and the other shapes as measured. The rates are torch.matmul's own "
             f"(geomean over the group; A, B and C counted once each): where it already runs near the GPU's "
             f"tensor-core or memory rate, a faster kernel has little room.", ""]
    roof = roofline(rows)
    lines += [f"The ceiling column is the geomean speedup of a kernel that ran every shape at this run's own best: "
              f"{roof[0]:.0f} TFLOP/s and {roof[1]:.2f} TB/s (the highest any implementation reached on any shape) "
              f"and {roof[2]:.1f} us (the shortest time measured); per shape, torch.matmul's time over the largest "
              f"of flops / that rate, bytes / that rate and that time. Over all shapes: "
              f"{geomean(ceilings(rows, roof)):.3f}. It is a bound, not a target: tile and wave quantization keep "
              f"real kernels below it on most shapes.", ""]
    tables = (("torch.matmul device time", size_classes(rows)), ("kernel family", list(families(rows).items())),
              ("what bounds the shape", shape_kinds(rows)))
    for title, groups in tables:
        lines += [f"| {title} | shapes | geomean vs torch | share of the shortfall | whole geomean were it at "
                  f"{target}x | ceiling | torch.matmul TFLOP/s | torch.matmul TB/s |",
                  "|---|---|---|---|---|---|---|---|"]
        for (name, n, g, share, whole), (_, rs) in zip(gap_by(rows, groups, target), groups):
            tflops, tbs = torch_rates(rs)
            lines.append(f"| {name} | {n} | {g:.3f} | {share:.0%} | {whole:.3f} | "
                         f"{geomean(ceilings(rs, roof)):.3f} | {tflops:.0f} | {tbs:.2f} |")
        lines.append("")
    return lines


def plot(rows: list[dict], out_dir: Path, prefix: str = "gemm_h200") -> list[Path]:
    """Speedup over torch.matmul against torch's time, one panel per mode; and the kernel-family counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    modes = ("graph",) + EAGER_MODES
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), sharey=True)
    t = [_f(r, "torch_us") for r in rows]
    for ax, mode in zip(axes.flat, modes):
        for over, color in (("torch", "tab:blue"), ("cublaslt_autotune", "tab:orange")):
            ax.scatter(t, speedups(rows, mode, over), s=6, alpha=0.6, color=color, label=f"vs {over}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(f"{mode}: geomean {geomean(speedups(rows, mode)):.3f}x vs torch")
        ax.set_xlabel("torch.matmul device time (us, graph replay)")
    axes[0, 0].set_ylabel("speedup of kernelrl.gemm.matmul")
    axes[0, 0].legend()
    fig.tight_layout()
    p = out_dir / f"{prefix}_speedup.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    fams = {fam: len(rs) for fam, rs in families(rows).items()}
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(list(fams), list(fams.values()))
    ax.set_title("kernel family chosen per shape")
    fig.tight_layout()
    p = out_dir / f"{prefix}_families.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def markdown(rows: list[dict], plots: list[Path] = (), gpu: str = "H200") -> str:
    """The report: goal table (met or not, by how much), where the speedup goal is missed, per-mode and per-size
    speedups, worst shapes."""
    s = summarise(rows)
    goals = goals_for(rows)
    met = s.goal_met(goals)
    ok = lambda b, short="": "met" if b else f"**not met**{short}"
    dtypes = "/".join(sorted({r.get("dtype") or "fp16" for r in rows}))
    short_torch, short_autotune = goals["vs_torch"] - s.vs_torch, goals["vs_autotune"] - s.vs_autotune
    lines = [
        f"# HGEMM on the {gpu}: kernelrl.gemm.matmul against torch.matmul and cuBLASLt ({dtypes})", "",
        f"{s.shapes} shapes, {dtypes} in, fp32 accumulate; device time by CUDA-graph replay unless stated.", "",
        *(["Layout nt (x @ W.T, nn.Linear's weight (n, k) row-major): \"torch.matmul\" below is `F.linear` on "
           "that weight; cuBLASLt runs on the weight laid out once as (k, n) storage, and so does kernelrl on the "
           "layers `gemm.patch` lays out (column `weight`: relaid); on the others it is F.linear itself "
           f"({sum(r.get('weight') == 'kept' for r in rows)} shapes).", ""]
          if any(r.get("layout") == "nt" for r in rows) else []),
        "| goal | target | measured | |", "|---|---|---|---|",
        f"| geomean speedup vs torch.matmul | >= {goals['vs_torch']} | {s.vs_torch:.3f} | "
        f"{ok(met['vs_torch'], f': {short_torch:.3f} short')} |",
        f"| geomean speedup vs cuBLASLt autotune | >= {goals['vs_autotune']} | {s.vs_autotune:.3f} | "
        f"{ok(met['vs_autotune'], f': {short_autotune:.3f} short')} |",
        f"| worst shape vs torch.matmul | >= {goals['worst_vs_torch']} | {s.worst_vs_torch:.3f} "
        f"({s.below_098} shapes below) | {ok(met['worst_vs_torch'], f': {s.below_098} shapes')} |",
        f"| error / torch's error, worst | <= {goals['err_ratio']} | {s.worst_err_ratio:.2f} | "
        f"{ok(met['err_ratio'], f': {s.err_over_2x} shapes')} |", "",
        *([f"Graph-mode speedups are per shape the median over the timing rounds of the two times' ratio within "
           f"a round (every implementation replayed once per round, in a shuffled order). The ratio of each "
           f"implementation's own median instead: {geomean(speedups(rows, paired=False)):.3f} vs torch.matmul, "
           f"{geomean(speedups(rows, over='cublaslt_autotune', paired=False)):.3f} vs cuBLASLt autotune, worst "
           f"{min(speedups(rows, paired=False)):.3f}.", ""] if has_paired(rows) else []),
        f"Shapes dispatched to a kernel other than torch.matmul: {s.tuned_shapes}. "
        f"Geomean vs the cuBLASLt heuristic's top-1: {s.vs_heuristic:.3f}.", "",
        f"Noise floor: of the {s.below_098} shapes below 0.98x, {s.below_098 - s.below_098_tuned} dispatch to "
        f"torch.matmul itself. " + (
            f"torch.matmul timed against itself as a control (same harness, separate graph) is below 0.98x on "
            f"{s.control_below_098} shapes (worst {s.control_worst:.3f})." if math.isfinite(s.control_worst)
            else "No torch-vs-torch control was measured in this run."), "",
    ]
    if s.surely_below_098 is not None:
        lines += [
            f"Measurably below 0.98x (the whole 95% interval of torch's time over kernelrl's, paired within each "
            f"timing round, below 0.98): {s.surely_below_098} shapes; torch.matmul against its control: "
            f"{s.control_surely_below_098}.", ""]
    lines += _gap_lines(rows, s)
    lines += [
        "## Every mode (geomean speedup of kernelrl.gemm.matmul)", "",
        "| mode | vs torch | vs cuBLASLt heuristic | vs cuBLASLt autotune |", "|---|---|---|---|",
    ]
    for mode, d in s.per_mode.items():
        lines.append(f"| {mode} | {d['torch']:.3f} | {d['cublaslt_heuristic']:.3f} | {d['cublaslt_autotune']:.3f} |")
    lines += ["", "## By size (torch.matmul device time)", "", "| class | shapes | vs torch | vs autotune |",
              "|---|---|---|---|"]
    for cls, n, a, b in by_size(rows):
        lines.append(f"| {cls} | {n} | {a:.3f} | {b:.3f} |")
    sp = speedups(rows)
    lines += ["", "## Where the speedup comes from (graph mode)", "",
              f"Shapes at >= 1.05x: {sum(x >= 1.05 for x in sp)}, >= 1.10x: {sum(x >= 1.10 for x in sp)}, "
              f">= 1.20x: {sum(x >= 1.20 for x in sp)}; best {max(sp):.3f}x.", "",
              "| kernel family | shapes | geomean vs torch | geomean vs autotune |", "|---|---|---|---|"]
    for fam, rs in families(rows).items():
        lines.append(f"| {fam} | {len(rs)} | {geomean(speedups(rs)):.3f} | "
                     f"{geomean(speedups(rs, over='cublaslt_autotune')):.3f} |")
    lines += ["", "## The ten worst shapes (graph mode)", "",
              "| m | n | k | torch us | kernelrl us | speedup | 95% interval (paired) | kernel |",
              "|---|---|---|---|---|---|---|---|"]
    for x, r in sorted(zip(sp, rows), key=lambda t: t[0])[:10]:
        ci = f"{_f(r, 'speedup_ci_lo'):.3f}–{_f(r, 'speedup_ci_hi'):.3f}" if r.get("speedup_ci_hi") else "–"
        lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {_f(r, 'torch_us'):.2f} | {_f(r, 'kernelrl_us'):.2f} | "
                     f"{x:.3f} | {ci} | {r['kernel'][:60]} |")
    for p in plots:
        lines += ["", f"![{p.stem}]({p.name})"]
    return "\n".join(lines) + "\n"


def write_report(csv_path: Path, out_dir: Path, prefix: str = "gemm_h200") -> Path:
    """Plots and the markdown report next to each other; returns the markdown's path."""
    rows = read_rows(csv_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = next((g.upper() for g in ("h100", "h200") if g in prefix), "GPU")
    dtypes = sorted({r.get("dtype") or "fp16" for r in rows})
    parts = []
    for dtype in dtypes:  # a report per dtype where the file holds several (the goals are per dtype)
        these = [r for r in rows if (r.get("dtype") or "fp16") == dtype] if len(dtypes) > 1 else rows
        name = f"{prefix}_{dtype}" if len(dtypes) > 1 else prefix
        parts.append(markdown(these, plot(these, out_dir, name), gpu))
    md = out_dir / f"{prefix}_report.md"
    md.write_text("\n".join(parts))
    return md
