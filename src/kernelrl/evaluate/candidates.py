"""Candidate workers: a spare started ahead for the next candidate, a fixed build folder where a build records
absolute paths, and the build cache only the evaluator writes."""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from kernelrl.sandbox.process import Worker
from kernelrl.task import Candidate, Task

HARNESS = "kernelrl.evaluate.harness:Harness"


def toolchain_key() -> str:
    """What a cached build depends on besides its source: Python, torch and CUDA versions."""
    parts = [sys.version.split()[0], torch.__version__, str(torch.version.cuda)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]


class CandidateWorkers:
    """Starting workers and keeping builds (mixed into `Evaluator`)."""

    # -- workers ------------------------------------------------------------------------------------------
    def _spawn(self, init: dict, build_dir: Path) -> Worker:
        build_dir.mkdir(parents=True, exist_ok=True)
        env = {"TORCH_EXTENSIONS_DIR": str(build_dir / "torch_extensions"),
               "TRITON_CACHE_DIR": str(build_dir / "triton"),
               "TORCHINDUCTOR_CACHE_DIR": str(build_dir / "inductor"),
               "CUDA_CACHE_PATH": str(build_dir / "cuda")}
        memory = int(self.config.memory_limit_gb * 2**30) if self.device.type == "cpu" else 0
        init = dict(init, device=str(self.device), writable=[str(build_dir)], cpus=self._cpus)
        return Worker(HARNESS, scratch_root=self.cache / "scratch", writable=[build_dir],
                      confine=self.config.confine, memory_bytes=memory, env=env, init=init,
                      affinity=self._build_cpus)

    def _load_op(self, task: Task, seed: int, candidate: Candidate) -> dict:
        """The request that gives a started candidate worker its task and its candidate, built under `seed` (the
        seed its reference built the task's Model under)."""
        return {"op": "load", "source": candidate.source, "task_source": task.source, "seed": seed,
                "fixed_inputs": list(task.meta.fixed_inputs)}

    def _start_spare(self) -> tuple[Worker, Path]:
        """Start a task-agnostic candidate worker with an empty build slot of its own (its only writable cache)."""
        slots = self.cache / "slots"
        slots.mkdir(parents=True, exist_ok=True)
        slot = Path(tempfile.mkdtemp(prefix="slot-", dir=slots))
        return self._spawn({"role": "candidate", "cpu_threads": self.config.cpu_threads}, slot), slot

    def _candidate_worker(self, candidate: Candidate) -> tuple[Worker, Path | None]:
        """A started candidate worker and its build slot (None when it builds straight into the cache).

        C++/CUDA extensions record absolute paths in their build files, and so does torch.compile's generated code
        (its kernels' paths under the inductor cache), so they build in their own cache entry (a fixed path per
        source digest) in a worker started for them; Python and Triton candidates, whose caches are
        content-addressed, take the spare and get a copy of any cached build in its slot.
        """
        if candidate.language in ("cuda", "cpp") or _compiles(candidate.source):
            entry = self._build_entry(candidate)
            return self._spawn({"role": "candidate", "cpu_threads": self.config.cpu_threads}, entry), None
        with self._refs_lock:
            spare, self._spare = self._spare, None
        if spare is None or not spare[0].alive:
            if spare is not None:
                self._discard(spare)
            spare = self._start_spare()
        with self._refs_lock:  # the next candidate's worker starts while this one builds and is judged
            if self._spare is None and not self._closed:
                self._spare = self._start_spare()
        entry = self._build_entry(candidate)
        if entry.is_dir():
            shutil.copytree(entry, spare[1], symlinks=True, dirs_exist_ok=True)
        return spare

    def _build_entry(self, candidate: Candidate) -> Path:
        return self.cache / "build" / f"{candidate.digest}-{toolchain_key()}"

    def _keep_build(self, candidate: Candidate, slot: Path | None, keep: bool) -> None:
        """Move a new build into the cache under the candidate's digest (only this process writes the cache)."""
        if slot is None:
            return
        entry = self._build_entry(candidate)
        try:
            if keep and not entry.exists() and any(slot.iterdir()):
                entry.parent.mkdir(parents=True, exist_ok=True)
                tmp = entry.with_name(f"{entry.name}.tmp-{secrets.token_hex(4)}")
                shutil.copytree(slot, tmp, symlinks=True)
                try:
                    os.rename(tmp, entry)
                except OSError:  # another evaluator kept the same build first
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            shutil.rmtree(slot, ignore_errors=True)

    def _discard(self, spare: tuple[Worker, Path]) -> None:
        spare[0].close()
        shutil.rmtree(spare[1], ignore_errors=True)


def _compiles(source: str) -> bool:
    """Whether a candidate may run torch.compile (its build then records absolute paths: `_candidate_worker`)."""
    return "compile" in source or "inductor" in source or "dynamo" in source
