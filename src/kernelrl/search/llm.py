"""LLM backend: any server that speaks the OpenAI chat-completions API, through the official `openai` SDK.

Honours OPENAI_BASE_URL / OPENAI_API_KEY (or an explicit base URL and the name of the variable holding
the key), limits concurrent calls, retries rate limits, 5xx and timeouts with exponential backoff, counts
tokens and cost per call, and stops cleanly at a spending cap (`BudgetExceeded`).
"""
from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import openai

RETRY_STATUSES = (408, 409, 429, 500, 502, 503, 504)


class LLMError(RuntimeError):
    """An LLM call that failed for good (after retries, or at once for errors retrying cannot fix)."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal  # True: every later call would fail the same way (bad key, unknown model, bad URL)


class BudgetExceeded(RuntimeError):
    """The spending cap is reached; the loop stops starting LLM calls."""


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to call the model. Prices are in USD per million tokens."""

    model: str
    base_url: str | None = None        # None: OPENAI_BASE_URL, else the SDK's default
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None   # None: the server's default (reasoning models reject other values)
    top_p: float | None = None
    max_tokens: int | None = None      # classic models
    max_completion_tokens: int | None = None  # reasoning models (counts reasoning tokens too)
    reasoning_effort: str | None = None       # "low" | "medium" | "high" where the model supports it
    extra_body: dict = field(default_factory=dict)  # passed through, e.g. {"top_k": 20} for vLLM
    stream: bool = False
    concurrency: int = 4               # calls in flight at once
    timeout_s: float = 600.0           # per attempt
    max_retries: int = 6
    backoff_s: float = 1.0             # first retry delay; doubles each retry, with jitter
    max_backoff_s: float = 60.0
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LLMConfig":
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown LLM settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)


@dataclass(frozen=True)
class Completion:
    """One finished call: the reply text, token counts, its cost (USD) and how long it took (s)."""

    text: str
    model: str
    tokens_in: int
    tokens_out: int
    cost_usd: float
    seconds: float
    finish_reason: str = ""
    attempts: int = 1
    reasoning: str = ""  # reasoning text, when the server returns it separately
    usage_estimated: bool = False  # the server sent no usage; counts are estimated from characters

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Completion":
        return cls(**d)


class Budget:
    """A thread-safe spending cap in USD; `None` means no cap."""

    def __init__(self, limit_usd: float | None, spent_usd: float = 0.0):
        self.limit_usd = limit_usd
        self._spent = spent_usd
        self._lock = threading.Lock()

    @property
    def spent_usd(self) -> float:
        with self._lock:
            return self._spent

    def add(self, usd: float) -> None:
        with self._lock:
            self._spent += usd

    @property
    def exhausted(self) -> bool:
        return self.limit_usd is not None and self.spent_usd >= self.limit_usd

    def check(self) -> None:
        """Raise BudgetExceeded when the cap is reached."""
        if self.exhausted:
            raise BudgetExceeded(f"spent ${self.spent_usd:.4f} of the ${self.limit_usd:.4f} budget")


def cost_usd(tokens_in: int, tokens_out: int, price_in_per_mtok: float, price_out_per_mtok: float) -> float:
    """Cost of one call in USD from token counts and prices in USD per million tokens."""
    return (tokens_in * price_in_per_mtok + tokens_out * price_out_per_mtok) / 1e6


class LLMClient:
    """Chat completions with a concurrency limit, retries, cost accounting and a budget."""

    def __init__(self, config: LLMConfig, budget: Budget | None = None,
                 on_retry: Callable[[str], None] | None = None):
        self.config = config
        self.budget = budget or Budget(None)
        self.on_retry = on_retry  # told why and how long before each retry
        key = os.environ.get(config.api_key_env)
        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or None
        if not key:
            if base_url is None:
                raise LLMError(f"no API key: set {config.api_key_env} (or pass --api-key-env NAME naming the "
                               "variable that holds it), or point --base-url at a server that needs none",
                               fatal=True)
            key = "none"  # local servers (vLLM, SGLang, llama.cpp) accept any key
        self.base_url = base_url
        # Retries are ours (counted, logged, jittered); the SDK's are off.
        self._client = openai.OpenAI(api_key=key, base_url=base_url, timeout=config.timeout_s, max_retries=0)
        self._slots = threading.Semaphore(max(1, config.concurrency))
        self._stream_usage = True  # ask for usage in streams until the server says it cannot
        self._lock = threading.Lock()
        self.calls = 0
        self.retries = 0
        self.tokens_in = 0
        self.tokens_out = 0

    def complete(self, messages: list[dict]) -> Completion:
        """One chat completion; raises BudgetExceeded before calling when the cap is reached, LLMError on failure."""
        self.budget.check()
        with self._slots:
            self.budget.check()
            done = self._with_retries(messages)
        with self._lock:
            self.calls += 1
            self.tokens_in += done.tokens_in
            self.tokens_out += done.tokens_out
        self.budget.add(done.cost_usd)
        return done

    def close(self) -> None:
        self._client.close()

    def _with_retries(self, messages: list[dict]) -> Completion:
        cfg = self.config
        for attempt in range(1, cfg.max_retries + 2):
            t0 = time.perf_counter()
            try:
                text, reasoning, usage, finish, model = self._call(messages)
            except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError,
                    openai.RateLimitError, openai.APIStatusError) as e:
                status = getattr(e, "status_code", None)
                retriable = status is None or status in RETRY_STATUSES or status >= 500
                if not retriable:
                    raise LLMError(_explain(e, self.base_url, cfg.model), fatal=status in (401, 403, 404)) from e
                if attempt > cfg.max_retries:
                    raise LLMError(f"{_explain(e, self.base_url, cfg.model)} (gave up after {attempt} attempts)") from e
                with self._lock:
                    self.retries += 1
                delay = self._delay(attempt, e)
                if self.on_retry:
                    self.on_retry(f"LLM attempt {attempt} failed ({status or type(e).__name__}); "
                                  f"retrying in {delay:.1f}s")
                time.sleep(delay)
                continue
            seconds = time.perf_counter() - t0
            estimated = usage is None
            if estimated:
                # No usage from the server: about 4 characters per token.
                tokens_in = sum(len(str(m.get("content", ""))) for m in messages) // 4
                tokens_out = (len(text) + len(reasoning)) // 4
            else:
                tokens_in, tokens_out = usage
            return Completion(text=text, model=model or cfg.model, tokens_in=tokens_in, tokens_out=tokens_out,
                              cost_usd=cost_usd(tokens_in, tokens_out, cfg.price_in_per_mtok, cfg.price_out_per_mtok),
                              seconds=seconds, finish_reason=finish or "", attempts=attempt, reasoning=reasoning,
                              usage_estimated=estimated)
        raise AssertionError("unreachable")

    def _request(self, messages: list[dict]) -> dict:
        cfg = self.config
        kw: dict = {"model": cfg.model, "messages": messages}
        for name in ("temperature", "top_p", "max_tokens", "max_completion_tokens", "reasoning_effort"):
            value = getattr(cfg, name)
            if value is not None:
                kw[name] = value
        if cfg.extra_body:
            kw["extra_body"] = dict(cfg.extra_body)
        return kw

    def _call(self, messages: list[dict]):
        """(text, reasoning, (tokens_in, tokens_out) or None, finish_reason, model) of one attempt."""
        kw = self._request(messages)
        if not self.config.stream:
            r = self._client.chat.completions.create(**kw)
            if not r.choices:
                raise LLMError(f"the server at {self.base_url} answered with no choices")
            msg = r.choices[0].message
            reasoning = getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None) or ""
            usage = (r.usage.prompt_tokens, r.usage.completion_tokens) if r.usage else None
            return msg.content or "", reasoning, usage, r.choices[0].finish_reason, r.model
        text, reasoning, usage, finish, model = [], [], None, "", ""
        if self._stream_usage:
            try:
                stream = self._client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                              **kw)
            except openai.BadRequestError as e:
                if "stream_options" not in str(e):
                    raise
                self._stream_usage = False  # an older server: stream without usage, estimate it
        if not self._stream_usage:
            stream = self._client.chat.completions.create(stream=True, **kw)
        with stream:
            for chunk in stream:
                model = chunk.model or model
                if chunk.usage:
                    usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                for choice in chunk.choices or ():
                    delta = choice.delta
                    if delta is not None:
                        text.append(delta.content or "")
                        reasoning.append(getattr(delta, "reasoning_content", None) or "")
                    finish = choice.finish_reason or finish
        return "".join(text), "".join(reasoning), usage, finish, model

    def _delay(self, attempt: int, error: Exception) -> float:
        """Seconds before the next attempt: the server's Retry-After when given, else exponential with jitter."""
        response = getattr(error, "response", None)
        if response is not None:
            headers = response.headers
            for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
                try:
                    value = float(headers.get(name, ""))
                    return min(value * scale, self.config.max_backoff_s)
                except ValueError:
                    pass
        base = self.config.backoff_s * 2 ** (attempt - 1)
        return min(base * (0.5 + random.random()), self.config.max_backoff_s)


def _explain(e: Exception, base_url: str | None, model: str) -> str:
    """An API error as a sentence that says what to check."""
    where = base_url or "the OpenAI API"
    status = getattr(e, "status_code", None)
    detail = str(getattr(e, "message", "") or e)[:300]
    if isinstance(e, openai.APIConnectionError):
        return f"cannot reach {where}: {detail}; check --base-url / OPENAI_BASE_URL and that the server is up"
    if status == 401:
        return f"{where} refused the API key (401); check the variable named by --api-key-env"
    if status == 403:
        return f"{where} forbids this request (403): {detail}"
    if status == 404:
        return (f"{where} has no model {model!r} or no chat-completions route (404): {detail}; "
                "check --model and --base-url")
    if status == 400:
        return f"{where} rejected the request (400): {detail}; check the model's parameters (e.g. temperature, " \
               "max_tokens vs max_completion_tokens, reasoning_effort)"
    return f"{where} failed ({status or type(e).__name__}): {detail}"
