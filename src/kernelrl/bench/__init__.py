"""Suites, fast_p tables, reports and plots: `kernelrl bench TASKS_DIR --candidates CANDS_DIR`."""
from kernelrl.bench.metrics import FAST_P, Summary, by_level, fast_p, summarize
from kernelrl.bench.result import TaskResult
from kernelrl.bench.suite import Suite, SuiteTask, discover

__all__ = ["FAST_P", "Suite", "SuiteTask", "Summary", "TaskResult", "by_level", "discover", "fast_p", "summarize"]
