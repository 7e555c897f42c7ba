"""One device call for the GEMM work: build, check, tune (resuming), benchmark, test; results under $OUT.

Run on the GPU machine from the repository root:
    python3 benchmarks/gemm_device.py --deadline 500 [--shapes grid|models] [--skip-tests]
Every phase resumes from the committed results of this GPU model (H100 or H200: `gemm_tune_h100.jsonl.xz`,
`tuned_h100.json`, ...), so successive calls continue where the last one stopped. `--shapes models` benchmarks the
x @ W.T layout against F.linear into `gemm_models_<gpu>.csv.gz` (one file for both dtypes; benchmark CSVs are kept
gzipped).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results"
BUILD = ROOT / ".kernelrl-cache" / "gemm"
OUT = Path(os.environ.get("OUT", "/tmp/gemm_out"))
T0 = time.perf_counter()


def log(msg: str) -> None:
    line = f"[{time.perf_counter() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    with (OUT / "gemm_device.log").open("a") as f:
        f.write(line + "\n")


def left(deadline: float) -> float:
    return deadline - (time.perf_counter() - T0)


def build(bf16: bool = False) -> None:
    os.environ["KERNELRL_GEMM_BUILD"] = str(BUILD)
    from kernelrl.gemm import build as b
    from kernelrl.gemm import fastpath

    if fastpath.load() is None:
        fastpath.build(BUILD, log=log)  # the dispatch's C++ hot path, against this machine's torch

    if not b.cublaslt_is_current(BUILD):
        b.build_cublaslt(BUILD, log=log)
    if not b.clusterk_is_current(BUILD):
        b.build_clusterk(BUILD, jobs=16, log=log)
    if not b.cutlass_is_current(BUILD, bf16=bf16):
        b.build(BUILD, jobs=16, bf16=bf16, log=log)
        with tarfile.open(OUT / "gemm_build.tar.gz", "w:gz") as t:  # carried back so later calls skip the build
            for path in (BUILD / b.LIB_NAME, b.manifest_path(BUILD, b.LIB_NAME)):
                t.add(path, arcname=path.name)


def environment() -> dict:
    import torch
    import triton

    from kernelrl.gemm import cublaslt

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "cublaslt_version": cublaslt.version(),
           "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
           "l2_bytes": torch.cuda.get_device_properties(0).L2_cache_size}
    log(f"environment: {json.dumps(env)}")
    return env


def gpu_tag(name: str) -> str:
    """'h100' or 'h200': the GPU model whose results and table a run continues (`table.TABLES`)."""
    from kernelrl.gemm.table import TABLES

    for model in TABLES:
        if model in name:
            return model.lower()
    raise SystemExit(f"{name}: kernelrl tunes tables for {', '.join(TABLES)} only")


def smoke() -> None:
    """Each family on a few shapes: correctness only, printed."""
    import torch

    from kernelrl.gemm import check as chk
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.space import CUTLASS_CONFIGS, TRITON_CONFIGS, CutlassVariant

    for m, n, k in [(128, 256, 512), (64, 64, 16384)]:
        a, b = chk.random_inputs(m, n, k)
        ref = chk.reference(a, b)
        names = ["torch", "cublaslt"] + [c.name for c in TRITON_CONFIGS[::3]]
        names += [CutlassVariant(c, decomposition=1 if c.streamk else 0).name for c in CUTLASS_CONFIGS]
        names += [CutlassVariant(CUTLASS_CONFIGS[0], decomposition=3).name,
                  CutlassVariant(CUTLASS_CONFIGS[0], decomposition=2, splits=4).name]
        for name in names:
            try:
                r = chk.check(make_launcher(name, m, n, k), a, b, ref)
                log(f"smoke {m}x{n}x{k} {name}: ok={r.ok} rel_err={r.rel_err:.2e} {r.reason}")
            except Exception as e:
                log(f"smoke {m}x{n}x{k} {name}: FAILED {type(e).__name__}: {str(e)[:400]}")
                torch.cuda.synchronize()
        # the gate must reject fp16 accumulation
        from kernelrl.gemm import triton_family

        r = chk.check(triton_family.make_launcher(TRITON_CONFIGS[2], m, n, k, acc_fp16=True), a, b, ref)
        log(f"smoke {m}x{n}x{k} fp16-accumulate triton: ok={r.ok} rel_err={r.rel_err:.2e} (must be False)")


def host_overhead() -> None:
    """Host time per call of torch.matmul and of each family's launcher on a small shape, microseconds."""
    import torch

    from kernelrl.gemm import timing as tm
    from kernelrl.gemm.registry import make_launcher
    from kernelrl.gemm.space import TRITON_CONFIGS, CutlassVariant, CUTLASS_CONFIGS

    inp = tm.Inputs(256, 256, 256, sets=4)
    names = ["torch", "cublaslt", TRITON_CONFIGS[8].name, CutlassVariant(CUTLASS_CONFIGS[5]).name]
    res = {"torch.matmul(a, b)": tm.time_host(torch.matmul, inp, 200, out=False)}
    for name in names:
        res[name] = tm.time_host(make_launcher(name, 256, 256, 256), inp, 200)
    log("host us per call: " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deadline", type=float, default=500.0, help="seconds for the whole call")
    ap.add_argument("--shapes", default="grid")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"),
                    help="the dtype the shapes are tuned and benchmarked in (bf16: into gemm_<gpu>_bf16.csv.gz)")
    ap.add_argument("--no-bf16-cutlass", action="store_true",
                    help="tune bf16 without building the bf16 CUTLASS kernels (shapes the family is not searched on)")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--layout", default=None, choices=("nn", "nt"),
                    help="the benchmark's layout (default: nt for --shapes models, else nn)")
    ap.add_argument("--augment-dtype", default=None, choices=("fp16", "bf16"),
                    help="--augment searches the records of this dtype only (default: every dtype)")
    ap.add_argument("--seed-dtype", default="", choices=("", "fp16", "bf16"),
                    help="seed the search with each shape's best kernels recorded in this dtype, and search "
                         "the families less widely (tune.SEEDED)")
    ap.add_argument("--against-linear", action="store_true", help="time each shape of --dtype's dispatch on the "
                    "relaid weight against F.linear (tune.against_linear: what gemm.patch decides each layer's "
                    "layout by)")
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--bench-reserve", type=float, default=0.0, help="seconds kept for benchmarking")
    ap.add_argument("--retune-between", type=float, nargs=2, default=None, metavar=("LO_US", "HI_US"),
                    help="drop committed tuning records of shapes estimated at LO-HI us (their search space "
                         "changed), so they are tuned again")
    ap.add_argument("--retime", default="", metavar="REGEX", help="after a kernel changed: time again the "
                    "candidates named by REGEX on the shapes where the fastest of them came within --retime-within "
                    "of the winner, and choose afresh (tune.retime)")
    ap.add_argument("--retime-within", type=float, default=1.1)
    ap.add_argument("--neighbours", type=float, default=None, metavar="WITHIN", help="search the cuBLASLt "
                    "configurations one attribute away from each shape's best ones, where those came within WITHIN "
                    "of the winner (tune.neighbourhood; the shapes of --dtype)")
    ap.add_argument("--cutlass-runtime", type=float, default=None, metavar="WITHIN", help="search the run-time "
                    "neighbours (raster order, swizzle) of the CUTLASS candidates that came within WITHIN of a shape's "
                    "winner (tune.cutlass_runtime; of --dtype)")
    ap.add_argument("--tiled-fixed", type=float, default=None, metavar="WITHIN", help="search the tiled kernels "
                    "with the shape's sizes compiled in, for the tiled candidates that came within WITHIN of a "
                    "shape's fastest candidate (tune.tiled_fixed; of --dtype)")
    ap.add_argument("--neighbours-per-base", type=int, default=12)
    ap.add_argument("--neighbours-extra", type=int, default=0, help="also search around this many more of the "
                    "heuristic's configurations, the fastest after the autotune baseline ...")
    ap.add_argument("--neighbours-close", type=float, default=1.03, help="... where they came within this of it")
    ap.add_argument("--neighbours-tag", default="lt-neighbours", help="records carrying it are not searched again "
                    "(a new tag searches around the winners the last round found)")
    ap.add_argument("--augment", default="", help="search this family (e.g. splitk) on the recorded shapes "
                    "that have candidates of it and were not searched for it yet")
    ap.add_argument("--redecide", nargs="?", const="redecided", default=None, metavar="TAG",
                    help="choose again the winner of every recorded shape not yet tagged TAG, timing the "
                         "finalists as the tuner now does (resumes; see tune.redecide)")
    ap.add_argument("--fresh-bench", action="store_true", help="benchmark every shape again (the table changed)")
    ap.add_argument("--demote", action="store_true", help="send back to torch.matmul the shapes whose kernel the "
                    "committed benchmark found measurably slower than torch.matmul (tune.demote); implies "
                    "--fresh-bench")
    ap.add_argument("--demote-consistent", default="", metavar="CSV,CSV,...",
                    help="send back to torch.matmul the shapes whose kernel was slower than torch.matmul in every one "
                         "of these benchmark CSVs (plain or .csv.gz) that ran it, at least 3 "
                         "(tune.demote_consistent); implies --fresh-bench")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRITON_CACHE_DIR", str(ROOT / ".kernelrl-cache" / "triton"))
    build(bf16=args.dtype == "bf16" and not args.no_bf16_cutlass)
    env = environment()
    if not args.skip_smoke:
        smoke()
        host_overhead()
    from kernelrl.gemm.shapes import Shape, read_shapes
    from kernelrl.gemm.report import read_rows
    from kernelrl.gemm.table import from_records, open_packed, read_records
    from kernelrl.gemm.tune import (SEEDED, TuneOptions, against_linear, augment, cutlass_runtime, demote,
                                    demote_consistent,
                                    neighbourhood, redecide, retime, seeds_from, tiled_fixed, tune)

    shapes = read_shapes(args.shapes)
    gpu = gpu_tag(env["gpu"])
    layout = args.layout or ("nt" if args.shapes == "models" else "nn")
    csv_path = RESULTS / (f"gemm_models_{gpu}.csv.gz" if args.shapes == "models" else
                          f"gemm_{gpu}.csv.gz" if args.dtype == "fp16" else f"gemm_{gpu}_{args.dtype}.csv.gz")
    tune_xz = RESULTS / f"gemm_tune_{gpu}.jsonl.xz"
    table_name = f"tuned_{gpu}.json"
    work = Path(f"/tmp/gemm_tune_{gpu}.jsonl")
    work.unlink(missing_ok=True)  # a warm machine keeps /tmp: start from the committed records only
    if tune_xz.is_file():
        with open_packed(tune_xz, "rb") as src, work.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    if args.retune_between:
        from kernelrl.gemm.tune import estimate_torch_us

        lo, hi = args.retune_between
        kept = [line for line in work.read_text().splitlines() if line.strip() and not (
            lo < estimate_torch_us(Shape(*(json.loads(line)[d] for d in "mnk"))) <= hi)]
        work.write_text("".join(f"{line}\n" for line in kept))
        log(f"retuning shapes estimated at {lo:g}-{hi:g} us: {len(kept)} records kept")
    unsearched = 0
    try:
        seeds = seeds_from(work, args.seed_dtype) if args.seed_dtype else None
        tune(shapes, work, args.dtype, opt=SEEDED if seeds else TuneOptions(), seeds=seeds,
             deadline_s=left(args.deadline) - args.bench_reserve - 30, log=log)
        if args.augment:
            unsearched = augment(work, args.augment, shapes, deadline_s=left(args.deadline) - args.bench_reserve - 30,
                                 log=log, dtype=args.augment_dtype)
        if args.retime and not unsearched:
            unsearched = retime(work, args.retime, args.retime_within, shapes=shapes, log=log, dtype=args.dtype,
                                deadline_s=left(args.deadline) - args.bench_reserve - 30)
        if args.cutlass_runtime and not unsearched:
            unsearched = cutlass_runtime(work, args.cutlass_runtime, shapes=shapes, log=log, dtype=args.dtype,
                                         deadline_s=left(args.deadline) - args.bench_reserve - 30)
        if args.tiled_fixed and not unsearched:
            unsearched = tiled_fixed(work, args.tiled_fixed, shapes=shapes, log=log, dtype=args.dtype,
                                     deadline_s=left(args.deadline) - args.bench_reserve - 30)
        if args.neighbours and not unsearched:
            unsearched = neighbourhood(work, args.neighbours, args.neighbours_per_base, shapes=shapes, log=log,
                                       dtype=args.dtype, deadline_s=left(args.deadline) - args.bench_reserve - 30,
                                       tag=args.neighbours_tag, extra=args.neighbours_extra,
                                       close=args.neighbours_close)
        if args.redecide and not unsearched:
            unsearched = redecide(work, shapes, deadline_s=left(args.deadline) - args.bench_reserve - 30, log=log,
                                  tag=args.redecide)
        if args.against_linear and not unsearched:
            unsearched = against_linear(work, shapes, deadline_s=left(args.deadline) - args.bench_reserve - 30,
                                        log=log, dtype=args.dtype)
        if args.demote:
            log(f"demoted {demote(work, read_rows(csv_path), log=log)} shapes")
        if args.demote_consistent:
            runs = [read_rows(Path(name)) for name in args.demote_consistent.split(",")]
            log(f"demoted {demote_consistent(work, runs, log=log)} shapes slower in all of {len(runs)} benchmarks")
    finally:
        with work.open("rb") as src, open_packed(OUT / tune_xz.name, "wb") as dst:
            shutil.copyfileobj(src, dst)
        if Path(os.environ["TRITON_CACHE_DIR"]).is_dir():  # nothing compiled, nothing cached
            with tarfile.open(OUT / "gemm_triton_cache.tar.gz", "w:gz") as t:
                t.add(os.environ["TRITON_CACHE_DIR"], arcname="triton")
    records = read_records(work)
    meta = {**env, "source": f"benchmarks/results/{tune_xz.name}", "shapes": len(records)}
    table = from_records(records, meta)
    table.save(OUT / table_name)
    log(f"table: {len(table.entries)} shapes, {len(table.lookup())} not torch")
    tuned = {(r["m"], r["n"], r["k"], r["dtype"]): r for r in records}
    complete = all((s.m, s.n, s.k, args.dtype) in tuned for s in shapes) and not unsearched
    shutil.copy(OUT / table_name, ROOT / "src" / "kernelrl" / "gemm" / "data" / table_name)
    if complete and not args.skip_tests and left(args.deadline) > 150:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                               *map(str, sorted((ROOT / "tests").glob("test_gemm*.py")))],
                              capture_output=True, text=True, cwd=ROOT, timeout=max(60, left(args.deadline) - 60))
        (OUT / "gemm_gpu_tests.log").write_text(proc.stdout + proc.stderr)
        log(f"gpu tests: rc={proc.returncode} {proc.stdout.strip().splitlines()[-1] if proc.stdout else ''}")
        log(proc.stdout[-3000:])
    if complete and not args.skip_bench and left(args.deadline) > 60:
        from kernelrl.gemm.bench import bench
        from kernelrl.gemm.dispatch import Dispatcher

        work_csv = Path("/tmp") / csv_path.name
        work_csv.unlink(missing_ok=True)
        if csv_path.is_file() and not (args.fresh_bench or args.demote or args.demote_consistent):
            shutil.copy(csv_path, work_csv)
        disp = Dispatcher(table)
        log(f"bench: the dispatcher {'takes' if disp.uses_fastpath else 'has no'} C++ hot path")
        try:
            bench(shapes, tuned, disp, work_csv, args.dtype, deadline_s=left(args.deadline) - 20, log=log,
                  layout=layout)
        finally:
            if work_csv.is_file():
                shutil.copy(work_csv, OUT / csv_path.name)
    log("done")


if __name__ == "__main__":
    main()
