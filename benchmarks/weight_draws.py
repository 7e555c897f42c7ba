"""Under how many draws of a task's weights its output ignores its input: the reference built under init seeds
0..N-1 (as the evaluator builds it under a secret one each run), called on two input draws, and the outputs compared
element for element. A task that a constant solves under some of its weight draws is one the red team's audit asks
about under other draws (`kernelrl.redteam.audit.WEIGHT_DRAWS`).

Usage: python benchmarks/weight_draws.py TASK.py [--n 200] [--batch-size B] [--out FILE]

`--batch-size` sets the task's module-level `batch_size` (a smaller batch leaves each sample's computation as it is,
and runs a large task on the CPU). Prints how many draws gave one output for both input draws and, for each constant
output, the range of its draws' first parameter's first element (a Model's own parameters come before its
submodules': its own bias, where it has one).
"""
from __future__ import annotations

import argparse
import re
import sys
import types
from pathlib import Path

import torch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", type=Path)
    ap.add_argument("--n", type=int, default=200, help="weight draws (init seeds 0..n-1)")
    ap.add_argument("--batch-size", type=int, help="the task's batch_size instead of its own")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    source = a.task.read_text()
    if a.batch_size is not None:
        source, n = re.subn(r"^batch_size\s*=\s*\d+", f"batch_size = {a.batch_size}", source, flags=re.M)
        if not n:
            raise SystemExit(f"{a.task}: no module-level batch_size to set")
    task = types.ModuleType("task")
    exec(compile(source, str(a.task), "exec"), task.__dict__)
    constant: dict[float, list[float]] = {}  # the constant's first element -> its draws' first parameters
    with torch.no_grad():
        for seed in range(a.n):
            torch.manual_seed(seed)
            init = task.get_init_inputs()
            torch.manual_seed(seed)
            model = task.Model(*init)
            outs = []
            for draw in (1, 2):
                torch.manual_seed(a.n + seed * 2 + draw)
                outs.append(model(*task.get_inputs()))
            if torch.equal(outs[0], outs[1]):
                first = next(model.parameters(), None)  # the Model's own before its submodules'
                value = round(float(outs[0].flatten()[0]), 6)
                constant.setdefault(value, []).append(float(first.flatten()[0]) if first is not None else float("nan"))
    lines = [f"{a.task.name}: {sum(map(len, constant.values()))} of {a.n} weight draws give the same output for two "
             f"input draws" + (f" (batch_size {a.batch_size})" if a.batch_size is not None else "")]
    lines += [f"  output {v:g}: {len(ps)} draws, the first parameter's first element {min(ps):.3g} to {max(ps):.3g}"
              for v, ps in sorted(constant.items())]
    text = "\n".join(lines) + "\n"
    a.out.write_text(text) if a.out else sys.stdout.write(text)


if __name__ == "__main__":
    main()
