"""Red-teaming a task set: the known hacks as templates written for each task and judged by the real evaluator, an
audit of each task for outputs a trivial program produces, and an LLM that looks for new holes (`kernelrl redteam`)."""
