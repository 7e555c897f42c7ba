"""cProfile of the evaluator process over the GPU stage (`Evaluator.judge`) of KernelBench identity evaluations.

Usage: python benchmarks/eval_parent_profile.py OUT_DIR level2/76_Gemm_Add_ReLU.py,... (DEV=cuda, KB=.kb/suite)
Writes OUT_DIR/prof_<i>.txt per task: the verdict's phases, each sampled comparison's seconds, and the profile by
own and by cumulative time (the evaluator's thread only; workers are other processes)."""
import cProfile, io, pstats, sys, time, json
from pathlib import Path
from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate import evaluator as evm
from kernelrl.task import Task, identity_candidate

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
tasks = sys.argv[2].split(",")
marks = []
orig = evm.Evaluator._compare_sampled
def cs(self, *a, **k):
    t = time.perf_counter(); r = orig(self, *a, **k); marks.append(("compare_sampled", time.perf_counter() - t)); return r
evm.Evaluator._compare_sampled = cs
with Evaluator(EvalConfig(device=__import__("os").environ.get("DEV", "cuda"))) as ev:
    for i, rel in enumerate(tasks):
        path = Path(__import__("os").environ.get("KB", ".kb/suite")) / rel
        task = Task.from_source(path.read_text(), name=path.stem, level=path.parent.name, path=str(path))
        p = ev.prepare(task, identity_candidate(task))
        prof = cProfile.Profile()
        marks.clear()
        prof.enable()
        v = ev.judge(p)
        prof.disable()
        ev.release(p) if hasattr(ev, "release") else None
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        s2 = io.StringIO()
        pstats.Stats(prof, stream=s2).sort_stats("cumulative").print_stats(45)
        text = f"## {rel} {v.status} {v.phases}\nmarks {marks}\n{s.getvalue()}\n{s2.getvalue()}"
        (out / f"prof_{i}.txt").write_text(text)
        print(rel, v.status, v.phases, marks[:6], flush=True)
