"""Pull the candidate program out of an LLM reply: the code block that defines `ModelNew`.

Replies are messy: several fenced blocks (a CUDA source, a test, the model), fences left open when the
reply hit its token limit, no fences at all, reasoning wrapped in <think> tags. A reply without usable code
is a `ParsedReply` with `code=None` and a reason, never an exception.
"""
from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field

SECTIONS = ("Performance Analysis", "Algorithm Design", "Code Implementation")

_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL | re.IGNORECASE)
# An opening fence: ``` or ~~~ (3+), optional language tag, then the rest of the line.
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*$", re.MULTILINE)
_DEFINES_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}


@dataclass(frozen=True)
class ParsedReply:
    """The code found in a reply (None when there is none), why not, and the reply's named sections."""

    code: str | None
    error: str = ""
    sections: dict = field(default_factory=dict)  # section title -> its text (without the code)
    truncated: bool = False  # the code block was never closed

    @property
    def ok(self) -> bool:
        return self.code is not None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ParsedReply":
        return cls(**d)


@dataclass(frozen=True)
class _Block:
    tag: str
    body: str
    closed: bool


def parse_reply(reply: str | None) -> ParsedReply:
    """Find the program defining ModelNew in an LLM reply; never raises."""
    if not reply or not reply.strip():
        return ParsedReply(code=None, error="the reply is empty")
    text = _THINK.sub("", reply)
    if not text.strip():
        return ParsedReply(code=None, error="the reply holds only reasoning (<think>…</think>) and no answer; "
                                            "raise the token limit so the model can finish")
    sections = _sections(text)
    blocks = _blocks(text)
    if blocks:
        code, closed = _choose(blocks)
        if code is None:
            tags = sorted({b.tag or "untagged" for b in blocks})
            return ParsedReply(code=None, sections=sections,
                               error=f"none of the {len(blocks)} code blocks ({', '.join(tags)}) defines "
                                     "`class ModelNew`; put the whole program in one ```python block")
        return ParsedReply(code=_tidy(code), sections=sections, truncated=not closed)
    code = _unfenced(text)
    if code is None:
        return ParsedReply(code=None, sections=sections,
                           error="the reply has no code block and no `class ModelNew`; answer with the whole "
                                 "program in a ```python block")
    return ParsedReply(code=_tidy(code), sections=sections)


def _blocks(text: str) -> list[_Block]:
    """Every fenced block, in order; an unterminated last fence runs to the end of the reply."""
    blocks: list[_Block] = []
    pos = 0
    while True:
        m = _FENCE_OPEN.search(text, pos)
        if not m:
            return blocks
        fence, tag = m.group(1), m.group(2).lower()
        start = m.end() + 1
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        c = close.search(text, start)
        if c is None:
            blocks.append(_Block(tag, text[start:], closed=False))
            return blocks
        blocks.append(_Block(tag, text[start:c.start()], closed=True))
        pos = c.end()


def _choose(blocks: list[_Block]) -> tuple[str | None, bool]:
    """The last block that defines ModelNew, preferring python-tagged ones that parse."""
    defining = [b for b in blocks if _DEFINES_MODELNEW.search(b.body)]
    if not defining:
        return None, True
    ranked = sorted(enumerate(defining),
                    key=lambda ib: (ib[1].tag in _PYTHON_TAGS, _parses(ib[1].body), ib[0]))
    best = ranked[-1][1]
    return best.body, best.closed


def _unfenced(text: str) -> str | None:
    """Code written without fences: the longest tail-trimmed span from an import/class line that parses."""
    if not _DEFINES_MODELNEW.search(text):
        return None
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if re.match(r"(import |from \S+ import |class |@|def )", ln)]
    for s in starts:
        # Prose after the code is common; drop trailing lines until the rest parses.
        for e in range(len(lines), s, -1):
            chunk = "\n".join(lines[s:e])
            if _DEFINES_MODELNEW.search(chunk) and _parses(chunk):
                return chunk
    # Nothing parses: hand back from the first code-looking line; the evaluator reports the syntax error.
    return "\n".join(lines[starts[0]:]) if starts else None


def _sections(text: str) -> dict:
    """Text under each of the three required headings (markdown '#', bold, or 'N.' styles)."""
    found: dict[str, tuple[int, int]] = {}
    for title in SECTIONS:
        m = re.search(rf"^[ \t]*(?:#+\s*|\*\*|\d+[.)]\s*)*{re.escape(title)}\b[^\n]*$", text,
                      re.MULTILINE | re.IGNORECASE)
        if m:
            found[title] = (m.start(), m.end())
    ordered = sorted(found.items(), key=lambda kv: kv[1][0])
    out = {}
    for i, (title, (_, end)) in enumerate(ordered):
        stop = ordered[i + 1][1][0] if i + 1 < len(ordered) else len(text)
        body = text[end:stop]
        fence = re.search(r"^[ \t]*(```|~~~)", body, re.MULTILINE)
        out[title] = (body[:fence.start()] if fence else body).strip()
    return out


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False


def _tidy(code: str) -> str:
    return code.strip("\n").rstrip() + "\n"
