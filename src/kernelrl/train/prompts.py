"""Prompts for rollouts: the contrastive prompt built from the store, as the optimisation loop builds it."""
from __future__ import annotations

from kernelrl.search.contrastive import Prompt, contrastive_prompt
from kernelrl.search.prompt import PromptConfig, build_messages
from kernelrl.task import Task

__all__ = ["Prompt", "contrastive_prompt", "plain_prompt"]


def plain_prompt(task: Task, config: PromptConfig = PromptConfig()) -> Prompt:
    """The task alone: no exemplars, no failures (the first prompt any task gets)."""
    return Prompt(messages=build_messages(task, [], [], config))
