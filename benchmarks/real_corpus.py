"""A real-like corpus for a KernelBench suite: for every task, candidates of the kinds LLMs write, each honest and
correct under the strict policy (float32 math kept accurate, no TF32 or lower precision).

Usage: python benchmarks/real_corpus.py SUITE_DIR OUT_DIR [--per-task 1] [--seed 0] [--level N ...] [--every K]

Every reference named as KernelBench names them (levelN/<id>_<Name>.py) gets `--per-task` candidates, named as
KernelBench's generation runs name theirs (level_1_problem_12_sample_3_kernel.py, samples 0 to N-1: a group per
task for `kernelrl bench --samples all`), each of one kind drawn with `--seed`:
- plain: the reference's forward restated (no autograd, matrix products as `@`, activations as tensor methods);
- compile: the forward under torch.compile, made in __init__;
- cuda_graph: the forward captured in a CUDA graph on its first call (static input buffers), replayed after, each
  call's inputs copied in and its output copied out; eager off CUDA;
- triton: the forward's trailing activation (where it has none, the write of its output) in a Triton kernel;
- cuda: the same in a CUDA kernel built with load_inline.
The kind is chosen from the reference's source alone (its AST; no task code runs here): a forward that keeps state
between calls or waits on the host gets no compile or graph kind, nor one with a loop a compile kind, nor one that
makes tensors from host data a graph kind; an integer output no kernel kind. Kernels and extensions are named
after the task and sample, so every build is cold. `--every K` gives candidates to every K-th task of the suite in
its order only (the first, the K+1-th, ...): a sample spread over the levels, for a GRPO-shaped run that fits a call
(judge it with `kernelrl bench --no-time-references`). Writes OUT_DIR/corpus.json: each task's candidates (sample,
kind, op, file) and the count of each kind.
"""
from __future__ import annotations

import argparse
import ast
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from corpus_ops import (COPY, FUNCTIONAL, METHODS, Op, init_constants, kernel_code, modules_built, self_attr,
                        trailing_activation)
from kernelrl.bench.suite import SuiteError, discover, problem_id, select_levels
from kernelrl.task import Candidate, Task, TaskError, identity_candidate

KINDS = ("plain", "compile", "cuda_graph", "triton", "cuda")
# How often each kind is drawn where it applies: load_inline CUDA and Triton make about a third.
WEIGHTS = {"plain": 32, "compile": 17, "cuda_graph": 20, "triton": 13, "cuda": 16}
FUSE = 2  # kernel kinds are drawn this much more often where the forward ends in an activation a kernel can fuse
MANIFEST = "corpus.json"
_INTEGER_OUTPUT = {"argmax", "argmin", "argsort", "argwhere", "nonzero", "bucketize", "searchsorted"}
_HOST_SYNC = {"item", "tolist", "cpu", "numpy", "nonzero", "masked_select", "unique", "print", "randn", "rand",
              "randint", "randn_like", "rand_like", "randperm", "bernoulli", "multinomial", "dropout", "synchronize"}
_HOST_DATA = {"tensor", "as_tensor", "from_numpy", "cuda"}  # copies from host memory: not allowed in a graph capture


# ---- reading a reference ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    """A reference as the generator reads it: its source with Model renamed ModelNew, and the spots it edits."""

    task: Task
    source: str
    init: ast.FunctionDef | None
    forward: ast.FunctionDef
    tail: ast.expr | None          # the trailing activation (or scalar arithmetic), replaced by a kernel
    tail_arg: ast.expr | None      # the tensor it is applied to
    tail_op: Op | None
    output: ast.expr | None        # what the forward's last statement returns
    stateful: bool                 # assigns attributes of self in forward: state kept between calls
    host_sync: bool                # waits on the host, draws random numbers or has data-dependent shapes
    host_data: bool                # makes tensors from host data
    loops: bool
    copyable: bool                 # returns one expression, not an integer op's: a kernel can write it


def read(task: Task) -> Reference | None:
    """The reference of `task` read for rewriting; None where its ModelNew has no forward method."""
    source = identity_candidate(task).source
    tree = ast.parse(source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    methods = {n.name: n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef)}
    forward = methods.get("forward")
    if forward is None:
        return None
    init = methods.get("__init__")
    stateful = any(_assigns_self(n) for n in ast.walk(forward))
    constants = {} if stateful else init_constants(tree, init)  # a forward that sets attributes may change them
    tail, arg, op = trailing_activation(forward, modules_built(init), constants)
    last = forward.body[-1]
    output = last.value if isinstance(last, ast.Return) else None
    calls = {_short(n.func) for n in ast.walk(forward) if isinstance(n, ast.Call)}
    return Reference(
        task=task, source=source, init=init, forward=forward, tail=tail, tail_arg=arg, tail_op=op, output=output,
        stateful=stateful, host_sync=bool(calls & _HOST_SYNC), host_data=bool(calls & _HOST_DATA),
        loops=any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(forward)),
        copyable=output is not None and not isinstance(output, (ast.Tuple, ast.List, ast.Starred))
        and not (isinstance(output, ast.Call) and _short(output.func) in _INTEGER_OUTPUT))


def _assigns_self(node) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
    return any(self_attr(t) or (isinstance(t, ast.Subscript) and self_attr(t.value)) for t in targets)


def _short(func) -> str:
    """The called name's last part: 'relu' for torch.relu and x.relu."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def kinds_for(ref: Reference) -> tuple[str, ...]:
    """The kinds that fit the reference."""
    kinds = ["plain"]
    if ref.init is not None and not (ref.stateful or ref.host_sync):
        kinds += [] if ref.loops else ["compile"]
        kinds += [] if ref.host_data else ["cuda_graph"]
    if ref.tail_op is not None or ref.copyable:
        kinds += ["triton", "cuda"]
    return tuple(kinds)


def choose(ref: Reference, draw: str) -> str:
    """One kind, drawn by WEIGHTS among those that fit (the same for the same `draw`: seed, task and sample)."""
    kinds = kinds_for(ref)
    boost = FUSE if ref.tail_op is not None else 1
    weights = [WEIGHTS[k] * (boost if k in ("triton", "cuda") else 1) for k in kinds]
    return random.Random(draw).choices(kinds, weights=weights)[0]


# ---- editing a source ---------------------------------------------------------------------------------------------

class Edits:
    """Replacements and inserted lines at AST positions of one source, applied together."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.todo: list[tuple[int, int, str]] = []

    def offset(self, lineno: int, col: int) -> int:
        """Character offset of an AST position (col counts UTF-8 bytes)."""
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode())

    def replace(self, node: ast.AST, text: str) -> None:
        self.todo.append((self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset),
                          text))

    def before_line(self, lineno: int, text: str) -> None:
        at = self.starts[lineno - 1]
        self.todo.append((at, at, text))

    def after_line(self, lineno: int, text: str) -> None:
        at = self.starts[lineno]
        self.todo.append((at, at, text if self.source[at - 1:at] == "\n" else "\n" + text))

    def indent(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[:len(line) - len(line.lstrip())]

    def text(self, node: ast.AST) -> str:
        return self.source[self.offset(node.lineno, node.col_offset):self.offset(node.end_lineno, node.end_col_offset)]

    def result(self) -> str:
        out = self.source
        for start, end, text in sorted(self.todo, key=lambda e: (e[0], e[1]), reverse=True):
            out = out[:start] + text + out[end:]
        return out


def _block(text: str, indent: str) -> str:
    """`text` (lines indented from column 0) indented by `indent`, blank lines kept empty."""
    return "".join(indent + line if line.strip() else line for line in text.splitlines(keepends=True))


def _def_line(ref: Reference) -> int:
    """The forward's first line (its first decorator's, where it has any)."""
    return min([ref.forward.lineno] + [d.lineno for d in ref.forward.decorator_list])


def rename_forward(ref: Reference, e: Edits, name: str) -> None:
    """`def forward(` becomes `def <name>(`."""
    line = e.lines[ref.forward.lineno - 1]
    m = re.search(r"\bdef\s+forward\b", line)
    start = e.starts[ref.forward.lineno - 1] + m.start()
    e.todo.append((start, start + len(m.group(0)), f"def {name}"))


def methods_before_forward(ref: Reference, e: Edits, text: str) -> None:
    e.before_line(_def_line(ref), _block(text, e.indent(ref.forward.lineno)))


def end_of_init(ref: Reference, e: Edits, text: str) -> None:
    """Lines appended to __init__'s body."""
    first = ref.init.body[0]
    indent = e.indent(first.lineno) if first.lineno > ref.init.lineno else e.indent(ref.init.lineno) + "    "
    e.after_line(ref.init.end_lineno, _block(text, indent))


def module_code(ref: Reference, e: Edits, text: str) -> None:
    """Module-level code after the reference's imports."""
    tree = ast.parse(ref.source)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = imports[-1].end_lineno if imports else 0
    if at:
        e.after_line(at, "\n" + text + "\n")
    else:
        e.before_line(1, text + "\n\n")


def _paren(e: Edits, node: ast.expr) -> str:
    text = e.text(node)
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"


# ---- the kinds ----------------------------------------------------------------------------------------------------

def plain(ref: Reference, slug: str) -> str:
    """The forward restated: no autograd, matrix products as `@`, a trailing activation as a tensor method."""
    e = Edits(ref.source)
    e.before_line(_def_line(ref), e.indent(ref.forward.lineno) + "@torch.no_grad()\n")
    untouched = set()  # inside the rewritten activation: its argument is kept as written
    if isinstance(ref.tail, ast.Call) and ref.tail_op.name in METHODS and \
            FUNCTIONAL.match(ast.unparse(ref.tail.func)) and len(ref.tail.args) == 1 and not ref.tail.keywords:
        e.replace(ref.tail, f"{_paren(e, ref.tail_arg)}.{ref.tail_op.name}()")
        untouched = set(ast.walk(ref.tail))
    whole = {st.value for st in ast.walk(ref.forward) if isinstance(st, (ast.Return, ast.Assign))}
    whole |= {a for c in ast.walk(ref.forward) if isinstance(c, ast.Call) for a in c.args}
    for n in ast.walk(ref.forward):
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "torch.matmul" and len(n.args) == 2 and \
                not n.keywords and n not in untouched and not _within_matmul(n, ref.forward):
            product = f"{_paren(e, n.args[0])} @ {_paren(e, n.args[1])}"
            e.replace(n, product if n in whole else f"({product})")  # a call binds tighter than @
    return e.result()


def _within_matmul(node: ast.Call, forward: ast.FunctionDef) -> bool:
    """Whether `node` is an argument (at any depth) of another torch.matmul call: edits must not overlap."""
    return any(n is not node and isinstance(n, ast.Call) and ast.unparse(n.func) == "torch.matmul"
               and any(node is m for a in n.args for m in ast.walk(a)) for n in ast.walk(forward))


COMPILED = '''def forward(self, *args):
    return self._compiled_forward(*args)

'''


def compiled(ref: Reference, slug: str) -> str:
    """The forward compiled in __init__ with torch.compile, called by the new forward."""
    return wrapped(ref, COMPILED, "self._compiled_forward = torch.compile(self._forward_eager)\n")


GRAPHED = '''def forward(self, *args):
    on_gpu = all(a.is_cuda for a in args if isinstance(a, torch.Tensor))
    if not on_gpu or torch.cuda.is_current_stream_capturing():
        return self._forward_eager(*args)
    key = tuple((a.shape, a.dtype, a.stride(), a.device) if isinstance(a, torch.Tensor) else repr(a) for a in args)
    if key not in self._graphs:
        self._graphs[key] = self._capture(args)
    graph, static_args, static_out = self._graphs[key]
    for buf, a in zip(static_args, args):
        if isinstance(buf, torch.Tensor):
            buf.copy_(a)
    graph.replay()
    return self._copy_out(static_out)

@torch.no_grad()
def _capture(self, args):
    static_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            self._forward_eager(*static_args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = self._forward_eager(*static_args)
    return graph, static_args, static_out

@staticmethod
def _copy_out(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (tuple, list)):
        return type(out)(ModelNew._copy_out(o) for o in out)
    return out

'''


def graphed(ref: Reference, slug: str) -> str:
    """The forward captured in a CUDA graph per input signature on its first call and replayed after."""
    return wrapped(ref, GRAPHED, "self._graphs = {}\n")


def wrapped(ref: Reference, methods: str, init_line: str) -> str:
    """The forward renamed _forward_eager, `methods` (a new forward among them) before it, `init_line` appended to
    __init__."""
    e = Edits(ref.source)
    rename_forward(ref, e, "_forward_eager")
    methods_before_forward(ref, e, methods)
    end_of_init(ref, e, init_line)
    return e.result()


def own_kernel(language: str):
    def make(ref: Reference, slug: str) -> str:
        """The trailing activation in the candidate's own kernel; without one, the output written by it."""
        e = Edits(ref.source)
        op = ref.tail_op or COPY
        code, launch = kernel_code(language, op, slug)
        module_code(ref, e, code)
        if ref.tail_op is not None:
            e.replace(ref.tail, f"{launch}({e.text(ref.tail_arg)})")
        else:
            e.replace(ref.output, f"{launch}({e.text(ref.output)})")
        return e.result()
    return make


MAKERS = {"plain": plain, "compile": compiled, "cuda_graph": graphed, "triton": own_kernel("triton"),
          "cuda": own_kernel("cuda")}


# ---- the corpus ---------------------------------------------------------------------------------------------------

def candidate(ref: Reference, kind: str, slug: str) -> tuple[str, str]:
    """(kind, source) of one candidate; a rewrite that does not parse falls back to the plain kind."""
    source = MAKERS[kind](ref, slug)
    try:
        ast.parse(source)
        Candidate.from_source(source)
        return kind, source
    except (SyntaxError, TaskError):
        return "plain", plain(ref, slug)


def write(suite_dir: Path, out: Path, per_task: int, seed: int, levels: list[str], every: int = 1) -> dict:
    """Write every `every`-th task's candidates into `out` and the manifest; returns the manifest."""
    suite = discover(suite_dir)
    suite = select_levels(suite, levels) if levels else suite
    out.mkdir(parents=True, exist_ok=True)
    tasks: dict[str, list[dict]] = {}
    for st in suite.tasks[::every]:
        pid, ref = problem_id(Path(st.rel_path).name), read(st.task)
        if pid is None or not st.level.startswith("level") or ref is None:
            print(f"no candidates for {st.rel_path}: not a KernelBench problem with a forward", file=sys.stderr)
            continue
        level = st.level[len("level"):]
        for sample in range(per_task):
            kind, source = candidate(ref, choose(ref, f"{seed}:{st.name}:{sample}"),
                                     f"l{level}_p{pid}_s{sample}")
            path = out / f"level_{level}_problem_{pid}_sample_{sample}_kernel.py"
            path.write_text(source)
            op = (ref.tail_op or COPY).name if kind in ("triton", "cuda") else None
            tasks.setdefault(st.name, []).append({"sample": sample, "kind": kind, "op": op, "file": path.name})
    counts = {k: sum(c["kind"] == k for cs in tasks.values() for c in cs) for k in KINDS}
    manifest = {"suite": str(suite_dir), "per_task": per_task, "seed": seed, "every": every, "kinds": counts,
                "tasks": tasks}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path, help="KernelBench-format references (level1/, level2/, ...)")
    ap.add_argument("out", type=Path, help="where the candidates and corpus.json go")
    ap.add_argument("--per-task", type=int, default=1, help="candidates per task (8: a GRPO group)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", action="append", default=[], help="only this level (repeat for several)")
    ap.add_argument("--every", type=int, default=1, help="only every K-th task of the suite, in its order")
    args = ap.parse_args(argv)
    if args.per_task < 1 or args.every < 1:
        ap.error("--per-task and --every must be at least 1")
    try:
        manifest = write(args.suite, args.out, args.per_task, args.seed, args.level, args.every)
    except SuiteError as e:
        raise SystemExit(f"error: {e}")
    n = sum(len(c) for c in manifest["tasks"].values())
    print(f"wrote {n} candidates for {len(manifest['tasks'])} tasks to {args.out}: "
          + ", ".join(f"{k} {v}" for k, v in manifest["kinds"].items()))


if __name__ == "__main__":
    main()
