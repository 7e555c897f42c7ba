"""Proposers that need no LLM: honest rewrites of a program that seed the archive with measured baselines.

Each proposer wraps a base class (the reference `Model`, or an earlier candidate's `ModelNew`, renamed) in a
new `ModelNew` subclass, so parameter names, shapes and initialisation stay those of the base. Every one
does the full work in every call: the CUDA-graph wrapper copies each call's inputs into its captured
buffers and returns a copy of the output; channels_last converts inputs and outputs each call.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable

from kernelrl.task import Task

BASE_NAME = "_ModelNewBase"

_HEADER = "\n\n# ---- kernelrl proposer: {name} ----\nimport torch as _torch\n\n\n"

_HELPERS = '''def _kernelrl_map(fn, obj):
    """Apply fn to every tensor in a (nested) tuple/list output."""
    if isinstance(obj, _torch.Tensor):
        return fn(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_kernelrl_map(fn, o) for o in obj)
    return obj


'''

_REFERENCE = '''class ModelNew({base}):
    """The reference program, unchanged: the archive's baseline."""
'''

_COMPILE = '''class ModelNew({base}):
    """{base} under torch.compile(mode={mode!r})."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernelrl_forward = _torch.compile(super().forward, mode={mode!r}, dynamic=False)

    def forward(self, *args, **kwargs):
{body}'''

_COMPILE_BODY = "        return self._kernelrl_forward(*args, **kwargs)\n"
# CUDA-graph modes reuse output memory on the next call: mark each call and hand back copies.
_COMPILE_GRAPH_BODY = ("        _torch.compiler.cudagraph_mark_step_begin()\n"
                       "        return _kernelrl_map(_torch.clone, self._kernelrl_forward(*args, **kwargs))\n")

_CUDA_GRAPH = '''class ModelNew({base}):
    """{base} replayed from a CUDA graph per input signature; inputs are copied in and outputs copied out
    on every call, so each call computes its own result."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernelrl_graphs = {{}}

    def forward(self, *args):
        key = tuple((tuple(a.shape), a.dtype, str(a.device), a.stride()) if isinstance(a, _torch.Tensor)
                    else ("value", repr(a)) for a in args)
        entry = self._kernelrl_graphs.get(key)
        if entry is None:
            entry = self._kernelrl_graphs[key] = self._kernelrl_capture(args)
        graph, static_in, static_out = entry
        for buf, a in zip(static_in, args):
            if isinstance(a, _torch.Tensor):
                buf.copy_(a)
        graph.replay()
        return _kernelrl_map(_torch.clone, static_out)

    def _kernelrl_capture(self, args):
        static_in = [a.clone() if isinstance(a, _torch.Tensor) else a for a in args]
        # Warm-up runs belong on a side stream before capture (PyTorch's documented capture recipe).
        side = _torch.cuda.Stream()
        side.wait_stream(_torch.cuda.current_stream())
        with _torch.no_grad(), _torch.cuda.stream(side):
            for _ in range(3):
                super().forward(*static_in)
        _torch.cuda.current_stream().wait_stream(side)
        graph = _torch.cuda.CUDAGraph()
        with _torch.no_grad(), _torch.cuda.graph(graph):
            static_out = super().forward(*static_in)
        return graph, static_in, static_out
'''

_CHANNELS_LAST = '''class ModelNew({base}):
    """{base} with weights and 4-D inputs in channels_last layout; outputs converted back every call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.to(memory_format=_torch.channels_last)

    def forward(self, *args):
        args = [a.contiguous(memory_format=_torch.channels_last)
                if isinstance(a, _torch.Tensor) and a.dim() == 4 else a for a in args]
        out = super().forward(*args)
        return _kernelrl_map(lambda t: t.contiguous(), out)
'''

_CUDNN_BENCHMARK = '''class ModelNew({base}):
    """{base} with cuDNN autotuning of convolution algorithms (precision settings untouched)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _torch.backends.cudnn.benchmark = True
'''


@dataclass(frozen=True)
class Proposer:
    """A named rewrite: `template` is formatted with the base class name (and the compile mode)."""

    name: str
    template: str
    cuda_only: bool = False
    needs: Callable[[Task], bool] = lambda task: True
    mode: str | None = None
    body: str = ""
    wraps_candidates: bool = True  # can also wrap an earlier candidate (not only the reference)

    def applies(self, task: Task, device: str) -> bool:
        """Whether this proposer makes sense for the task on the device ("cpu", "cuda", "cuda:N")."""
        return (not self.cuda_only or device.startswith("cuda")) and self.needs(task)

    def propose(self, task: Task) -> str:
        """A candidate source built on the task's reference `Model` (its input functions left out)."""
        return self._emit(_without_input_functions(task.source), "Model")

    def propose_on(self, candidate_source: str) -> str:
        """A candidate source built on an earlier candidate's `ModelNew` (renamed so it can be subclassed)."""
        if not self.wraps_candidates:
            raise ValueError(f"proposer {self.name} only applies to the reference")
        renamed = re.sub(r"\bModelNew\b", BASE_NAME, candidate_source)
        return self._emit(renamed, BASE_NAME)

    def _emit(self, source: str, base: str) -> str:
        cls = self.template.format(base=base, mode=self.mode, body=self.body)
        helpers = _HELPERS if "_kernelrl_map" in cls else ""
        return source.rstrip() + "\n" + _HEADER.format(name=self.name) + helpers + cls


def _without_input_functions(source: str) -> str:
    """The reference without get_inputs/get_init_inputs: inputs always come from the task, never a candidate."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(first - 1, node.end_lineno))
    return "".join(ln for i, ln in enumerate(lines) if i not in drop)


def _has_conv(task: Task) -> bool:
    return re.search(r"\bconv(_transpose)?[123]d\b|\bConv(Transpose)?[123]d\b", task.source, re.IGNORECASE) is not None


PROPOSERS: dict[str, Proposer] = {p.name: p for p in (
    Proposer("reference", _REFERENCE, wraps_candidates=False),
    Proposer("compile", _COMPILE, mode="default", body=_COMPILE_BODY),
    Proposer("compile-max-autotune", _COMPILE, mode="max-autotune-no-cudagraphs", body=_COMPILE_BODY,
             cuda_only=True),
    Proposer("compile-reduce-overhead", _COMPILE, mode="reduce-overhead", body=_COMPILE_GRAPH_BODY, cuda_only=True),
    Proposer("cuda-graph", _CUDA_GRAPH, cuda_only=True),
    Proposer("channels-last", _CHANNELS_LAST, needs=_has_conv),
    Proposer("cudnn-benchmark", _CUDNN_BENCHMARK, cuda_only=True, needs=_has_conv),
)}

DEFAULT_PROPOSERS = tuple(PROPOSERS)
# Wrappers worth trying on the best LLM candidate at the end of a run.
POLISHERS = ("cuda-graph", "compile")


def resolve(names: list[str] | tuple[str, ...] | None) -> list[Proposer]:
    """Proposers by name (None: all); unknown names raise ValueError listing the known ones."""
    if names is None:
        return list(PROPOSERS.values())
    unknown = [n for n in names if n not in PROPOSERS]
    if unknown:
        raise ValueError(f"unknown proposer(s) {', '.join(unknown)}; known: {', '.join(PROPOSERS)}")
    return [PROPOSERS[n] for n in names]
