"""A task's reference run in a sandboxed worker for the red team: what its inputs and outputs are, and how its outputs
on chosen draws (a seed, a scale, one input drawn again) compare with its first draw's. The caller's process runs none
of the task's code, and the outputs never leave the worker."""
from __future__ import annotations

import contextlib
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelrl.evaluate.evaluator import check_device
from kernelrl.evaluate.gpulock import DeviceLock, device_lock
from kernelrl.evaluate.harness import Harness
from kernelrl.sandbox.process import Worker, WorkerError
from kernelrl.task import Task

ENTRY = "kernelrl.redteam.probe:Probe"
# Draws with at most this many output elements are judged against the exact result too, where zeros or the first
# draw's outputs miss strict's tolerance: outputs that are rounding alone come from reductions; a float64 run of a
# gigabyte task's reference is not spent on each draw.
EXACT_MOST = 1 << 22


class ProbeError(RuntimeError):
    """The task's reference does not run (or its worker died): nothing can be judged against it."""


@dataclass(frozen=True)
class TensorSpec:
    """A tensor's shape and dtype name ("float32"); an input that is not a tensor has `kind` set instead."""

    shape: tuple[int, ...] = ()
    dtype: str = ""
    kind: str = ""  # the type name of a non-tensor input ("int"); "" for a tensor

    @property
    def tensor(self) -> bool:
        return not self.kind

    @property
    def floating(self) -> bool:
        return self.dtype in ("float16", "bfloat16", "float32", "float64")

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype, "kind": self.kind}

    @classmethod
    def from_dict(cls, d: dict) -> "TensorSpec":
        return cls(tuple(d.get("shape", ())), d.get("dtype", ""), d.get("kind", ""))


@dataclass(frozen=True)
class Profile:
    """What the templates need to know of a task: its inputs and outputs (from one call of its reference)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    single: bool  # forward returns one tensor (not a tuple or list)

    def to_dict(self) -> dict:
        return {"inputs": [s.to_dict() for s in self.inputs], "outputs": [s.to_dict() for s in self.outputs],
                "single": self.single}

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        return cls(tuple(TensorSpec.from_dict(s) for s in d["inputs"]),
                   tuple(TensorSpec.from_dict(s) for s in d["outputs"]), bool(d["single"]))


class Probe(Harness):
    """The worker side: the evaluator's reference harness with one more request, `draw`."""

    _base = None  # the first draw's outputs, which later draws are compared with

    def op_draw(self, op):
        """Run the reference on the inputs for `seed` (float inputs times `scale`; with `vary` = (j, other), input j
        alone from the draw for seed `other`) and compare its outputs with the first draw's (`op["base"]`: this is the
        first draw) under `op["rule"]` (policy, atol, rtol): the header's `facts` (`audit.facts`). Outputs stay here."""
        from kernelrl.evaluate import state as progstate
        from kernelrl.redteam.audit import facts, passes_as

        torch = self.torch
        xs, varied = self._draw_inputs(op)
        before = [_fingerprint(x, torch) for x in xs]
        self._ran = True
        self.after_reply = self._rest  # not before: an output may be storage the program keeps
        try:
            with self._no_grad():
                out = self.model(*xs)
            self._sync()
        except BaseException as e:
            return _failed(f"{type(e).__name__}: {e}")
        outs, problem = self._outputs(out)
        if problem:
            return _failed(problem)
        # Output k is input j where they are equal and the call left input j as it was drawn.
        kept = [j for j, (x, f) in enumerate(zip(xs, before)) if f is not None and _fingerprint(x, torch) == f]
        fits = [[j for j in kept if xs[j].shape == o.shape and xs[j].dtype == o.dtype] for o in outs]
        inputs = [[j for j in js if torch.equal(xs[j], o)] for js, o in zip(fits, outs)]
        outs = [o.detach() for o in outs]
        rule = op["rule"]
        # ...and passes as output k where the policy's comparison takes it for the output (a residual add of a term
        # under the tolerance: KernelBench's level2/51 under kernelbench's absolute 1e-2); asked of the draws the
        # findings read, not of those that vary one input
        passing = [] if varied is not None else [
            [j for j in js if j in eq or passes_as([xs[j]], [o], rule["policy"], rule.get("atol"), rule.get("rtol"))]
            for js, eq, o in zip(fits, inputs, outs)]
        if op.get("base"):  # kept for the draws to come; a copy where it is the program's own storage
            owned = progstate.owned_storages(self._state())
            self._base = [o.clone() if o.numel() and o.untyped_storage().data_ptr() in owned else o for o in outs]
        exact = None
        if rule["policy"] == "strict" and sum(o.numel() for o in outs) <= EXACT_MOST and not op.get("equal_only"):
            def exact():  # the call may have written into its inputs: drawn again for the float64 run
                xs64 = self.exact_outputs(self._draw_inputs(op)[0])
                return None if isinstance(xs64, str) else xs64
        found = facts(self._base, outs, rule["policy"], rule.get("atol"), rule.get("rtol"), inputs, exact, passing)
        header = {"type": "draw", "single": not isinstance(out, (tuple, list)), "varied": varied,
                  "inputs": [_spec(x, torch) for x in xs], "outputs": [_spec(o, torch) for o in outs],
                  "facts": asdict(found)}
        return header, None

    def op_weights(self, op):
        """Build the reference again under init seed `op["seed"]` (another draw of its weights, as another run of
        the evaluator makes), to be put back as so built; later draws compare with a first draw made on it."""
        self.init["seed"] = op["seed"]
        try:
            self._build_reference()
        except BaseException as e:
            return _failed(f"{type(e).__name__}: {e}")
        self._base = None
        self._rest()
        return {"type": "weights"}, None

    def _draw_inputs(self, op) -> tuple[list, bool | None]:
        """The inputs of draw `op`, and whether input `op["vary"][0]` came out other than the seed's (None: none
        varied)."""
        torch = self.torch
        xs = self.inputs(op["seed"], scale=op.get("scale", 1.0))
        varied = None
        if op.get("vary") is not None:
            j, other = op["vary"]
            new = self.inputs(other, scale=op.get("scale", 1.0))[j]
            varied = not (isinstance(new, torch.Tensor) and isinstance(xs[j], torch.Tensor)
                          and new.shape == xs[j].shape and torch.equal(new, xs[j]))
            xs[j] = new
        return xs, varied

    def _rest(self):
        """Once a draw's reply is sent: the program put back as built, and cached device memory given back (the
        probe runs beside the evaluator's jobs)."""
        self._restore()
        if self.cuda:
            self.torch.cuda.empty_cache()


def _failed(message: str):
    return {"type": "error", "kind": "runtime_error", "message": message[-3000:]}, None


def _fingerprint(x, torch):
    """Sums that change when a call writes into a tensor input (None for anything else)."""
    if not isinstance(x, torch.Tensor) or not x.numel() or x.is_complex():
        return None
    flat = x.detach().reshape(-1)
    weights = torch.arange(1, 1 + min(flat.numel(), 4099), device=x.device, dtype=torch.float64)
    head = flat[:weights.numel()].to(torch.float64)
    return (float(torch.sum(flat, dtype=torch.float64)), float(torch.sum(head * weights)),
            float(torch.sum(flat[-weights.numel():].to(torch.float64) * weights)))


def _spec(x, torch) -> dict:
    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""), "kind": ""}
    return {"shape": [], "dtype": "", "kind": type(x).__name__}


class ProbeWorker:
    """A task's reference in a worker of its own, confined like the evaluator's; `draw` runs it once. On CUDA each
    draw holds the device's lock beside untimed work (`gpulock.device_lock`, or `lock` where given), as a probe runs
    beside the evaluators' jobs: no draw runs while an evaluator of that device times."""

    def __init__(self, task: Task, device: str, cache: Path, timeout_s: float = 300.0, confine: bool = True,
                 memory_gb: float = 16.0, lock: DeviceLock | None = None, seed: int | None = None):
        self.task, self.device, self.timeout_s = task, device, timeout_s
        self.lock = lock or (device_lock(check_device(device)) if device.startswith("cuda") else None)
        build = cache / "build" / f"redteam-{task.digest}"
        build.mkdir(parents=True, exist_ok=True)
        init = {"role": "reference", "task_source": task.source, "seed": secrets.randbits(31) if seed is None else seed,
                "fixed_inputs": list(task.meta.fixed_inputs), "cpu_threads": 1, "device": device,
                "writable": [str(build)]}
        env = {"TORCH_EXTENSIONS_DIR": str(build / "torch_extensions"), "TRITON_CACHE_DIR": str(build / "triton")}
        self.worker = Worker(ENTRY, scratch_root=cache / "scratch", writable=[build], confine=confine,
                             memory_bytes=int(memory_gb * 2**30) if device == "cpu" else 0, env=env, init=init)

    def draw(self, seed: int, scale: float = 1.0, vary: tuple[int, int] | None = None, rule: dict | None = None,
             base: bool = False, equal_only: bool = False) -> dict:
        """The header of one draw (`Probe.op_draw`: the inputs' and outputs' specs, the facts; with `equal_only`, no
        judgement against the exact result: only whether the outputs equal the first draw's is asked); raises
        ProbeError."""
        return self._ask({"op": "draw", "seed": seed, "scale": scale, "vary": list(vary) if vary else None,
                          "base": base, "rule": rule or {"policy": "strict"}, "equal_only": equal_only})

    def weights(self, seed: int) -> None:
        """Build the reference again under init seed `seed` (`Probe.op_weights`); raises ProbeError."""
        self._ask({"op": "weights", "seed": seed})

    def _ask(self, op: dict) -> dict:
        try:
            with self.lock.beside() if self.lock else contextlib.nullcontext():
                h, _ = self.worker.request(op, self.timeout_s)
        except WorkerError as e:
            last = [ln for ln in e.stderr_tail.strip().splitlines() if ln.strip()][-1:]
            raise ProbeError(f"{self.task.name}: the reference does not run: {e}"
                             + (f": {last[0].strip()}" if last else "")) from e
        if h.get("type") == "error":
            raise ProbeError(f"{self.task.name}: the reference does not run: {h.get('message', '')[-500:]}")
        return h

    def profile(self, header: dict) -> Profile:
        return Profile(tuple(TensorSpec.from_dict(s) for s in header["inputs"]),
                       tuple(TensorSpec.from_dict(s) for s in header["outputs"]), bool(header["single"]))

    def close(self) -> None:
        self.worker.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
