"""kernelrl: make GPU code faster with LLMs and reinforcement learning, and prove every speedup it claims."""
from kernelrl.task import Candidate, Task, TaskMeta
from kernelrl.verdict import ErrorStats, Flag, Timing, Verdict

__version__ = "0.1.0"
__all__ = ["Candidate", "ErrorStats", "Flag", "Task", "TaskMeta", "Timing", "Verdict", "__version__"]
