"""The contrastive prompt: reference, the verdicts so far, earlier variants with measured speedups, recent
failures, rules.

`build_messages(task, exemplars, failures, config, outcomes)` is a pure function returning chat messages, shared
by the inference-time loop and by training (which builds the same prompt for its rollouts).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from kernelrl.search.exemplars import Exemplar
from kernelrl.search.parse import SECTIONS
from kernelrl.task import Task
from kernelrl.verdict import Verdict

TARGETS = {
    "any": "Use whatever is fastest: CUDA C++ through torch.utils.cpp_extension.load_inline, Triton, "
           "or better PyTorch.",
    "cuda": "Write the hot path as your own CUDA kernels, compiled with torch.utils.cpp_extension.load_inline.",
    "triton": "Write the hot path as your own Triton kernels (@triton.jit).",
    "pytorch": "Use PyTorch operations only (no custom kernels).",
}

RULES = (
    "`ModelNew` takes the same constructor arguments as `Model`, accepts the same inputs and returns outputs "
    "of the same shapes, dtypes and values (within tolerance).",
    "Every call must compute its result from that call's inputs: no caching of outputs or inputs across calls, "
    "no work deferred to a later call, no lazy or view tensors standing in for results.",
    "No extra CUDA streams, threads or processes: all work runs on the current stream and is finished when "
    "`forward` returns.",
    "Keep the precision: no lower-precision dtypes, TF32 or fp16 accumulation where the reference computes "
    "in fp32; do not change global backend flags.",
    "Do not read or write files, the network or the environment, and do not touch timers, the test "
    "harness or the reference `Model`.",
    "Parameters and buffers keep the reference's names and shapes so the same initialisation applies.",
)


@dataclass(frozen=True)
class Failure:
    """A recent candidate that did not pass: its status and the evaluator's reason (hack class when rejected)."""

    status: str
    message: str
    hacks: tuple[str, ...] = ()
    flag_messages: tuple[str, ...] = ()
    proposer: str = ""
    candidate_id: int | None = None

    @classmethod
    def from_verdict(cls, verdict: Verdict, proposer: str = "", candidate_id: int | None = None) -> "Failure":
        rejecting = [f for f in verdict.flags if f.severity == "reject"]
        return cls(status=verdict.status, message=verdict.message, hacks=verdict.hacks,
                   flag_messages=tuple(f"{f.check}: {f.message}" for f in rejecting), proposer=proposer,
                   candidate_id=candidate_id)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Failure":
        d = dict(d)
        d["hacks"] = tuple(d.get("hacks", ()))
        d["flag_messages"] = tuple(d.get("flag_messages", ()))
        return cls(**d)


@dataclass(frozen=True)
class Outcome:
    """One judged candidate as the prompt lists it: its verdict's status and speedup (×), or why it failed."""

    candidate_id: int
    proposer: str
    status: str
    speedup: float | None = None
    message: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        return cls(**d)


@dataclass(frozen=True)
class PromptConfig:
    """How a prompt is put together; lengths are in characters."""

    target: str = "any"             # one of TARGETS
    max_failures: int = 3
    max_failure_chars: int = 600    # per failure message; tracebacks keep their last lines
    max_exemplar_chars: int = 12000  # per exemplar source; longer ones are cut in the middle
    max_outcome_chars: int = 160    # per failed candidate in the list of verdicts
    extra_instructions: str = ""

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"unknown prompt target {self.target!r}; one of {', '.join(TARGETS)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PromptConfig":
        return cls(**d)


SYSTEM = ("You are an expert in GPU performance engineering (CUDA, Triton, PyTorch internals). You rewrite "
          "PyTorch programs into faster programs that compute the same results, and you explain why they are faster.")


def build_messages(task: Task, exemplars: list[Exemplar], failures: list[Failure],
                   config: PromptConfig = PromptConfig(), outcomes: list[Outcome] = (),
                   outcomes_left_out: int = 0) -> list[dict]:
    """Chat messages (system + user) asking for a faster ModelNew for the task."""
    parts = [
        "Make this PyTorch program faster. The reference defines `Model`, `get_inputs()` and "
        "`get_init_inputs()`:",
        _fenced(task.source),
    ]
    if task.meta.description:
        parts.insert(0, f"Task `{task.name}`: {task.meta.description}")
    if outcomes:
        parts.append(_outcome_section(outcomes, outcomes_left_out, config))
    if exemplars:
        parts.append(_exemplar_section(exemplars, config))
    if failures:
        parts.append(_failure_section(failures[-config.max_failures:], config))
    parts.append("Rules (a candidate that breaks one is rejected, however fast):\n"
                 + "\n".join(f"{i}. {r}" for i, r in enumerate(RULES, 1)))
    parts.append(TARGETS[config.target])
    if config.extra_instructions:
        parts.append(config.extra_instructions)
    parts.append(_answer_format(bool(exemplars)))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def prompt_hash(messages: list[dict]) -> str:
    """Content hash of a message list (16 hex digits)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def _exemplar_section(exemplars: list[Exemplar], config: PromptConfig) -> str:
    lines = ["Earlier variants of this program, measured on the target device (speedup = reference time / "
             "variant time; higher is better), from slowest to fastest:"]
    for i, e in enumerate(sorted(exemplars, key=lambda e: e.speedup), 1):
        which = f" (candidate {e.candidate_id})" if e.candidate_id is not None else ""
        lines.append(f"### Variant {i}{which}: speedup {e.speedup:.3f}x")
        lines.append(_fenced(_cut_middle(e.source, config.max_exemplar_chars)))
    best = max(e.speedup for e in exemplars)
    lines.append(f"Compare the variants: find what makes the faster ones faster, then write a program "
                 f"faster than the best one ({best:.3f}x).")
    return "\n\n".join(lines)


def _outcome_section(outcomes: list[Outcome], left_out: int, config: PromptConfig) -> str:
    lines = ["Every candidate judged so far, in the order judged (speedup = reference time / candidate time; "
             "a failed candidate shows why it failed):"]
    if left_out:
        lines.append(f"- ({left_out} more, neither among the fastest nor the most recent, not listed)")
    for o in outcomes:
        if o.status == "ok" and o.speedup is not None:
            verdict = f"{o.speedup:.3f}x"
        else:
            reason = _cut_tail(_gist(o.status, o.message), config.max_outcome_chars)
            verdict = o.status + (f": {reason}" if reason else "")
        lines.append(f"- candidate {o.candidate_id} ({o.proposer}): {verdict}")
    return "\n".join(lines)


def _gist(status: str, message: str) -> str:
    """The line of an error message that names the cause: a traceback's last line, else the first error line."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    if status == "runtime_error":
        return lines[-1]
    return next((ln for ln in lines if "error" in ln.lower()), lines[0])


def _failure_section(failures: list[Failure], config: PromptConfig) -> str:
    lines = ["Recent attempts that failed (avoid repeating these mistakes):"]
    for f in failures:
        head = f"- {f.status}"
        if f.candidate_id is not None:
            head = f"- candidate {f.candidate_id} ({f.proposer or 'unknown'}): {f.status}"
        if f.hacks:
            head += f" (rejected as {', '.join(f.hacks)})"
        body = _cut_tail(f.message, config.max_failure_chars)
        extra = [m for m in f.flag_messages if m not in f.message][:2]
        lines.append(head + (f": {body}" if body else ""))
        lines.extend(f"  {_cut_tail(m, config.max_failure_chars // 2)}" for m in extra)
    return "\n".join(lines)


def _answer_format(has_exemplars: bool) -> str:
    analysis = ("why the faster variants above are faster and where time still goes"
                if has_exemplars else "where the reference spends its time and what bounds it")
    return ("Answer with exactly these three sections:\n"
            f"1. **{SECTIONS[0]}**: {analysis}.\n"
            f"2. **{SECTIONS[1]}**: the algorithm and optimisations you will use, and why they are faster.\n"
            f"3. **{SECTIONS[2]}**: one complete, self-contained ```python block defining `class "
            f"ModelNew(nn.Module)` with every import and kernel it needs (it runs on its own, without the "
            "reference file).")


def _fenced(source: str) -> str:
    return f"```python\n{source.rstrip()}\n```"


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n# ... ({len(text) - 2 * half} characters omitted) ...\n{text[-half:]}"


def _cut_tail(text: str, limit: int) -> str:
    """Keep the end of long messages: compiler errors and tracebacks put the cause last."""
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    if len(text) <= limit:
        return text
    return "…" + text[-limit:]
