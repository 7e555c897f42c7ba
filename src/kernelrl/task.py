"""Tasks (reference programs in KernelBench format) and Candidates (source text that claims to be faster).

Nothing here executes task or candidate code: files are validated by parsing them (AST), so the caller's
process never runs a line of either. Metadata is read from a literal `KERNELRL = {...}` dict in the
reference, or from a sidecar `NAME.toml` beside it.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import sys
import tokenize
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LANGUAGES = ("python", "cuda", "cpp", "triton")
# Precision policies. "strict": tight fp32 tolerances, reduced-precision math rejected. "kernelbench":
# KernelBench's atol = rtol = 1e-2, reduced-precision math (TF32, autocast, bf16/fp16 compute) allowed and
# reported as a warning. Exploits (constant, cached or lazy outputs) are rejected under both.
POLICIES = ("strict", "kernelbench")
POLICY_HELP = ("precision policy: strict (fp32 held to ~1e-4, reduced-precision math refused) or kernelbench "
               "(KernelBench's atol = rtol = 1e-2; TF32, autocast and bf16/fp16 compute allowed and flagged); a "
               "task's own setting wins")


class TaskError(ValueError):
    """A reference or candidate file that kernelrl cannot use, with what to do about it."""


@dataclass(frozen=True)
class TaskMeta:
    """Optional per-task settings; `None` means "use the evaluator's default"."""

    description: str = ""
    dtype: str | None = None
    atol: float | None = None
    rtol: float | None = None
    # Policies a candidate must obey, e.g. "own_kernels" (the work must run in the candidate's own kernels).
    policies: tuple[str, ...] = ()
    # Speedup above which a result is re-measured in a fresh worker before it is believed.
    suspicious_speedup: float | None = None
    # Inputs whose values are not random data (e.g. index tensors): their positions, never re-drawn.
    fixed_inputs: tuple[int, ...] = ()
    # Precision policy (POLICIES) this task is judged under, whatever the evaluator's default.
    policy: str | None = None

    def __post_init__(self):
        if self.policy is not None:
            try:
                check_policy(self.policy)
            except ValueError as e:
                raise TaskError(f"task metadata: {e}") from None

    @classmethod
    def from_dict(cls, d: dict) -> "TaskMeta":
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise TaskError(f"unknown task metadata keys {sorted(unknown)}; known keys: {sorted(known)}")
        d = dict(d)
        for key in ("policies", "fixed_inputs"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass(frozen=True)
class Task:
    """A reference program: `Model`, `get_inputs()` and `get_init_inputs()` in one Python source."""

    name: str
    source: str
    meta: TaskMeta = field(default_factory=TaskMeta)
    level: str | None = None
    path: str | None = None

    @property
    def digest(self) -> str:
        """Content hash of the source and metadata (16 hex digits)."""
        payload = self.source + json.dumps(asdict(self.meta), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @classmethod
    def from_source(cls, source: str, name: str = "task", meta: TaskMeta | None = None,
                    level: str | None = None, path: str | None = None) -> "Task":
        tree = _parse(source, name)
        defined = _top_level_names(tree)
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in defined]
        if missing:
            raise TaskError(f"{name}: a reference must define {', '.join(missing)} "
                            "(KernelBench format: class Model(nn.Module), get_inputs(), get_init_inputs())")
        if meta is None:
            meta = _literal_meta(tree, name)
        if not meta.description:
            doc = ast.get_docstring(tree)
            if doc:
                meta = replace(meta, description=doc.strip().splitlines()[0])
        return cls(name=name, source=source, meta=meta, level=level, path=path)

    @classmethod
    def from_file(cls, path: str | Path, level: str | None = None) -> "Task":
        p = Path(path)
        source = _read(p, "reference")
        meta = None
        sidecar = p.with_suffix(".toml")
        if sidecar.exists():
            try:
                meta = TaskMeta.from_dict(tomllib.loads(sidecar.read_text()))
            except (tomllib.TOMLDecodeError, TypeError) as e:
                raise TaskError(f"{sidecar}: cannot read task metadata: {e}") from e
        task = cls.from_source(source, name=p.stem, meta=meta, level=level, path=str(p))
        if meta is not None and not task.meta.description:
            doc = ast.get_docstring(_parse(source, p.stem))
            if doc:
                task = replace(task, meta=replace(task.meta, description=doc.strip().splitlines()[0]))
        return task

    def to_dict(self) -> dict:
        d = asdict(self)
        d["meta"] = asdict(self.meta)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        return cls(name=d["name"], source=d["source"], meta=TaskMeta.from_dict(d.get("meta", {})),
                   level=d.get("level"), path=d.get("path"))


@dataclass(frozen=True)
class Candidate:
    """Source text defining `ModelNew`, in plain PyTorch, C++/CUDA via load_inline, or Triton."""

    source: str
    name: str = "candidate"
    language: str = "python"

    @property
    def digest(self) -> str:
        """Content hash of the source (16 hex digits); builds are cached under it."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @classmethod
    def from_source(cls, source: str, name: str = "candidate") -> "Candidate":
        try:
            tree = ast.parse(source)
        except SyntaxError:
            # Not a usage error: the evaluator reports it as a compile_error verdict with the location.
            return cls(source=source, name=name, language=detect_language(source))
        if "ModelNew" not in _top_level_names(tree):
            raise TaskError(f"{name}: a candidate must define `class ModelNew(nn.Module)` "
                            "taking the same init arguments as the reference's Model")
        return cls(source=source, name=name, language=detect_language(source))

    @classmethod
    def from_file(cls, path: str | Path) -> "Candidate":
        p = Path(path)
        return cls.from_source(_read(p, "candidate"), name=p.stem)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Candidate":
        return cls(**d)


def identity_candidate(task: Task) -> Candidate:
    """The reference itself as a candidate: the name `Model` renamed `ModelNew` wherever code uses it (not in
    strings, comments or attribute names), so it computes exactly what the reference does."""
    lines = task.source.splitlines(keepends=True)
    spots, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(task.source).readline):
        if tok.type == tokenize.NAME and tok.string == "Model" and not (prev and prev.string == "."):
            spots.append(tok.start)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    for row, col in reversed(spots):  # right to left, so earlier positions on a line stay valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "ModelNew" + line[col + len("Model"):]
    return Candidate.from_source("".join(lines), name=f"{task.name}_identity")


def check_policy(policy: str) -> str:
    """`policy` if it names a precision policy, else a ValueError naming the choices."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    return policy


def detect_language(source: str) -> str:
    """Best guess at how a candidate builds: 'cuda', 'cpp', 'triton' or 'python'."""
    if "load_inline" in source or "cpp_extension" in source:
        return "cuda" if ("cuda_sources" in source or "__global__" in source) else "cpp"
    if "triton.jit" in source or ("@jit" in source and "triton" in source):
        return "triton"
    return "python"


def _read(p: Path, what: str) -> str:
    if not p.exists():
        raise TaskError(f"{p}: no such {what} file")
    if p.is_dir():
        raise TaskError(f"{p}: is a directory; expected a {what} .py file")
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{p}: cannot read {what} file: {e}") from e


def _parse(source: str, name: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise TaskError(f"{name}: the reference has a syntax error at line {e.lineno}: {e.msg}") from e


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            names.update(_top_level_names(ast.Module(body=node.body, type_ignores=[])))
    return names


def _literal_meta(tree: ast.Module, name: str) -> TaskMeta:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KERNELRL"
                                                 for t in node.targets)):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as e:
                raise TaskError(f"{name}: KERNELRL metadata must be a literal dict: {e}") from e
            if not isinstance(value, dict):
                raise TaskError(f"{name}: KERNELRL metadata must be a dict")
            return TaskMeta.from_dict(value)
    return TaskMeta()
