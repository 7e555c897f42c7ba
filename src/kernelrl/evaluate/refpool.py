"""The reference pool: a worker per task kept for later jobs (least recently used out), started and probed ahead,
put back as built after every job (`Harness._restore`), and timed alone for bench baselines."""
from __future__ import annotations

import secrets
import threading


from kernelrl.sandbox.process import Worker, WorkerError
from kernelrl.task import Task
from kernelrl.verdict import Timing
from kernelrl.evaluate.job import EvaluationError
from kernelrl.evaluate.candidates import toolchain_key


class ReferencePool:
    """Reference workers kept per task (mixed into `Evaluator`)."""

    def hold_reference(self, task: Task) -> dict:
        """Start (or keep) the task's reference worker ahead of its `time_reference`; pass the result to `let_go`."""
        return self._reference(task)[1]

    def warm_reference(self, task: Task) -> None:
        """Start the task's reference worker ahead of its jobs, which find it kept (or wait for its start to end); a
        reference that does not start is left to them, whose own start says why."""
        try:
            self.let_go(self._reference(task)[1])
        except Exception:  # noqa: BLE001 - the evaluator closed, the reference does not run: its jobs say so
            pass

    def let_go(self, reference_state: dict) -> None:
        """Stop holding a reference worker (from `hold_reference`): it may be evicted again."""
        with self._refs_lock:
            reference_state["users"] -= 1
            self._evict()

    def _reference(self, task: Task) -> tuple[Worker, dict]:
        """The task's reference worker and state, started (and probed) if needed; pinned until released."""
        key = task.digest
        with self._refs_lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:  # prepares of other tasks go on while this one starts
            with self._refs_lock:
                if self._closed:
                    raise EvaluationError("the evaluator is closed")
                if key in self._refs and self._refs[key][0].alive:
                    self._refs.move_to_end(key)
                    self._refs[key][1]["users"] += 1
                    return self._refs[key]
                if key in self._refs:
                    self._refs.pop(key)[0].close()
            worker, state = self._start_reference(task)
            with self._refs_lock:
                if self._closed:
                    worker.close()
                    raise EvaluationError("the evaluator is closed")
                self._refs[key] = (worker, state)
                self._next_seeds.pop(key, None)  # kept now: its seed is the one `_reference_seed` gives
                self._evict()
            return worker, state

    def _reference_seed(self, task: Task) -> int:
        """The seed the task's reference builds its Model under: the kept worker's, or the one its next start takes
        (`_start_reference`). A candidate loads under it while the reference starts (`Evaluator.prepare`); where the
        reference was replaced meanwhile (evicted and started again), the candidate is loaded again under the new
        one's."""
        with self._refs_lock:
            kept = self._refs.get(task.digest)
            if kept is not None and kept[0].alive:
                return kept[1]["init"]["seed"]
            return self._next_seeds.setdefault(task.digest, secrets.randbits(31))

    def _evict(self) -> None:
        """Close least recently used reference workers beyond the limit, sparing those a job still holds."""
        with self._refs_lock:
            idle = [k for k, (_, st) in self._refs.items() if st.get("users", 0) <= 0]
            for k in idle[:max(0, len(self._refs) - self._max_refs)]:
                self._refs.pop(k)[0].close()

    def _start_reference(self, task: Task) -> tuple[Worker, dict]:
        with self._refs_lock:  # the seed stays the next start's until this one is kept (`_reference`): a job that
            # asks for it meanwhile loads its candidate under it, not under another that would have it loaded again
            seed = self._next_seeds.setdefault(task.digest, secrets.randbits(31))
        init = {"role": "reference", "task_source": task.source, "seed": seed,
                "fixed_inputs": list(task.meta.fixed_inputs), "cpu_threads": self.config.cpu_threads}
        # A probe that failed beside other work (out of device memory, say) is run again alone, in a fresh worker:
        # a reference is refused only for what it does by itself.
        try:
            for alone in (False, True) if self._gpu.sharing else (True,):
                try:
                    worker, h, probed = self._probed(task, init, alone)
                except WorkerError:
                    if alone:
                        raise
                    continue
                if alone or not probed or not (h.get("type") == "error" or h.get("problem")):
                    break
                worker.close()
        except WorkerError as e:
            last = [line for line in e.stderr_tail.strip().splitlines() if line.strip()][-1:]
            raise EvaluationError(f"{task.name}: the reference does not run: {e}"
                                  + (f": {last[0].strip()}" if last else "")) from e
        if h.get("type") == "error" or h.get("problem"):
            worker.close()
            raise EvaluationError(f"{task.name}: the reference does not run: {h.get('message') or h.get('problem')}")
        state = {"init": init, "compiled": False, "out_bytes": h.get("out_bytes", 0), "in_bytes": h.get("in_bytes", 0),
                 "written_bytes": h.get("written_bytes"),
                 "mutates": set(h.get("inputs_changed", [])),  # a reference may write into its inputs
                 "stateful": bool(h.get("stateful")),  # its call replaced what it keeps (`Harness._facts`)
                 "users": 1}  # prepared jobs and timings holding it (never evicted while held)
        self._reserve(worker, state)
        return worker, state

    def _probed(self, task: Task, init: dict, alone: bool) -> tuple[Worker, dict, bool]:
        """A started reference worker, the reply to its probe (one call on seed 0, undone after: sizes, whether it
        writes into its inputs or carries state) and whether the probe ran (False: the start failed). The probe
        runs on the device beside correctness trials and other probes, never beside timing (`gpulock`); `alone`:
        with the device to itself."""
        worker = self._spawn(init, self.cache / "build" / f"ref-{task.digest}-{toolchain_key()}")
        try:
            h, _ = worker.request({"op": "ready"}, self.config.timeout_s)  # start-up, beside any GPU stage
            if h.get("type") == "error":
                return worker, h, False
            with self._gpu.exclusive() if alone else self._gpu.beside():
                h, _ = worker.request({"op": "trial", "seed": 0, "probe": True}, self.config.timeout_s)
            return worker, h, True
        except BaseException:
            worker.close()
            raise

    def _reserve(self, worker: Worker, state: dict) -> None:
        """In the CPU stage, allocate the host memory a worker's trial replies will go through (`Worker.reserve`):
        zeroing gigabytes takes seconds the GPU stage would otherwise wait for. Locking it waits for the GPU stage
        (`_lock_spills`)."""
        if self.device.type == "cuda" and isinstance(state.get("out_bytes"), int) and not self._lends:
            worker.reserve(state["out_bytes"])  # not needed once workers take lent device memory (`_lock_spills`)

    def _rest(self, ref: Worker | None) -> None:
        """Have a reference worker put its program back as built and give back the device memory it used for the
        job just done (`op_rest`), and unlock its spill file if a failed trial left it locked (`_lock_spills`)."""
        if ref is None or not ref.alive:
            return
        try:
            h, _ = ref.request({"op": "rest"}, 60)
            ref.unlock(60)
        except WorkerError:
            return  # a dead or hung reference is replaced when next asked for
        with self._refs_lock:
            for worker, state in self._refs.values():
                if worker is ref and not h.get("compiled", True):
                    state["compiled"] = False  # its torch.compile wrapper went with the program it replaced

    def _compile_reference(self, ref: Worker, task: Task):
        with self._refs_lock:
            state = next(s for w, s in self._refs.values() if w is ref)
        if not state["compiled"]:
            h, _ = ref.request({"op": "compile", "seed": 1}, self.config.timeout_s)
            _raise_reference(h, task)
            state["compiled"] = True

    def time_reference(self, task: Task, compiled: bool = False) -> Timing:
        """Timing of the reference alone (eager, or torch.compile'd), by the method `evaluate` compares on:
        CUDA-graph replay when the timing basis is "device" and the program captures, else per-call latency."""
        ref, state = self._reference(task)  # before the GPU stage: the probe waits for its timing
        try:
            return self._time_reference(task, ref, compiled)
        finally:
            with self._lock, self._gpu.exclusive():
                self._rest(ref)
            self.let_go(state)

    def _time_reference(self, task: Task, ref: Worker, compiled: bool) -> Timing:
        with self._lock, self._gpu.exclusive():
            if compiled:
                self._compile_reference(ref, task)
            rounds = self.config.timing_rounds
            if self.device.type == "cuda" and self.config.use_graphs and self.config.timing_basis == "device":
                samples, seed = [], secrets.randbits(62)
                for _ in range(rounds):
                    h, _ = ref.request(self._time_op(seed, kind="graph", compiled=compiled), self.config.timeout_s)
                    if h.get("unavailable") or "times_us" not in h:
                        break
                    samples += h["times_us"]
                else:
                    return Timing.from_samples(samples, "cuda_graph")
            samples, walls = [], []
            for _ in range(rounds):
                h, _ = self._time(ref, compiled, self.config.timeout_s)
                samples += h["times_us"]
                walls += h["wall_us"]
            return Timing.from_samples(samples, self._method(), walls)


def _raise_reference(h: dict, task: Task):
    if h.get("type") == "error" or h.get("problem"):
        raise EvaluationError(f"{task.name}: the reference failed: {h.get('message') or h.get('problem')}")
