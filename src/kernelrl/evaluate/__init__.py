"""Build, check, time and guard candidates: `Evaluator(EvalConfig(device=...)).evaluate(task, candidate)`."""
from kernelrl.evaluate.config import EvalConfig
from kernelrl.evaluate.evaluator import EvaluationError, Evaluator, check_device

__all__ = ["EvalConfig", "EvaluationError", "Evaluator", "check_device", "evaluate"]


def evaluate(task, candidate, config: EvalConfig | None = None):
    """Evaluate one candidate with a throw-away Evaluator (convenient; an Evaluator reuses its reference)."""
    with Evaluator(config) as ev:
        return ev.evaluate(task, candidate)
