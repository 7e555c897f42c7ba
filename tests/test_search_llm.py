"""The LLM backend against a real OpenAI-compatible HTTP server on localhost."""
import pytest

from kernelrl.search.llm import Budget, BudgetExceeded, LLMClient, LLMConfig, LLMError
from openai_stub_server import StubOpenAI

MESSAGES = [{"role": "user", "content": "make it faster"}]


def client(stub, monkeypatch, **kw) -> LLMClient:
    monkeypatch.setenv("STUB_KEY", "sk-test-123")
    budget = kw.pop("budget", None)
    cfg = dict(model="stub-model", base_url=stub.base_url, api_key_env="STUB_KEY", backoff_s=0.01, max_retries=3)
    cfg.update(kw)
    return LLMClient(LLMConfig(**cfg), budget)


def test_reply_text_tokens_and_cost_come_from_the_server(monkeypatch):
    with StubOpenAI([{"content": "hello", "prompt_tokens": 2_000_000, "completion_tokens": 500_000}]) as stub:
        c = client(stub, monkeypatch, price_in_per_mtok=0.5, price_out_per_mtok=2.0).complete(MESSAGES)
    assert (c.text, c.tokens_in, c.tokens_out) == ("hello", 2_000_000, 500_000)
    assert c.cost_usd == pytest.approx(2 * 0.5 + 0.5 * 2.0)


def test_the_key_is_read_from_the_named_environment_variable(monkeypatch):
    with StubOpenAI([{"content": "ok"}]) as stub:
        client(stub, monkeypatch).complete(MESSAGES)
    assert stub.requests[0]["headers"]["authorization"] == "Bearer sk-test-123"


def test_base_url_and_key_default_to_the_openai_variables(monkeypatch):
    with StubOpenAI([{"content": "ok"}]) as stub:
        monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        LLMClient(LLMConfig(model="m")).complete(MESSAGES)
    assert stub.requests[0]["headers"]["authorization"] == "Bearer sk-from-env"


def test_rate_limits_and_server_errors_are_retried(monkeypatch):
    script = [{"status": 429, "retry_after_ms": 5}, {"status": 500}, {"status": 503}, {"content": "finally"}]
    with StubOpenAI(script) as stub:
        llm = client(stub, monkeypatch)
        c = llm.complete(MESSAGES)
    assert c.text == "finally" and c.attempts == 4 and llm.retries == 3
    assert len(stub.completions) == 4


def test_retries_give_up_after_max_retries(monkeypatch):
    with StubOpenAI(then={"status": 500}) as stub:
        with pytest.raises(LLMError, match="gave up after 3 attempts"):
            client(stub, monkeypatch, max_retries=2).complete(MESSAGES)
    assert len(stub.completions) == 3


def test_a_refused_key_fails_at_once_and_is_fatal(monkeypatch):
    with StubOpenAI(then={"status": 401}) as stub:
        with pytest.raises(LLMError, match="refused the API key") as e:
            client(stub, monkeypatch).complete(MESSAGES)
    assert e.value.fatal and len(stub.completions) == 1


def test_reasoning_model_parameters_are_passed_through(monkeypatch):
    with StubOpenAI([{"content": "ok"}]) as stub:
        client(stub, monkeypatch, reasoning_effort="high", max_completion_tokens=32000,
               extra_body={"top_k": 20}).complete(MESSAGES)
    body = stub.completions[0]
    assert body["reasoning_effort"] == "high" and body["max_completion_tokens"] == 32000 and body["top_k"] == 20
    assert "temperature" not in body and "max_tokens" not in body


def test_streamed_replies_are_joined_and_counted(monkeypatch):
    with StubOpenAI([{"content": "a streamed reply", "prompt_tokens": 11, "completion_tokens": 7}]) as stub:
        c = client(stub, monkeypatch, stream=True).complete(MESSAGES)
    assert stub.completions[0]["stream"] is True
    assert (c.text, c.tokens_in, c.tokens_out, c.usage_estimated) == ("a streamed reply", 11, 7, False)


def test_the_budget_refuses_calls_once_spent(monkeypatch):
    budget = Budget(limit_usd=1.5)
    with StubOpenAI(then={"content": "x", "prompt_tokens": 1_000_000, "completion_tokens": 0}) as stub:
        llm = client(stub, monkeypatch, price_in_per_mtok=1.0, budget=budget)
        llm.complete(MESSAGES)
        llm.complete(MESSAGES)
        with pytest.raises(BudgetExceeded):
            llm.complete(MESSAGES)
    assert len(stub.completions) == 2 and budget.spent_usd == pytest.approx(2.0)


def test_a_missing_key_for_a_remote_endpoint_says_which_variable_to_set(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(LLMError, match="NO_SUCH_KEY"):
        LLMClient(LLMConfig(model="m", api_key_env="NO_SUCH_KEY"))


def test_a_server_without_stream_usage_is_streamed_without_it(monkeypatch):
    script = [{"status": 400, "error": "Unrecognized request argument supplied: stream_options"}, {"content": "hi"}]
    with StubOpenAI(script) as stub:
        c = client(stub, monkeypatch, stream=True).complete(MESSAGES)
    assert "stream_options" in stub.completions[0] and "stream_options" not in stub.completions[1]
    assert c.text == "hi" and c.usage_estimated
