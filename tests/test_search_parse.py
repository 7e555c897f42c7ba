"""Pulling the ModelNew program out of LLM replies."""
from kernelrl.search.parse import parse_reply

MODEL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"


def test_a_python_fence_is_extracted():
    p = parse_reply(f"Here it is:\n```python\n{MODEL}```\nDone.")
    assert p.code == MODEL and not p.truncated


def test_of_several_blocks_the_one_defining_modelnew_is_chosen():
    reply = ("```cuda\n__global__ void k(float* x) {}\n```\n"
             f"```python\n{MODEL}```\n"
             "```python\nprint(ModelNew()(1))\n```\n")
    assert parse_reply(reply).code == MODEL


def test_a_later_block_defining_modelnew_wins_over_an_earlier_draft():
    draft = MODEL.replace("x + 1", "x + 2")
    assert parse_reply(f"Draft:\n```python\n{draft}```\nFinal:\n```python\n{MODEL}```").code == MODEL


def test_an_unterminated_fence_runs_to_the_end_and_is_marked_truncated():
    p = parse_reply(f"**Code Implementation**\n```python\n{MODEL}")
    assert p.code == MODEL and p.truncated


def test_code_without_fences_is_found_and_trailing_prose_dropped():
    p = parse_reply(f"Sure, the new version:\n{MODEL}\nThis is faster because it fuses the add.")
    assert p.code == MODEL


def test_reasoning_in_think_tags_is_ignored():
    p = parse_reply("<think>maybe ```python\nclass ModelNew: pass\n``` no</think>\n" f"```python\n{MODEL}```")
    assert p.code == MODEL


def test_a_reply_without_code_is_a_failure_with_a_reason():
    p = parse_reply("I cannot optimise this further.")
    assert p.code is None and "no code block" in p.error


def test_blocks_without_modelnew_are_a_failure_naming_the_problem():
    p = parse_reply("```python\nclass Model:\n    pass\n```")
    assert p.code is None and "defines `class ModelNew`" in p.error


def test_empty_replies_are_failures():
    assert parse_reply("").code is None and parse_reply(None).code is None


def test_the_three_sections_are_split_out():
    reply = ("## Performance Analysis\nmemory bound\n## Algorithm Design\nfuse ops\n"
             f"## Code Implementation\n```python\n{MODEL}```")
    p = parse_reply(reply)
    assert p.sections == {"Performance Analysis": "memory bound", "Algorithm Design": "fuse ops",
                          "Code Implementation": ""}
