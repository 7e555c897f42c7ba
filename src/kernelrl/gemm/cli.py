"""`kernelrl gemm tune|bench|show|report|build|sass`: the HGEMM search and its benchmark from the command line."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table as RichTable

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="HGEMM on Hopper: tune per shape, benchmark against torch.matmul and cuBLASLt.")
err = Console(stderr=True)
out = Console()

RESULTS = Path("benchmarks/results")
DEFAULT_RECORDS = RESULTS / "gemm_tune_h200.jsonl.xz"
DEFAULT_CSV = RESULTS / "gemm_h200.csv.gz"


def fail(message: str, code: int = 2):
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _shapes(spec: str):
    from kernelrl.gemm.shapes import read_shapes

    try:
        return read_shapes(spec)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))


def _need_cuda(what: str) -> None:
    import torch

    if not torch.cuda.is_available():
        fail(f"`kernelrl gemm {what}` times kernels on a GPU, and no CUDA device is visible here: "
             "run it on a Hopper (sm_90) machine")


@app.command()
def tune(
    shapes: str = typer.Option("grid", help="`grid` (1000 shapes), `models` (the linear layers of five open LLMs), "
                                            "MxNxK[,MxNxK...], or a CSV with m,n,k"),
    dtype: str = typer.Option("fp16", help="fp16 or bf16"),
    results: Path = typer.Option(DEFAULT_RECORDS, help="per-shape records (JSONL, .gz or .xz allowed); resumed"),
    table: Path = typer.Option(None, help="write the tuned table here (default: the committed table of this GPU)"),
    deadline: float = typer.Option(math.inf, help="stop after this many seconds (rerun to resume)"),
    seed_dtype: str = typer.Option(None, help="seed each shape's search with its best kernels recorded in this "
                                              "dtype (fp16 or bf16) and search the families less widely"),
    against_linear: bool = typer.Option(None, "--linear/--no-linear", help="also time each shape's dispatch on "
                                        "the relaid weight against F.linear, which gemm.patch decides each layer's "
                                        "layout by (default: with --shapes models)"),
):
    """Search every family's pruned candidates per shape; append records; write the table."""
    from kernelrl.gemm.table import from_records, read_records, table_path_for
    from kernelrl.gemm.tune import SEEDED, TuneOptions, plain_results, seeds_from
    from kernelrl.gemm.tune import tune as run_tune

    for given in (dtype, seed_dtype):
        if given not in ("fp16", "bf16", None):
            fail(f"dtype {given!r}: use fp16 or bf16")
    if seed_dtype == dtype:
        fail(f"--seed-dtype {seed_dtype} seeds a search in another dtype than the one it tunes (--dtype)")
    if seed_dtype and not Path(results).is_file():
        fail(f"--seed-dtype {seed_dtype}: no records at {results} to seed from")
    todo = _shapes(shapes)
    _need_cuda("tune")
    import torch

    from kernelrl.gemm import cublaslt

    path = table or table_path_for(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
    if path is None:
        fail(f"no committed table belongs to {torch.cuda.get_device_name()}: give --table PATH")

    t0 = time.monotonic()
    with plain_results(results) as work:
        seeds = seeds_from(work, seed_dtype) if seed_dtype else None
        n = run_tune(todo, work, dtype, opt=SEEDED if seeds else TuneOptions(), deadline_s=deadline,
                     log=out.print, seeds=seeds)
        if against_linear or (against_linear is None and shapes == "models"):
            from kernelrl.gemm.tune import against_linear as time_against_linear

            time_against_linear(work, todo, deadline_s=deadline - (time.monotonic() - t0), log=out.print,
                                dtype=dtype)
        records = read_records(work)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cublaslt_version": cublaslt.version(), "source": str(results), "shapes": len(records)}
    tbl = from_records(records, meta)
    tbl.save(path)
    out.print(f"tuned {n} new shapes; table of {len(tbl.entries)} shapes ({len(tbl.lookup())} not torch) "
              f"written to {path}")


@app.command()
def bench(
    shapes: str = typer.Option("grid", help="`grid`, `models`, MxNxK[,...], or a CSV with m,n,k"),
    results: Path = typer.Option(DEFAULT_RECORDS, help="the tuner's records (give the cuBLASLt baselines)"),
    table: Path = typer.Option(None, help="tuned table to dispatch with (default: the committed table of this GPU)"),
    csv_out: Path = typer.Option(DEFAULT_CSV, "--out", help="CSV, one row per shape (.csv.gz: kept gzipped); resumed"),
    deadline: float = typer.Option(math.inf, help="stop after this many seconds (rerun to resume)"),
    report: bool = typer.Option(True, help="write the markdown report and plots next to the CSV"),
    dtype: str = typer.Option("fp16", help="fp16 or bf16"),
    layout: str = typer.Option("nn", help="nn: A @ B against torch.matmul; nt: x @ W.T (nn.Linear's weight) against "
                                          "F.linear, with kernelrl on the weight laid out as gemm.patch leaves it"),
):
    """Time kernelrl.gemm.matmul, torch.matmul and cuBLASLt (heuristic, autotuned) in every mode."""
    from kernelrl.gemm.bench import LAYOUTS
    from kernelrl.gemm.bench import bench as run_bench
    from kernelrl.gemm.dispatch import Dispatcher, device_table
    from kernelrl.gemm.table import Table, read_records

    if dtype not in ("fp16", "bf16"):
        fail(f"dtype {dtype!r}: use fp16 or bf16")
    if layout not in LAYOUTS:
        fail(f"layout {layout!r}: use {' or '.join(LAYOUTS)}")
    todo = _shapes(shapes)
    if not Path(results).is_file():
        fail(f"no tuning records at {results}: run `kernelrl gemm tune` first")
    _need_cuda("bench")
    recs = {(r["m"], r["n"], r["k"], r["dtype"]): r for r in read_records(results)}
    disp = Dispatcher(Table.load(table) if table else device_table())
    n = run_bench(todo, recs, disp, csv_out, dtype, deadline_s=deadline, log=out.print, layout=layout)
    out.print(f"benchmarked {n} shapes into {csv_out}")
    if report:
        from kernelrl.gemm.report import report_prefix, write_report

        out.print(f"report: {write_report(csv_out, csv_out.parent, report_prefix(csv_out))}")


@app.command()
def show(
    table: Path = typer.Option(None, help="tuned table (default: the committed table)"),
    shape: str = typer.Option(None, help="MxNxK: print the kernel this shape dispatches to"),
    dtype: str = typer.Option("fp16"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
):
    """What the tuned table holds: kernels per family, or one shape's kernel and times."""
    from kernelrl.gemm.shapes import Shape
    from kernelrl.gemm.table import DEFAULT_TABLE, Table

    path = table or DEFAULT_TABLE
    try:
        tbl = Table.load(path)
    except ValueError as e:
        fail(str(e))
    if not tbl.entries:
        fail(f"no tuned table at {path}: run `kernelrl gemm tune`")
    if shape:
        try:
            s = Shape.parse(shape)
        except ValueError as e:
            fail(str(e))
        hit = [e for e in tbl.entries if e.key == (s.m, s.n, s.k, dtype)]
        if not hit:
            out.print(f"{s} {dtype}: not in the table: dispatches to torch.matmul")
            return
        e = hit[0]
        layer = "relaid" if (s.n, s.k, dtype) in tbl.relaid_layers() else "kept"
        info = {"shape": str(s), "dtype": dtype, "kernel": e.kernel, "us": e.us, "torch_us": e.torch_us,
                "speedup": e.torch_us / e.us, "vs_linear": e.vs_linear, "patch": layer}
        linear = "" if e.vs_linear is None else f"; {e.vs_linear:.3f}x F.linear"
        out.print_json(json.dumps(info)) if as_json else out.print(
            f"{s} {dtype}: {e.kernel} {e.us:.2f} us (torch.matmul {e.torch_us:.2f} us, {e.torch_us / e.us:.3f}x"
            f"{linear}); gemm.patch {'lays this layer out' if layer == 'relaid' else 'leaves this layer to F.linear'}")
        return
    fams: dict[str, list] = {}
    for e in tbl.entries:
        fams.setdefault(e.kernel.split(":", 1)[0], []).append(e)
    summary = {f: {"shapes": len(es), "geomean_speedup": math.exp(sum(math.log(e.torch_us / e.us) for e in es)
                                                                  / len(es))} for f, es in sorted(fams.items())}
    relaid = sorted(tbl.relaid_layers())
    if as_json:
        out.print_json(json.dumps({"meta": tbl.meta, "families": summary, "relaid_layers": relaid}))
        return
    t = RichTable(title=f"{path} ({len(tbl.entries)} shapes; {tbl.meta.get('gpu', '?')}; "
                        f"gemm.patch lays out {len(relaid)} (out, in, dtype) layers)")
    t.add_column("family")
    t.add_column("shapes", justify="right")
    t.add_column("geomean speedup vs torch (tuning)", justify="right")
    for f, d in summary.items():
        t.add_row(f, str(d["shapes"]), f"{d['geomean_speedup']:.3f}")
    out.print(t)


@app.command()
def report(
    csv_path: Path = typer.Argument(DEFAULT_CSV, help="benchmark CSV (plain or .csv.gz)"),
    out_dir: Path = typer.Option(None, help="folder for the markdown and plots (default: next to the CSV)"),
):
    """Write the markdown report and plots for a benchmark CSV."""
    from kernelrl.gemm.report import report_prefix, write_report

    if not csv_path.is_file():
        fail(f"no benchmark CSV at {csv_path}: run `kernelrl gemm bench`")
    try:
        md = write_report(csv_path, out_dir or csv_path.parent, report_prefix(csv_path))
    except (ValueError, KeyError, OSError, EOFError) as e:  # OSError, EOFError: a damaged .csv.gz
        fail(f"{csv_path} is not a gemm benchmark CSV ({e})")
    out.print(f"report: {md}")


@app.command()
def build(
    build_dir: Path = typer.Option(None, help="where the libraries go (default .kernelrl-cache/gemm)"),
    jobs: int = typer.Option(0, help="parallel nvcc jobs (0: one per core)"),
    bf16: bool = typer.Option(False, help="also build bf16 CUTLASS configurations"),
):
    """Compile the dispatch's C++ hot path, then the CUTLASS and cluster split-K configurations and the cuBLASLt
    binding with nvcc."""
    from kernelrl.gemm import build as b

    try:
        b.build_all(build_dir or b.DEFAULT_BUILD_DIR, jobs=jobs or None, bf16=bf16, log=out.print)
    except (FileNotFoundError, RuntimeError) as e:
        fail(str(e))


@app.command()
def sass(
    only: str = typer.Option("", help="only kernels whose label contains this"),
    clusterk: Path = typer.Option(None, metavar="SOURCE", help="list the cluster split-K family compiled from "
                                                                "SOURCE (a cluster_splitk.cu of any revision)"),
    build_dir: Path = typer.Option(None, help="where --clusterk's objects go (default: the build's own)"),
    cuobjdump: str = typer.Option("", help="cuobjdump to use (default: the one Triton bundles)"),
):
    """One line per kernel with a hash of its SASS, compiled for sm_90a without a GPU: diff two revisions' lines
    to show that a source change leaves the machine code as it was."""
    import importlib.util
    import subprocess

    from kernelrl.gemm import sass as sa

    if importlib.util.find_spec("triton") is None and (clusterk is None or not cuobjdump):
        fail("Triton is not installed: `kernelrl gemm sass` compiles the Triton kernels with it and lists SASS with "
             "its bundled cuobjdump (`pip install triton`; with --clusterk, --cuobjdump PATH will do)")
    if clusterk is not None and not clusterk.is_file():
        fail(f"no cluster split-K source at {clusterk}")
    try:
        if clusterk is not None:
            from kernelrl.gemm import build as b

            lines = sa.clusterk_lines(clusterk, build_dir or b.DEFAULT_BUILD_DIR, cuobjdump or sa.bundled_cuobjdump(),
                                      only, log=err.print)
        else:
            lines = sa.triton_lines(only, cuobjdump)
        for label, digest, n in lines:
            typer.echo(f"{label} {digest} {n}")
    except (FileNotFoundError, RuntimeError, subprocess.CalledProcessError) as e:
        fail(str(e))
