"""Contrastive optimisation: LLM backend, prompts, reply parsing, exemplar selection, the store, the loop."""
from kernelrl.search.exemplars import Exemplar, normalize_scores, select_exemplars
from kernelrl.search.llm import Budget, BudgetExceeded, Completion, LLMClient, LLMConfig, LLMError
from kernelrl.search.loop import Loop, LoopConfig, LoopError, RunResult
from kernelrl.search.parse import ParsedReply, parse_reply
from kernelrl.search.prompt import Failure, PromptConfig, build_messages
from kernelrl.search.proposers import PROPOSERS, Proposer
from kernelrl.search.store import CandidateRecord, Evaluation, Store

__all__ = ["Budget", "BudgetExceeded", "CandidateRecord", "Completion", "Evaluation", "Exemplar", "Failure",
           "LLMClient", "LLMConfig", "LLMError", "Loop", "LoopConfig", "LoopError", "PROPOSERS", "ParsedReply",
           "PromptConfig", "Proposer", "RunResult", "Store", "build_messages", "normalize_scores", "parse_reply",
           "select_exemplars"]
