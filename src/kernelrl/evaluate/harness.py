"""The code that runs inside a worker: build a program, run it on seeded inputs, time it, report evidence.

The same harness serves the reference worker (role "reference": the task's `Model`) and candidate workers
(role "candidate": `ModelNew`). Inputs are regenerated here from seeds the parent chose, so both workers see
bit-identical inputs without shipping them. Everything the timing and checking code calls is captured before
candidate code loads; the parent compares outputs, so expected outputs never exist in a candidate's process.
"""
from __future__ import annotations


import contextlib
import importlib.util
import math
import os
import random
import sys
import time
import traceback
from typing import NamedTuple

from kernelrl.evaluate import buildlog, state as progstate, tamper
from kernelrl.evaluate.guards.outputs import Returned

SAMPLES_PER_OUTPUT = 2048  # output elements compared per timed call
IDLE_CACHE_SHARE = 16  # between requests, cached but unused device memory above 1/16 of the GPU is given back
# Strict's rescaled trials, in turn: float inputs 1.5-2x larger, then 1.5-2x smaller (the factor drawn from the
# seed). Every verdict sees both sides of the task's own scale: a program right only on the task's range (ReLU or
# HardTanh handed its input back, where get_inputs draws from [0, 1)) fails whatever the seeds.
RESCALED = ("larger", "smaller")
PERMUTE_CHUNK = 1 << 26  # elements permuted per step in `fresh` (an int64 index of 512 MiB, not one per element)
# GPU clock cycles the stream is held busy before each timed graph replay (about 200 us at 2 GHz): the host enqueues
# the two events and the replay while the device still works, so a host thread delayed between them (a busy
# machine) adds no idle time between the events. 100 us was not enough on an H200 with torch 2.11 for a host
# delayed 80 us after each event (`tests/test_graph_timing_gpu.py`)
REPLAY_LEAD_CYCLES = 400_000


class _Captured(NamedTuple):
    """A program captured in a CUDA graph (`Harness._capture`)."""

    graph: object          # torch.cuda.CUDAGraph
    static: list           # its input buffers, which each replay's fresh inputs are copied into
    outs: list             # its outputs, rewritten by each replay
    nbytes: int            # device memory the buffers and the graph's pool hold


class Harness:
    def __init__(self, init: dict, confinement: dict, scratch: str):
        import torch

        self.torch, self.init, self.scratch = torch, init, scratch
        self.confinement = dict(confinement, env_secrets=len(tamper.secrets_in_env()))
        self.role = init["role"]
        self.device = torch.device(init["device"])
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            if self.device.index is None:  # "cuda" alone names the current device (a harness built in-process)
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
        # Reference and candidate both compute in full fp32 unless the task says otherwise.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        if not self.cuda and init.get("cpu_threads"):
            torch.set_num_threads(int(init["cpu_threads"]))
        self.model = None
        self.task = None
        self.init_error = None
        self.compiled = None
        # Captured before any candidate code exists in this process.
        self._perf = time.perf_counter
        self._Tensor = torch.Tensor
        self._type = type
        self._no_grad = torch.no_grad
        self._sync = torch.cuda.synchronize if self.cuda else (lambda *a: None)
        self._Event = torch.cuda.Event if self.cuda else None
        self._flush_buf = None
        self._idle_bytes = math.inf  # cached, unused device memory a worker may keep between requests (`_trim`)
        if self.cuda:
            l2 = getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 50 << 20) or (50 << 20)
            self._flush_buf = torch.empty(2 * l2 // 4 + 1024, dtype=torch.float32, device=self.device)
            from kernelrl.evaluate.guards import l2
            self._l2 = l2
            self._idle_bytes = torch.cuda.get_device_properties(self.device).total_memory // IDLE_CACHE_SHARE
        self.fixed_inputs = set()
        self.after_reply = None  # run by the worker once the reply is sent (`sandbox.worker`)
        self.converse = None  # set by the worker: a message to the evaluator mid-request, and its answer
        self._last_op = None  # the request last answered (`idle`)
        self._redraws_vary = {}  # input index -> whether a new draw of it gives new values
        self.drawn_on_device = False  # whether the last `inputs` ran get_inputs on this worker's device
        self.precision0 = tamper.precision_flags(torch)
        self._pristine = None  # the reference as built (`progstate.Pristine`), put back between jobs (`_restore`)
        self._ran = False  # whether the program ran since it was built or put back
        self._model64 = None  # the reference in float64 (`op_exact`), made when first asked for
        self._graphs_held = {}  # (seed, compiled) -> a captured graph kept for the job's later rounds (`op_graph`)
        self._returned = Returned()  # storages of the last outputs (facts: a buffer handed back again)
        self._prints = {}  # output index -> float64 sum of its values when last returned (`_facts`)
        self.threads0 = tamper.python_threads()
        self.work = None  # set when a candidate loads (`tamper.ThreadWork`)
        self.decoy = None
        # A candidate worker may start before its task is known (a spare): the task then comes with `load`.
        if "task_source" in init:
            self._load_task(init)

    def _load_task(self, spec: dict) -> None:
        """Import the task's reference module; the reference role also builds its Model."""
        self.init.update(seed=spec["seed"], task_source=spec["task_source"])
        self.fixed_inputs = set(spec.get("fixed_inputs", ()))
        task_path = os.path.join(self.scratch, "task_reference.py")
        try:
            self.task = self._import("kernelrl_task", task_path, spec["task_source"])
            if self.role == "reference":
                self._build_reference()
        except BaseException as e:  # answered on the first request, as a one-line error about the reference
            self.init_error = _located(e, task_path, "reference")

    def _build_reference(self) -> None:
        """Build the task's Model under `init["seed"]` as the reference kept here: its copy as built (put back between
        jobs, `_restore`), its state as built, and nothing made from an earlier build (its float64 copy, compiled
        wrapper, held graphs)."""
        self.model = self._build(self.task.Model)
        try:
            self._pristine = progstate.Pristine(self.model)
        except Exception:  # not copyable: `_restore` builds it again from the same seed
            self._pristine = None
        self._state0 = self._state()
        self._ran, self._model64, self.compiled, self._graphs_held = False, None, None, {}

    # -- plumbing ---------------------------------------------------------------------------------------
    def handle(self, op: dict):
        self._last_op = op["op"]
        if self.init_error:
            return _error("runtime_error", self.init_error)
        reply = getattr(self, "op_" + op["op"])(op)
        if op["op"] in ("time", "graph"):  # replies of sampled elements: its device memory is free already
            self._trim()
        return reply

    def _import(self, name: str, path: str, source: str):
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def _seed(self, seed: int):
        self.torch.manual_seed(seed)
        random.seed(seed)
        try:
            import numpy as np
            np.random.seed(seed % (2**32))
        except ImportError:
            pass

    def _init_inputs(self):
        self._seed(self.init["seed"])
        return list(self.task.get_init_inputs())

    def _build(self, cls):
        init_inputs = self._init_inputs()
        self._seed(self.init["seed"])
        model = cls(*init_inputs)
        if isinstance(model, self.torch.nn.Module):
            model = model.to(self.device)
        return model

    def inputs(self, seed: int, dist: str = "task", scale: float = 1.0) -> list:
        """The task's inputs for `seed`, on this device; `scale`, and `dist` "larger" (float inputs times 1.5-2, by
        the seed) or "smaller" (divided by 1.5-2), rescale float inputs."""
        torch = self.torch
        self._seed(seed)
        self.drawn_on_device = False
        if self.cuda:
            # Made on the GPU: KernelBench's largest inputs (gigabytes) take seconds to draw on the host and
            # milliseconds here. Both programs draw them the same way, so they see the same values.
            try:
                with torch.device(self.device):
                    xs = list(self.task.get_inputs())
                self.drawn_on_device = True
            except Exception:  # a get_inputs that needs host tensors (numpy) draws on the host
                self._seed(seed)
                xs = list(self.task.get_inputs())
        else:
            xs = list(self.task.get_inputs())
            self.drawn_on_device = True
        if dist in RESCALED:
            factor = random.Random(seed).uniform(1.5, 2.0)
            scale = scale * (factor if dist == "larger" else 1 / factor)
        out = []
        for i, x in enumerate(xs):
            if isinstance(x, torch.Tensor):
                x = x.to(self.device)
                if scale != 1.0 and x.is_floating_point() and i not in self.fixed_inputs:
                    x = x * scale
            out.append(x)
        return out

    def fresh(self, base: list, seed: int) -> list:
        """Inputs for one timed call: every float input new to the program, from the task's own distribution.

        Where the task's inputs are drawn on the device, each float input is drawn again for `seed` (one pass
        over its memory). Otherwise, or where a new draw has another shape or the same values, its elements are
        reordered by a random affine permutation i -> (a*i + b) mod n with gcd(a, n) = 1 (a few passes, even at
        1e9 elements). Either way no cache keyed on pointers, shapes or values can answer, and no algebra
        (scaling, linearity) relates one call to another. Other inputs (and the task's fixed inputs) stay as they
        are.
        """
        torch = self.torch
        drawn = self.inputs(seed) if self.drawn_on_device else [None] * len(base)
        rng = random.Random(seed)
        out = []
        for j, (x, d) in enumerate(zip(base, drawn)):
            if not (isinstance(x, torch.Tensor) and x.is_floating_point() and j not in self.fixed_inputs
                    and x.numel() > 1):
                out.append(x)
                continue
            if isinstance(d, torch.Tensor) and d.shape == x.shape and d.dtype == x.dtype and d.device == x.device:
                if j not in self._redraws_vary:  # a task may draw the same values every time (torch.linspace)
                    self._redraws_vary[j] = not torch.equal(d, x)
                if self._redraws_vary[j]:
                    out.append(d)
                    continue
            n = x.numel()
            a = rng.randrange(1, n)
            while math.gcd(a, n) != 1:
                a = rng.randrange(1, n)
            b = rng.randrange(n)
            flat, new = x.reshape(-1), torch.empty(n, dtype=x.dtype, device=x.device)
            for s in range(0, n, PERMUTE_CHUNK):
                idx = torch.arange(s, min(s + PERMUTE_CHUNK, n), device=x.device, dtype=torch.int64)
                new[s:s + idx.numel()] = flat[idx.mul_(a).add_(b).remainder_(n)]
            out.append(new.reshape(x.shape))
        return out

    def base_inputs(self, seed: int) -> list:
        """The task's inputs for `seed`, from which timed calls draw theirs afresh (`fresh`). Kept between timing
        rounds, unless they are larger than the cache `_trim` lets a worker keep: those are drawn again for each
        round (the same values, from the same seed), so that a program holds none of them while the other one
        is timed."""
        if getattr(self, "_base", (None,))[0] == seed:
            return self._base[1]
        self._base = (None, None)
        xs = self.inputs(seed)
        if sum(x.numel() * x.element_size() for x in xs if isinstance(x, self.torch.Tensor)) <= self._idle_bytes:
            self._base = (seed, xs)
        return xs

    # -- ops ---------------------------------------------------------------------------------------------
    def op_load(self, op):
        """Candidate role: import the candidate and build ModelNew under the reference's secret seed.

        As in KernelBench, the parameters stay as ModelNew's __init__ made them: layers created in the reference's
        order get the reference's values, and a candidate may transform its own (fold a constant into a weight).
        Correctness on secret inputs judges the result, whatever __init__ did."""
        torch = self.torch
        if self.task is None:
            self._load_task(op)
            if self.init_error:
                return _error("runtime_error", self.init_error)
        if "compile" in op["source"] or "dynamo" in op["source"]:
            # torch.compile rebinds a few torch attributes on first use; let it do so before the snapshot.
            import torch._dynamo
            torch._dynamo.mutation_guard.install_generation_tagging_init()
        path = os.path.join(self.scratch, "candidate.py")
        writable = [self.scratch] + list(self.init.get("writable", ()))
        if self.confinement.get("private_tmp"):  # /tmp is this worker's own (sandbox.confine.private_tmp)
            writable.append("/tmp")
        self.snap = tamper.snapshot(torch)
        self.decoy = tamper.decoy_snapshot(self.task)  # the task module here is a decoy: the reference runs elsewhere
        self.audit = tamper.AuditLog(os.path.realpath(path), writable)
        self.threads0 = tamper.python_threads()
        self.work = tamper.ThreadWork()  # CPU time of the threads the candidate starts (`op_time`: work behind)
        self.children0 = tamper.child_processes()
        if self.cuda:
            self._l2.reset_persisting_l2()
        t0 = self._perf()
        self.audit.armed = True
        try:
            module = self._import("candidate", path, op["source"])
        except SyntaxError as e:
            return _error("compile_error", f"syntax error at line {e.lineno}: {e.msg}\n{(e.text or '').rstrip()}")
        except BaseException as e:
            return _error(*buildlog.classify(e, path))
        if not hasattr(module, "ModelNew"):
            return _error("runtime_error", "the candidate defines no ModelNew")
        try:
            self.model = self._build(module.ModelNew)
        except BaseException as e:
            return _error(*buildlog.classify(e, path))
        self.load_findings = self._persisting_l2("at load")
        return {"type": "loaded", "build_s": self._perf() - t0}, None

    def op_trial(self, op):
        """Run once on the inputs for `seed`; return the outputs (or hold them for `op_sample`)."""
        torch = self.torch
        xs = self.inputs(op["seed"], op.get("dist", "task"))
        kept = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
        self._poison(op.get("poison_bytes", 0))
        self._perturb(True)
        self._ran = True
        gate = contextlib.nullcontext()
        if op.get("gate") and self.converse is not None:  # a first call: the device given back while it compiles
            from kernelrl.evaluate.compilegate import compile_gate
            gate = compile_gate(self.converse, self._sync,
                                torch.cuda.is_current_stream_capturing if self.cuda else (lambda: False))
        try:
            t0 = self._perf()
            with self._no_grad(), gate:
                out = self.model(*xs)
            self._sync()
            call_us = (self._perf() - t0) * 1e6
        except BaseException as e:
            return _error("runtime_error", _short_tb(e))
        finally:
            self._perturb(False)
        outs, problem = self._outputs(out)
        if problem:
            return {"type": "trial", "problem": problem}, None
        changed = [j for j, (x, k) in enumerate(zip(xs, kept)) if isinstance(x, torch.Tensor)
                   and not (x.shape == k.shape and torch.equal(x, k))]
        header = {"type": "trial", "outputs": len(outs), "inputs_changed": changed, "call_us": call_us,
                  "dtypes": [str(o.dtype).replace("torch.", "") for o in outs],
                  "in_bytes": sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor)),
                  "out_bytes": sum(o.numel() * o.element_size() for o in outs),
                  "written_bytes": self._written_bytes(outs, xs), **self._facts(outs)}
        if op.get("probe"):  # sizes and counts only: the caller has no use for these outputs
            header["stateful"] = bool(progstate.changes(self._state0, self._state())) if self.role == "reference" \
                else False
            del xs, kept, out, outs
            self._restore()  # the probe's call leaves no trace in a program that carries state
            if self.role == "candidate":  # a candidate's first call (`Evaluator._first_call`): trial 1 sees no history
                self._returned, self._prints = Returned(), {}
            if self.cuda:  # a reference started ahead of its turn keeps no device memory it is not using
                torch.cuda.empty_cache()
            return header, None
        if op.get("full", True):
            # Sent as they are (`wire` stages device tensors through pinned memory). Nothing is written into
            # them afterwards: a returned tensor may be the program's own state, or a buffer it returns again.
            return header, {f"out{i}": o.detach() for i, o in enumerate(outs)}
        self._held = (outs, xs)  # sampled by the next op, whose positions this program cannot know yet
        return header, None

    def op_sample(self, op):
        """Elements of the held outputs at positions drawn from `seed` (sent only after the call returned)."""
        torch = self.torch
        outs, xs = self._held
        self._held = None
        samples = {}
        self._sample(samples, 0, outs, torch.Generator().manual_seed(op["seed"]), op.get("n", 1 << 16))
        return {"type": "samples"}, samples

    def _facts(self, outs) -> dict:
        """What a trial's outputs are, beyond their values: which are storage the program keeps (its state),
        which it returned before (a reused buffer), which of those still hold the values they held then, and
        (candidate) how many threads it started are still running now that the call returned."""
        torch = self.torch
        if self.role != "candidate":
            return {}
        owned = progstate.owned_storages(self._state())
        facts = {"own_state": {str(k): owned[o.untyped_storage().data_ptr()] for k, o in enumerate(outs)
                               if o.numel() and o.untyped_storage().data_ptr() in owned},
                 "reused_storage": self._returned.see(outs)}
        sums = {k: float(torch.sum(o.detach(), dtype=torch.float64)) if o.is_floating_point() else None
                for k, o in enumerate(outs)}
        facts["unchanged"] = [k for k in facts["reused_storage"]
                              if sums[k] is not None and self._prints.get(k) == sums[k]]
        self._prints = sums
        facts["threads_running"] = tamper.python_threads() - self.threads0
        return facts

    def _restore(self) -> None:
        """Put the reference back as it was built, if it ran since (`progstate.Pristine`; rebuilt from its seed where
        it could not be copied), so that every job starts it, as the candidate's fresh worker starts, from there."""
        if self.role != "reference" or not self._ran or self.model is None:
            return
        before = self.model
        self.model = self._pristine.restore(self.model) if self._pristine else self._build(self.task.Model)
        if self.model is not before:
            self.compiled = None  # it wrapped the program replaced
        self._ran = False
        self._state0 = self._state()
        self._returned, self._prints = Returned(), {}

    def exact_outputs(self, xs: list):
        """The reference's outputs in float64 on float64 copies of inputs `xs` (floating outputs as float64), or
        why they cannot be had (a str)."""
        torch = self.torch
        if self._pristine is None or not isinstance(self.model, torch.nn.Module):
            return "the reference could not be copied"
        if progstate.changes(self._state0, self._state()):
            return "the reference carries state between calls"
        xs = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]
        default = torch.get_default_dtype()
        try:
            if self._model64 is None:
                self._model64 = progstate.Pristine(self._pristine.model).model.double()
            torch.set_default_dtype(torch.float64)
            with self._no_grad():
                outs, problem = self._outputs(self._model64(*xs))
            self._sync()
        except BaseException as e:
            self._sync_quietly()
            return f"{type(e).__name__}: {str(e)[:200]}"
        finally:
            torch.set_default_dtype(default)
        return problem or [o.to(torch.float64) if o.is_floating_point() else o for o in outs]

    def op_exact(self, op):
        """Reference role: the trial for `seed`/`dist` computed in float64 (parameters and inputs cast, tensors made
        inside forward float64 by default): the exact result an fp32 output is judged against. All outputs (as
        float64; `rounded`: as `exact.rounded_exact` gives them), or the samples `op_sample` took for `sample_seed`.
        Unavailable where the program carries state that has moved, draws random numbers in forward, or cannot run in
        float64."""
        outs = self.exact_outputs(self.inputs(op["seed"], op.get("dist", "task")))
        if isinstance(outs, str):
            return {"type": "exact", "unavailable": outs}, None
        if op.get("rounded") and op.get("sample_seed") is None:
            # Rounded to float32 with the norms that bound what the rounding hid (`exact.certainly_less_accurate`):
            # half the bytes, the size of an fp32 output's reply
            from kernelrl.evaluate.exact import rounded_exact

            sent, norms = {}, {}
            for i, o in enumerate(outs):
                sent[f"out{i}"], *norms[f"out{i}"] = rounded_exact(o) if o.is_floating_point() else (o, 0.0, 0.0)
            return {"type": "exact", "outputs": len(outs), "norms": norms}, sent
        if op.get("sample_seed") is None:
            return {"type": "exact", "outputs": len(outs)}, {f"out{i}": o for i, o in enumerate(outs)}
        samples = {}
        self._sample(samples, 0, outs, self.torch.Generator().manual_seed(op["sample_seed"]), op.get("n", 1 << 16))
        return {"type": "exact", "outputs": len(outs)}, samples

    def _written_bytes(self, outs, xs) -> int:
        """Bytes this call's outputs had to be written with (the roofline floor's work; `roofline.written_bytes`)."""
        from kernelrl.evaluate.guards.roofline import written_bytes
        return written_bytes(outs, [x for x in xs if isinstance(x, self.torch.Tensor)])

    def op_rest(self, op):
        """Between jobs: drop the inputs and outputs kept for the next op and give cached device memory back, so
        a reference worker kept for later candidates holds only its model while other programs run."""
        self._base, self._held, self._graphs_held = (None, None), None, {}
        self._restore()
        if self.cuda:
            self.torch.cuda.empty_cache()
        return {"type": "rested", "compiled": self.compiled is not None}, None

    def idle(self):
        """Between requests (`sandbox.worker`), once a trial's outputs are sent: `_trim`."""
        if self._last_op in ("trial", "sample"):
            self._trim()

    def _trim(self):
        """Give cached device memory back when a large part of it sits unused, as after a gigabyte trial or timing
        round. The reference, the candidate and the evaluator share one GPU: memory one of them cached for its
        last request must not leave the next one's short. A timing round frees its memory before it replies, so
        that nothing is freed while the other program is timed (`handle`); a trial, once its outputs are sent
        (`idle`), while nothing is timed."""
        torch = self.torch
        if self.cuda and \
                torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device) > self._idle_bytes:
            torch.cuda.empty_cache()

    def op_ready(self, op):
        """Answer once started (the task imported, its Model built; nothing run): the caller knows it is up."""
        return {"type": "ready"}, None

    def op_profile(self, op):
        """Names of the operators one call runs (for task policies such as own_kernels)."""
        xs = self.base_inputs(op["seed"])
        from torch.profiler import ProfilerActivity, profile

        self._ran = True
        with self._no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            self.model(*xs)
            self._sync()
        return {"type": "profile", "ops": sorted({e.key for e in prof.key_averages()})}, None

    def op_compile(self, op):
        """Reference role: wrap the reference in torch.compile (timed later with `compiled=True`)."""
        self._ran = True
        if self.compiled is None:
            self.compiled = self.torch.compile(self.model, mode=op.get("mode") or None)
        with self._no_grad():
            self.compiled(*self.inputs(op["seed"]))
        self._sync()
        return {"type": "compiled"}, None

    def pin(self) -> None:
        """Move onto the cores the evaluator set aside for timing (after any build, which uses every core)."""
        cpus = self.init.get("cpus")
        if cpus and hasattr(os, "sched_setaffinity") and os.sched_getaffinity(0) != set(cpus):
            try:
                os.sched_setaffinity(0, cpus)
            except OSError:
                pass  # a container may forbid it; timing then runs wherever the scheduler puts it

    def op_time(self, op):
        """Time `op["calls"]` calls, each on fresh inputs (`fresh`); return sampled outputs of each."""
        torch = self.torch
        self.pin()
        model = self.compiled if op.get("compiled") else self.model
        base = self.base_inputs(op["seed"])
        self._ran = True
        with self._no_grad():
            for _ in range(op.get("warmup", 3)):
                model(*base)
            self._sync()
            times, walls, quiet, samples = [], [], [], {}
            gen = torch.Generator().manual_seed(op["sample_seed"])
            threads_before = tamper.python_threads()
            state, changed = self._state(), set()
            work = self.work if self.role == "candidate" else None
            behind, behind_call = 0, 0.0  # the most CPU its threads spent after a call returned, and that call's time
            for i in range(op["calls"]):
                xs = self.fresh(base, op["perm_seed"] + i)
                if self.cuda:
                    # The device is idle when the start event is recorded: nothing the program launches, on any
                    # stream, can run before it (work queued behind a prelude could hide under the prelude).
                    if op.get("flush", True):
                        self._l2.reset_persisting_l2()
                        self._flush_buf.zero_()
                    self._sync()
                    start, end = self._Event(enable_timing=True), self._Event(enable_timing=True)
                    w0 = self._perf()
                    start.record()
                    out = model(*xs)
                    end.record()
                    at = work.cpu_ns() if work else 0
                    end.synchronize()
                    q0 = self._perf()
                    self._sync()  # device-wide: work hidden on other streams shows up here
                    w1 = self._perf()
                    times.append(start.elapsed_time(end) * 1e3)
                    walls.append((w1 - w0) * 1e6)
                    quiet.append((w1 - q0) * 1e6)
                else:
                    w0 = self._perf()
                    out = model(*xs)
                    w1 = self._perf()
                    at = work.cpu_ns() if work else 0
                    times.append((w1 - w0) * 1e6)
                    walls.append((w1 - w0) * 1e6)
                outs, problem = self._outputs(out)
                if problem:
                    return {"type": "timed", "problem": f"timed call {i}: {problem}"}, None
                self._sample(samples, i, outs, gen)
                del out, outs, xs
                if work:  # outputs are sampled first: work finishing behind the caller's back shows there too
                    spent = work.settle(at)
                    if spent > behind:
                        behind, behind_call = spent, times[-1]
                now = self._state()
                changed |= progstate.changes(state, now)
                state = now
        return {"type": "timed", "times_us": times, "wall_us": walls, "quiesce_us": quiet,
                "threads_grew": tamper.python_threads() - threads_before,
                "threads_running": tamper.python_threads() - self.threads0 if self.role == "candidate" else 0,
                "behind_us": behind / 1e3, "behind_call_us": behind_call,
                "state_changed": sorted(changed)[:20]}, samples

    def _persisting_l2(self, when: str) -> list:
        """A cache_persistence finding when the candidate holds a persisting-L2 set-aside."""
        size = self._l2.persisting_l2_bytes() if self.cuda else None
        if size in (0, None):
            return []
        return [["cache_persistence", f"the candidate reserved {size} bytes of persisting L2 cache {when}"]]

    def _sample(self, samples: dict, call: int, outs, gen, n: int = SAMPLES_PER_OUTPUT) -> None:
        """Add `n` elements of each output at positions drawn from `gen`, as float64 on the host."""
        torch = self.torch
        for k, o in enumerate(outs):
            flat = o.detach().reshape(-1)
            if flat.numel():
                idx = torch.randint(0, flat.numel(), (n,), generator=gen)
                samples[f"c{call}o{k}"] = flat[idx.to(flat.device)].to("cpu", torch.float64)

    def _state(self) -> dict:
        """What this program could carry from one call to the next (`progstate.snapshot`)."""
        return progstate.snapshot(self.model, "candidate" if self.role == "candidate" else "kernelrl_task")

    def op_graph(self, op):
        """Capture one call in a CUDA graph, then time replays on fresh inputs copied into its buffers.

        This is the program's device time: the host's launch work is done once, at capture, every replayed
        kernel, on any stream the capture joined, lies between the two events, and the stream is kept busy
        while the host enqueues them (`REPLAY_LEAD_CYCLES`). The graph of a job's rounds (one `seed`) is captured
        once and kept for its later rounds where it and its buffers fit the memory a worker may keep between
        requests (`_idle_bytes`); a larger one is captured again each round, so that the other program is timed
        while this one holds nothing."""
        torch = self.torch
        self.pin()
        if not self.cuda:
            return {"type": "graph", "unavailable": "CUDA graphs need a CUDA device"}, None
        base = self.base_inputs(op["seed"])
        self._ran = True
        key = (op["seed"], bool(op.get("compiled")))
        if any(k[0] != op["seed"] for k in self._graphs_held):  # another job's, or another measurement's
            self._graphs_held = {}
        held = self._graphs_held.get(key)
        if held is None:
            held = self._capture(self.compiled if op.get("compiled") else self.model, base)
            if isinstance(held, str):
                return {"type": "graph", "unavailable": held}, None
            if held.nbytes + sum(h.nbytes for h in self._graphs_held.values()) <= self._idle_bytes:
                self._graphs_held[key] = held
        graph, static, outs = held.graph, held.static, held.outs
        for _ in range(op.get("warmup", 3)):  # the first replays upload the graph; none of them is timed
            graph.replay()
        self._sync()
        gen = torch.Generator().manual_seed(op["sample_seed"])
        times, samples = [], {}
        for i in range(op["calls"]):
            for j, x in enumerate(self.fresh(base, op["perm_seed"] + i)):
                if isinstance(x, torch.Tensor):
                    static[j].copy_(x)
            torch.cuda._sleep(REPLAY_LEAD_CYCLES)
            if op.get("flush", True):
                self._flush_buf.zero_()
            start, end = self._Event(enable_timing=True), self._Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            self._sync()
            times.append(start.elapsed_time(end) * 1e3)
            self._sample(samples, i, outs, gen)
        del graph, static, outs, held
        return {"type": "graph", "times_us": times}, samples

    def _capture(self, model, base: list):
        """`model` on copies of `base` captured in a CUDA graph, after three calls on a side stream (`_Captured`),
        or why it cannot be replayed."""
        torch = self.torch
        reserved = torch.cuda.memory_reserved(self.device)
        static = [x.clone() if isinstance(x, torch.Tensor) else x for x in base]
        try:
            with self._no_grad():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        model(*static)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    static_out = model(*static)
            self._sync()
        except BaseException as e:
            self._sync_quietly()
            return f"capture failed: {type(e).__name__}: {str(e)[:300]}"
        outs, problem = self._outputs(static_out)
        if problem:
            return problem
        nbytes = sum(x.numel() * x.element_size() for x in static if isinstance(x, torch.Tensor))
        return _Captured(graph, static, outs, nbytes + max(0, torch.cuda.memory_reserved(self.device) - reserved))

    def _sync_quietly(self):
        try:
            self._sync()
        except BaseException:
            pass

    def op_report(self, op):
        """Candidate role: the tampering evidence gathered since the candidate loaded."""
        torch = self.torch
        found = list(self.load_findings) + [list(x) for x in tamper.changed(self.snap)]
        found += [list(x) for x in self.audit.events]
        if tamper.python_threads() > self.threads0:
            found.append(["background_thread", f"{tamper.python_threads() - self.threads0} Python thread(s) "
                                               "started since the candidate loaded are still running", "warn"])
        if tamper.child_processes() > self.children0:
            found.append(["background_thread", "the candidate left child processes running"])
        now = tamper.precision_flags(torch)
        for k, v in now.items():
            if v != self.precision0.get(k):
                found.append(["precision_downgrade", f"global precision setting {k} changed "
                                                     f"from {self.precision0.get(k)!r} to {v!r}"])
        found += self._persisting_l2(op["when"])  # when the evaluator reads it (`Integrity._report`)
        for change in tamper.decoy_changes(self.decoy or {}):
            found.append(["baseline_tampering", f"the task's reference code in the candidate's process was changed: "
                                                f"{change} (the reference runs elsewhere; the attempt is refused)"])
        return {"type": "report", "findings": found, "confinement": self.confinement}, None

    # -- checks ------------------------------------------------------------------------------------------
    def _outputs(self, out):
        """The output as a list of plain, materialised tensors on this device, or a problem string."""
        torch = self.torch
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = []
        for i, o in enumerate(items):
            if self._type(o) is not self._Tensor and not isinstance(o, torch.nn.Parameter):
                kind = "lazy_output" if isinstance(o, torch.Tensor) else "type"
                return [], f"{kind}: output {i} is a {type(o).__module__}.{type(o).__qualname__}, " \
                           "not a plain torch.Tensor"
            if o.device != self.device:
                return [], f"device: output {i} is on {o.device}, expected {self.device}"
            if getattr(o, "is_meta", False) or o.layout != torch.strided:
                return [], f"lazy_output: output {i} has no materialised strided storage"
            outs.append(o)
        return outs, None

    def _perturb(self, on: bool):
        """CPU: glibc fills fresh allocations with garbage during correctness trials (never while timed)."""
        if not self.cuda and self.role == "candidate":
            from kernelrl.evaluate.guards.poison import malloc_perturb
            malloc_perturb(0x7F if on else 0)

    def _poison(self, nbytes: int):
        """CUDA: leave NaN-filled blocks in the caching allocator so unwritten outputs show up (CPU: `_perturb`)."""
        if self.cuda and nbytes > 0:
            from kernelrl.evaluate.guards.poison import poison_cuda_cache
            poison_cuda_cache(self.device, 2 * nbytes)


def _located(e: BaseException, path: str, what: str) -> str:
    """'Type: message (reference line N: code)' for an exception raised from the file at `path`."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    where = f" ({what} line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def _error(kind: str, message: str):
    return {"type": "error", "kind": kind, "message": message}, None


def _short_tb(e: BaseException) -> str:
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    return "".join(tb[-3:])[-3000:]
