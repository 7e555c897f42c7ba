"""Turn a failure while importing or building a candidate into a status and a message worth reading.

Compiler output is trimmed to the error lines and a little context, with long build paths shortened, so a
human or an LLM can fix the code from it.
"""
from __future__ import annotations

import re
import subprocess
import traceback

_BUILD_MARKERS = ("Error building extension", "error: command", "nvcc fatal", "ninja: build stopped",
                  "CompilationError", "compilation failed", "undefined symbol", "CUDA_HOME")
MAX_LINES = 40
MAX_CHARS = 4000


def classify(e: BaseException, candidate_path: str) -> tuple[str, str]:
    """('compile_error' | 'runtime_error', trimmed message) for an exception raised by candidate code."""
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, subprocess.CalledProcessError) and e.output:
        text += "\n" + (e.output.decode(errors="replace") if isinstance(e.output, bytes) else str(e.output))
    is_build = (type(e).__name__ in ("CompilationError", "CalledProcessError", "ImportError")
                or any(m in text for m in _BUILD_MARKERS))
    if is_build:
        return "compile_error", trim_compiler_output(text)
    return "runtime_error", _candidate_traceback(e, candidate_path)


def trim_compiler_output(text: str) -> str:
    """The error lines of a compiler log with two lines of context, paths shortened, bounded in size."""
    lines = [_shorten(l) for l in text.splitlines()]
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if re.search(r"\berror\b|fatal|undefined|Error building|CompilationError|expected|not declared", line,
                     re.IGNORECASE):
            keep.update(range(max(0, i - 2), min(len(lines), i + 3)))
    chosen = [lines[i] for i in sorted(keep)] or lines[-MAX_LINES:]
    out, seen = [], set()
    for line in chosen:  # nvcc repeats the same error for every instantiation
        if line not in seen:
            out.append(line)
            seen.add(line)
    msg = "\n".join(out[:MAX_LINES])
    if len(out) > MAX_LINES:
        msg += f"\n... ({len(out) - MAX_LINES} more lines)"
    return msg[:MAX_CHARS]


def _shorten(line: str) -> str:
    line = re.sub(r"/[\w./-]*/(torch_extensions|kernelrl|site-packages)/[\w./-]*/([\w.-]+)", r"\2", line)
    return re.sub(r"\s+", " ", line).strip() if len(line) > 300 else line.rstrip()


def _candidate_traceback(e: BaseException, candidate_path: str) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    own = [f for f in frames if f.filename == candidate_path]
    where = f" (candidate line {own[-1].lineno}: {own[-1].line})" if own else ""
    return f"{type(e).__name__}: {e}{where}"[:MAX_CHARS]
