"""`kernelrl optimize` keeps its contrast when the LLM answers faster than the evaluator judges: a real
OpenAI-compatible server on localhost that answers at once, the CLI, the real CPU evaluator, a real store."""
import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from kernelrl.search.cli import optimize_command
from kernelrl.search.store import Store
from kernelrl.task import Task
from openai_stub_server import StubOpenAI

DATA = Path(__file__).parent / "data" / "eval"
TASK = DATA / "scale_add.py"
CORRECT = (DATA / "correct.py").read_text()
GOOD = [CORRECT.replace("torch.addcmul(self.b, x, self.w).clamp_min_(0)", e) for e in (
    "torch.addcmul(self.b, x, self.w).clamp_min_(0)", "torch.relu(x.mul(self.w).add_(self.b))",
    "(x * self.w + self.b).clamp_min(0)", "torch.nn.functional.relu(x * self.w + self.b)",
    "torch.relu(torch.addcmul(self.b, x, self.w))")]
BROKEN = (DATA / "syntax_error.py").read_text()
LOOKAHEAD = 2  # the default on one device: the LLM concurrency


def reply(code: str) -> dict:
    return {"content": "## Performance Analysis\nElementwise, memory bound.\n## Algorithm Design\nOne pass.\n"
                       f"## Code Implementation\n```python\n{code}```\n"}


def app() -> typer.Typer:
    a = typer.Typer()
    a.command("optimize")(optimize_command)
    a.command("noop")(lambda: None)  # two commands, so `optimize` is addressed by name as in kernelrl's CLI
    return a


def test_every_prompt_shows_the_verdicts_of_all_but_the_last_lookahead_proposals(tmp_path, monkeypatch):
    monkeypatch.setenv("STUB_KEY", "sk-stub")
    config = tmp_path / "optimize.toml"
    config.write_text("[loop]\npolish = false\n\n[eval]\ncorrectness_trials = 1\nwarmup = 1\ntiming_rounds = 2\n"
                      f'calls_per_round = 3\ninput_sets = 2\ntiming_precision = 0\ncache_dir = "{tmp_path / "c"}"\n')
    out = tmp_path / "run"
    script = [reply(GOOD[0]), reply(BROKEN), reply(GOOD[1]), reply(GOOD[2]), reply(GOOD[3]), reply(GOOD[4])]
    with StubOpenAI(script) as stub:
        r = CliRunner().invoke(app(), [
            "optimize", str(TASK), "--device", "cpu", "--model", "stub-model", "--base-url", stub.base_url,
            "--api-key-env", "STUB_KEY", "--iterations", "6", "--concurrency", "2", "--proposers", "reference",
            "--out", str(out), "--config", str(config), "--quiet"])
        prompts = [b["messages"][-1]["content"] for b in stub.completions]
    assert r.exit_code == 0, r.output
    with Store(out / "store.sqlite") as store:
        llm = store.candidates(Task.from_file(TASK), "llm")
    [broken] = [c for c in llm if c.status == "compile_error"]
    assert len(prompts) == 6 and len(llm) == 6 and sorted(c.status for c in llm) == ["compile_error"] + ["ok"] * 5

    def line(c) -> str:  # how a prompt lists a judged LLM candidate
        return f"- candidate {c.id} (llm): " + (f"{c.speedup:.3f}x" if c.status == "ok" else "compile_error: ")

    for i, prompt in enumerate(prompts):
        shown = [c for c in llm if line(c) in prompt]
        listed = set(re.findall(r"^- candidate (\d+) \(llm\)", prompt, flags=re.MULTILINE))
        assert listed == {str(c.id) for c in shown}, prompt  # each LLM candidate listed carries its verdict
        assert len(shown) >= i - LOOKAHEAD, f"prompt {i + 1} shows {len(shown)} earlier LLM verdicts:\n{prompt}"
    last = prompts[-1]
    assert sum(line(c) in last for c in llm if c.status == "ok") >= 2
    assert re.search(re.escape(line(broken)) + ".*syntax error at line", last)  # and why it did not compile


def test_a_negative_lookahead_is_refused_with_what_it_means(tmp_path):
    r = CliRunner().invoke(app(), ["optimize", str(TASK), "--lookahead", "-1", "--out", str(tmp_path / "run")])
    assert r.exit_code == 1 and "lookahead must be >= 0 (0: one proposal at a time)" in r.output
