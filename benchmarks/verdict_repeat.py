"""The same candidates judged in separate runs: a verdict is a function of the program, so every run must give
every candidate the same status.

Each run is a fresh Evaluator per precision policy (fresh secret seeds, fresh reference and candidate workers);
within a run, candidates of one task share its kept reference, as in `kernelrl bench`. The corpora: the honest
candidates (tests/honest, expected ok), the exploits (tests/exploits, expected refused under every policy that
does not allow them, ok where one does) and the suite's candidates (suite/candidates, expected ok).

Usage:
  python benchmarks/verdict_repeat.py OUT [--runs 3] [--device cpu|cuda] [--corpora honest,exploits,suite]
                                          [--policy strict|kernelbench] [--only NAME,...] [--fast] [--time-limit S]
writes OUT/verdicts.jsonl (a line per run and candidate, written as it comes; a candidate it already holds in every
run is not judged again, so a run cut short goes on where it stopped) and OUT/README.md: per candidate its
statuses and speedups across runs, the candidates whose status differs between runs, and those whose status is
not the one expected.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST = dict(correctness_trials=3, timing_rounds=2, timing_precision=0, calls_per_round=5, warmup=1)


@dataclass(frozen=True)
class Entry:
    """One candidate of a corpus, the policy it is judged under and the status class it should get."""

    corpus: str
    name: str
    task: Path
    file: Path
    policy: str
    expect: str   # "ok" or "refused" (incorrect or rejected)
    device: str   # where its corpus runs it: "cpu", "gpu" or "any" (a "cpu" one may need the CPU: C++ on host memory)

    @property
    def key(self) -> str:
        return f"{self.corpus}/{self.name}/{self.policy}"


def entries(corpora: list[str]) -> list[Entry]:
    """The candidates of the named corpora, each under every policy it is to be judged by."""
    out = []
    if "honest" in corpora:
        here = ROOT / "tests" / "honest"
        for e in tomllib.loads((here / "MANIFEST.toml").read_text())["honest"]:
            out.append(Entry("honest", Path(e["file"]).stem, here / e["task"], here / e["file"],
                             e.get("policy", "strict"), "ok", e["device"]))
    if "exploits" in corpora:
        here = ROOT / "tests" / "exploits"
        for e in tomllib.loads((here / "MANIFEST.toml").read_text())["exploit"]:
            for policy in ("strict", "kernelbench"):
                out.append(Entry("exploits", Path(e["file"]).stem, here / e["task"], here / e["file"], policy,
                                 "ok" if policy in e.get("allowed_by", ()) else "refused", e["device"]))
    if "suite" in corpora:
        from kernelrl.bench.suite import discover

        suite = ROOT / "suite"
        from kernelrl.task import Candidate

        for st in discover(suite, suite / "candidates").tasks:
            if st.candidate_path:  # CUDA and Triton builds need the GPU; PyTorch ones run on either
                gpu = Candidate.from_file(st.candidate_path).language in ("cuda", "triton")
                out.append(Entry("suite", st.rel_path.removesuffix(".py"), suite / st.rel_path,
                                 Path(st.candidate_path), "strict", "ok", "gpu" if gpu else "any"))
    return out


def judge_runs(todo: list[Entry], runs: int, device: str, cache: Path, log=None, fast: bool = False,
               deadline: float = float("inf")) -> list[dict]:
    """Every entry judged once per run, each run on Evaluators of its own (one per policy, all open at once, so an
    entry's runs come one after another): a record per judgement. No entry starts after `deadline` (monotonic)."""
    from contextlib import ExitStack

    from kernelrl.evaluate import EvalConfig, Evaluator
    from kernelrl.task import Candidate, Task

    records = []
    for policy in sorted({e.policy for e in todo}):
        cfg = EvalConfig(device=device, cache_dir=str(cache), policy=policy, **(FAST if fast else {}))
        with ExitStack() as stack:
            evs = [stack.enter_context(Evaluator(cfg)) for _ in range(runs)]
            for e in sorted((e for e in todo if e.policy == policy), key=lambda e: (str(e.task), e.name)):
                if time.monotonic() > deadline:
                    break
                for run, ev in enumerate(evs):
                    t0 = time.monotonic()
                    v = ev.evaluate(Task.from_file(e.task), Candidate.from_file(e.file))
                    own = e.device == "any" or (e.device == "gpu") == device.startswith("cuda")
                    rec = {"run": run, "key": e.key, "expect": e.expect if own else "", "status": v.status,
                           "speedup": v.speedup,
                           "method": v.speedup_method, "seconds": round(time.monotonic() - t0, 2),
                           "message": (v.message or "")[:300],
                           "flags": sorted({f"{f.check}:{f.hack or ''}:{f.severity}" for f in v.flags})}
                    records.append(rec)
                    if log:
                        log(rec)
    return records


def summarise(records: list[dict]) -> dict:
    """Per candidate its statuses over the runs; which differ between runs and which miss their expected class."""
    by = {}
    for r in records:
        by.setdefault(r["key"], []).append(r)
    flips = sorted(k for k, rs in by.items() if len({r["status"] for r in rs}) > 1)
    wrong = sorted(k for k, rs in by.items()  # judged on the device its corpus names (`expect` set)
                   if any(r["expect"] and (r["status"] == "ok") != (r["expect"] == "ok") for r in rs))
    return {"candidates": len(by), "runs": max((r["run"] for r in records), default=-1) + 1, "flips": flips,
            "unexpected": wrong, "by": by}


def report(s: dict, device_name: str, command: str) -> str:
    lines = [f"# The same candidates in {s['runs']} runs ({device_name})", "",
             f"Command: `{command}`", "",
             f"- candidates (corpus/name/policy): {s['candidates']}",
             f"- status differs between runs: {len(s['flips'])}" + (f" ({', '.join(s['flips'])})" if s["flips"] else ""),
             f"- status other than expected in some run: {len(s['unexpected'])}"
             + (f" ({', '.join(s['unexpected'])})" if s["unexpected"] else ""), "",
             "Expected: `ok` for honest and suite candidates, `refused` (incorrect or rejected) for exploits under the",
             "policies that do not allow them; none (–) where a CPU entry of a corpus ran on the GPU, which it may not",
             "support (C++ on host memory): there only the agreement between runs counts.", "",
             "| candidate | policy | expected | statuses | speedups |", "| --- | --- | --- | --- | --- |"]
    for key, rs in sorted(s["by"].items()):
        corpus_name, _, policy = key.rpartition("/")
        sp = ", ".join(f"{r['speedup']:.2f}" if r["speedup"] else "–" for r in rs)
        lines.append(f"| {corpus_name} | {policy} | {rs[0]['expect'] or '–'} | {', '.join(r['status'] for r in rs)} | {sp} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--corpora", default="honest,exploits,suite")
    ap.add_argument("--only", default="", help="comma-separated candidate names")
    ap.add_argument("--policy", default="", help="only the entries judged under this policy")
    ap.add_argument("--fast", action="store_true", help="fewer trials and timing rounds (CPU checks)")
    ap.add_argument("--time-limit", type=float, default=float("inf"), help="seconds after which no candidate starts")
    a = ap.parse_args(argv)
    todo = [e for e in entries(a.corpora.split(",")) if a.device != "cpu" or e.device == "cpu"]
    if a.only:
        todo = [e for e in todo if e.name in a.only.split(",")]
    if a.policy:
        todo = [e for e in todo if e.policy == a.policy]
    a.out.mkdir(parents=True, exist_ok=True)
    log_path = a.out / "verdicts.jsonl"
    done = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()] if log_path.exists() else []
    runs_of = {}
    for r in done:
        runs_of.setdefault(r["key"], set()).add(r["run"])
    todo = [e for e in todo if len(runs_of.get(e.key, ())) < a.runs]
    done = [r for r in done if len(runs_of[r["key"]]) >= a.runs]  # a candidate's runs come from one invocation
    with open(log_path, "w") as f:
        for r in done:
            f.write(json.dumps(r) + "\n")
        def log(rec):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(f"run {rec['run']} {rec['key']}: {rec['status']} ({rec['seconds']} s)", flush=True)
        records = judge_runs(todo, a.runs, a.device, a.out / ".cache", log, a.fast, time.monotonic() + a.time_limit)
    import torch

    name = torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"
    s = summarise(done + records)
    (a.out / "README.md").write_text(report(s, name, "python benchmarks/verdict_repeat.py " + " ".join(argv)))
    print(f"{s['candidates']} candidates, {s['runs']} runs: {len(s['flips'])} differ between runs, "
          f"{len(s['unexpected'])} unexpected")
    return 1 if s["flips"] or s["unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
