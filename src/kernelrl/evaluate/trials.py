"""Correctness: trials on fresh secret seeds, compared in the evaluator's process (the full outputs of the first
trials, positions drawn after the call of the later ones), judged against the exact result where strict needs it,
with the causes a failed trial's evidence names."""
from __future__ import annotations

import secrets

import torch

from kernelrl.evaluate import compare as cmp, exact
from kernelrl.sandbox import devshare
from kernelrl.sandbox.process import Worker, WorkerError
from kernelrl.task import Task
from kernelrl.verdict import ErrorStats, Flag
from kernelrl.evaluate.harness import RESCALED
from kernelrl.evaluate.job import Aborted
from kernelrl.evaluate.refpool import _raise_reference
from kernelrl.evaluate.timing import close_fresh


class Trials:
    """The correctness trials of a job (mixed into `Evaluator`)."""

    FULL_TRIALS = 2  # trials whose outputs are compared element by element; later ones are sampled

    def _lock_spills(self, ref: Worker, cand: Worker, left) -> None:
        """Lend each worker device memory for the full trials' outputs, or where that cannot be done page-lock its
        spill file (`Worker.page_lock`), and only for them (`_unlock_spills`): locks taken beside another
        program's timing, or held while the programs were timed, made timed calls noisy on an H100
        (`benchmarks/results/kernelbench_l12_h100/README.md`), so nothing is locked or lent while anything on the
        GPU is timed."""
        nbytes = self._current.state.get("out_bytes")
        if self.device.type == "cuda" and isinstance(nbytes, int):
            self._on_both(ref, cand, "before the trials", "page_lock", nbytes, left(), self.device)
            if ref.lent and cand.lent:
                self._lends = True  # later jobs skip allocating host pages for replies (`_reserve`)

    def _unlock_spills(self, ref: Worker, cand: Worker) -> None:
        """Undo `_lock_spills`."""
        self._on_both(ref, cand, "after the full trials", "unlock", 60)

    @property
    def _onto(self):
        """Where replies' outputs are received and compared: the device on CUDA (a GB in milliseconds)."""
        return self.device if self.device.type == "cuda" else None

    def _on_both(self, ref: Worker, cand: Worker, what: str, method: str, *args) -> None:
        """Call a Worker `method` on both workers at once; the candidate's failure is its verdict, the reference's
        is found out by its next request."""
        reference = self._reader.submit(getattr(ref, method), *args)
        try:
            getattr(cand, method)(*args)
        except WorkerError as e:
            raise Aborted({"status": "runtime_error", "message": f"{what}: {e}"})
        finally:
            try:
                reference.result()
            except WorkerError:
                pass

    def _check(self, task, ref, cand, left, flags):
        """Correctness on fresh secret seeds and two input distributions; (ErrorStats, first trial or None)."""
        cfg = self.config
        seeds = [secrets.randbits(62) for _ in range(max(cfg.correctness_trials, 1))]
        worst, first, trials = None, None, 0
        facts = {"own_state": {}, "reused_storage": set()}  # what the candidate's outputs are (`Harness._facts`)
        prints = []  # the reference's outputs' fingerprints on the first two trials (inputs that differ)
        call_us = []  # the reference's call times (wall, beside the candidate's trial)
        cand_us = []  # the candidate's
        # Under strict, every other trial rescales the float inputs, larger and smaller in turn (`RESCALED`). The
        # last trial repeats the first seed: unwritten or racy outputs vary between runs on one input. Under the
        # kernelbench policy every trial draws the task's own inputs, as KernelBench does: its absolute atol makes
        # the verdict depend on the inputs' scale, and a rescaled draw would make it depend on the draw.
        plan = [(s, "task" if i % 2 == 0 or self._policy == "kernelbench" else RESCALED[i // 2 % 2],
                 i < self.FULL_TRIALS) for i, s in enumerate(seeds)]
        plan.append((seeds[0], "task", False))
        onto = self._onto
        in_turn = self._trials_in_turn()
        self._lock_spills(ref, cand, left)
        for i, (seed, dist, full) in enumerate(plan):
            what = f"trial {i + 1} ({dist} inputs)" if i < len(seeds) else "repeat of trial 1"
            # Reference and candidate run the same trial at once (correctness is not timed), or in turn where
            # their memory would not fit the GPU side by side (`_trials_in_turn`).
            op = {"op": "trial", "seed": seed, "dist": dist, "full": full}
            cand_op = dict(op, poison_bytes=self._out_bytes(task))
            if not in_turn:
                self._send(cand, cand_op, what)
            timeout = left()  # before the reference is asked: once asked, its reply must be read
            ref.send(op)
            reference = self._reader.submit(ref.receive, timeout, onto)  # both replies are read at once
            if in_turn:
                reference.result()  # raises here for a reference fault; the candidate has not been asked
                self._send(cand, cand_op, what)
            try:
                ch, ct = self._receive(cand, left(), what, onto)
            finally:  # the reference's reply is taken whatever the candidate did: the worker serves the next job
                (rh, rt), reference = reference.result(), None  # the future would keep its outputs alive
            _raise_reference(rh, task)
            trials += 1
            if "call_us" in rh:
                call_us.append(rh["call_us"])
            if isinstance(ch.get("call_us"), (int, float)):
                cand_us.append(ch["call_us"])
            if self._trial_problem(ch, flags, i):
                return _stats(worst, task, rh, trials, self._policy), None
            mutated = sorted(set(ch["inputs_changed"]) - set(rh["inputs_changed"]))
            if mutated:
                flags.append(Flag("input_mutation", f"{what}: the candidate modified input(s) {mutated}, "
                                                    "which the reference leaves unchanged", hack="input_mutation"))
                return _stats(worst, task, rh, trials, self._policy), None
            facts["own_state"].update(ch.get("own_state", {}))
            facts["reused_storage"].update(ch.get("reused_storage", ()))
            if full:
                m = self._compare_full(task, ref, op, rh, ch, rt, ct, what)
                if i == 0 and m.ok:
                    first = {"seed": seed, "ref_header": rh, "cand_header": ch, **_summary(rt, ct)}
                if i < 2:
                    prints.append(_fingerprint(rt))
                rt = ct = None  # gigabytes on the device, which the workers need for the next trial
                if self._frees_cache():
                    torch.cuda.empty_cache()
                if i + 1 == len(plan) or not plan[i + 1][2]:
                    self._unlock_spills(ref, cand)  # the rest are sampled: nothing large to move
            else:
                m = self._compare_sampled(task, ref, cand, rh, ch, left, what, op)
            worst = m if worst is None or (m.mismatched, m.rel_l2) > (worst.mismatched, worst.rel_l2) else worst
            if not m.ok:
                self._name_the_cause(ch, i, what, m, flags)
                if i > 0 and not any(f.severity == "reject" for f in flags):
                    self._judge_again(task, op, what, m, left, flags)
                return _stats(worst, task, rh, trials, self._policy), None
        for k in first["degenerate"]:
            # KernelBench's rule, kept as it is under its policy, lets a constant through where the outputs are
            # under its absolute atol (its issue #165): a warning there, so fast_p compares with published numbers
            slack = self._policy == "kernelbench" and bool(self._slack)
            flags.append(Flag("degenerate_output", f"{k} is constant while the reference's varies"
                                                   + (" (within KernelBench's absolute atol)" if slack else ""),
                              hack="degenerate_output", severity="warn" if slack else "reject"))
        flags.extend(_facts_flags(facts, len(prints) == 2 and prints[0] == prints[1]))
        # the reference's quickest trial: how long its calls take, which shapes the first timing round; with the
        # candidate's, a first reading of the speedup (`Evaluator._untimed` starts a re-measurement's worker on it)
        first["ref_call_us"] = min(call_us) if call_us else None
        first["cand_call_us"] = min(cand_us) if cand_us else None
        if self._beyond_strict:
            flags.append(Flag("precision", f"{self._beyond_strict}: outside the strict policy's tolerance, within the "
                                           "kernelbench policy's (reduced-precision math)",
                              hack="precision_downgrade", severity="warn"))
        if self._slack:
            flags.append(Flag("absolute_slack", f"{self._slack}: correct by KernelBench's rule only through its "
                                                "absolute tolerance", severity="warn"))
        if self._loose_exact:
            flags.append(Flag("reference_inaccurate", f"{self._loose_exact}, a bound zeros are inside: the test "
                                                      "cannot tell this output from others far from the reference's "
                                                      "(a chaotic or ill-conditioned reference)", severity="warn"))
        return _stats(worst, task, first["ref_header"], trials, self._policy), first

    def _name_the_cause(self, ch: dict, i: int, what: str, m: cmp.Mismatch, flags: list) -> None:
        """Where a failed trial's evidence names why, add it: threads the candidate started still running when its
        call returned (work finished behind the caller's back), or an output handed back in the storage of an
        earlier call with that call's values (a replayed result)."""
        if ch.get("threads_running", 0) > 0:
            flags.append(Flag("threads", f"{what}: wrong outputs while {ch['threads_running']} Python thread(s) the "
                                         "candidate started were still running after its call returned",
                              hack="background_thread"))
        stale = [k for k in ch.get("unchanged", ()) if k in ch.get("reused_storage", ())]
        if stale and i > 0:
            flags.append(Flag("replayed_output", f"{what}: output(s) {stale} came back in the storage of the "
                                                 "previous call, holding that call's values, on new inputs",
                              hack="result_replay"))

    def _judge_again(self, task: Task, op: dict, what: str, m: cmp.Mismatch, left, flags: list) -> None:
        """A trial that failed after earlier ones passed, run again in a fresh worker as its first call: where it
        passes there, the candidate's outputs depend on its history in the process (code paths that change
        between calls), and the verdict says so with both outcomes. Not for tasks that carry state."""
        p = self._current
        if p.state.get("stateful"):
            return
        try:
            again, slot = self._fresh_worker(task, p.candidate, p.state, left(self.config.build_timeout_s),
                                             "judging the trial again")
        except Aborted:
            return
        try:
            full = dict(op, full=True)
            rh, rt = p.ref.request(full, left())
            ch, ct = self._ask(again, full, left(), "judging the trial again")
            if rh.get("type") == "error" or ch.get("problem") or rh.get("outputs") != ch.get("outputs"):
                return
            saved = self._incorrect_message
            m2 = self._compare_full(task, p.ref, full, rh, ch, rt, ct, what)
            self._incorrect_message = saved
        except Aborted:
            return
        finally:
            close_fresh(again, slot)
        if m2.ok:
            flags.append(Flag("nondeterministic", f"{what} failed after the trials before it passed ({m.reason}); "
                                                  "the same trial passed as the first call of a fresh worker: the "
                                                  "candidate's outputs depend on what ran before in its process",
                              severity="warn"))
            self._incorrect_message = f"{what}: {m.reason} (nondeterministic: it passed in a fresh worker)"

    def _compare_full(self, task, ref: Worker, op: dict, rh: dict, ch: dict, rt: dict, ct: dict,
                      what: str) -> cmp.Mismatch:
        """A full trial's outputs against the reference's, then, where they differ and the reference left its inputs
        as they were, against the exact result (`_against_exact`)."""
        m = self._compare_outputs(task, ct, rt, rh["outputs"], ch["outputs"], what)
        return self._against_exact(ref, op, ct, rt, m, what) if not m.ok and not rh["inputs_changed"] else m

    def _against_exact(self, ref: Worker, op: dict, ct: dict, rt: dict, m: cmp.Mismatch, what: str,
                       sample_seed: int | None = None, cs: dict | None = None) -> cmp.Mismatch:
        """Under the strict policy, a float output that differs from the fp32 reference beyond the tolerance is
        judged again against the exact result (the reference in float64 on the same inputs, `Harness.op_exact`):
        accurate where its error is within `exact.FACTOR` of the reference's own (`exact.against_exact`). Returns
        the first mismatch where that cannot be done or does not hold. Full outputs (`ct`, `rt`), or the samples
        `cs` and `rt` taken for `sample_seed`."""
        if self._policy != "strict":
            return m
        floats = [k for k, t in rt.items() if t.is_floating_point()]
        if not floats or set(rt) != set(ct):
            return m
        if sample_seed is None and exact.bound_may_decide(m.rel_l2):
            bounded = self._bounded_exact(ref, op, ct, rt)
            if bounded:  # certainly less accurate: the float64 outputs need not cross
                self._incorrect_message = f"{self._incorrect_message}; against the exact (float64) result: {bounded}"
                return m
        h, xt = ref.request({"op": "exact", "seed": op["seed"], "dist": op.get("dist", "task"),
                             "sample_seed": sample_seed}, self.config.timeout_s)
        if h.get("type") != "exact" or h.get("unavailable") or set(xt) != set(rt):
            return m
        for k in sorted(rt):
            if not rt[k].is_floating_point():
                if not torch.equal(ct[k].cpu(), rt[k].cpu()):
                    return m
                continue
            dev = self.device if sample_seed is None else torch.device("cpu")
            o, r = ct[k].to(dev), rt[k].to(dev)
            j = exact.against_exact(o, r, xt[k].to(dev))
            if not j.ok:
                self._incorrect_message = f"{self._incorrect_message}; against the exact (float64) result: " \
                                          f"{j.reason}"
                return m
            out = k[3:] if k.startswith("out") else k.split("o")[-1]  # "out0" (full), "c0o0" (samples)
            self._accurate[out] = max(self._accurate.get(out, 0.0), cmp.compare(o, r).rel_l2)
            if not self._loose_exact and j.admits_zeros:
                self._loose_exact = f"{what}: output {out}: the fp32 reference is {j.ref_rel_l2:.3g} from the exact " \
                                    f"result (relative L2), which allows an output {j.allowed_rel_l2:.3g} from it"
        self._incorrect_message = ""
        return cmp.Mismatch(True, "", m.max_abs, m.max_rel, m.rel_l2, 0, m.rms)

    def _bounded_exact(self, ref: Worker, op: dict, ct: dict, rt: dict) -> str:
        """Why full fp32 outputs `ct` are certainly less accurate than the reference's `rt`, from the exact result
        rounded to float32 (`exact.certainly_less_accurate`): a gigabyte output's float64 result is twice its bytes
        and does not fit the device memory lent for its replies. '' where that cannot be told."""
        if any(t.dtype != torch.float32 for t in (*rt.values(), *ct.values())):
            return ""
        h, xt = ref.request({"op": "exact", "seed": op["seed"], "dist": op.get("dist", "task"), "rounded": True},
                            self.config.timeout_s, self._onto)
        norms = h.get("norms")
        if h.get("type") != "exact" or h.get("unavailable") or not isinstance(norms, dict) or set(xt or ()) != set(rt):
            return ""
        for k in sorted(rt):
            sq = norms.get(k)
            if not (isinstance(sq, list) and len(sq) == 2 and all(isinstance(v, (int, float)) for v in sq)):
                return ""
            why = exact.certainly_less_accurate(ct[k].to(self.device), rt[k].to(self.device), xt[k].to(self.device),
                                                *map(float, sq))
            if why:
                return f"output {k[3:]}: {why}"
        return ""

    def _compare_sampled(self, task, ref, cand, rh, ch, left, what, trial: dict) -> cmp.Mismatch:
        """Compare outputs at positions chosen now, after both programs returned (so they could not know them)."""
        if rh["outputs"] != ch["outputs"] or rh["dtypes"] != ch["dtypes"]:
            self._incorrect_message = f"{what}: outputs {ch['dtypes']}, expected {rh['dtypes']}"
            return cmp.Mismatch(False, self._incorrect_message, mismatched=1)
        op = {"op": "sample", "seed": secrets.randbits(62)}
        self._send(cand, op, what)
        _, rs = ref.request(op, left())
        _, cs = self._receive(cand, left(), what)
        for key in sorted(rs):
            k = int(key.split("o")[-1])
            dtype = getattr(torch, rh["dtypes"][k])
            atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, self._policy)
            # float64 samples; scale from the samples' rms (KernelBench's absolute atol under its policy)
            m = cmp.compare(cs[key], rs[key], atol, rtol, self._policy)
            if m.ok and self._policy != "strict":
                self._note_policy_slack(cs[key], rs[key], dtype, task, m, f"{what}: output {k} (sampled)")
            if not m.ok:
                self._incorrect_message = f"{what}: output {k} (sampled): {m.reason}"
                m = cmp.Mismatch(False, self._incorrect_message, m.max_abs, m.max_rel, m.rel_l2, max(m.mismatched, 1))
                if not rh["inputs_changed"]:
                    m = self._against_exact(ref, trial, cs, rs, m, what, sample_seed=op["seed"])
                return m
        return cmp.Mismatch(True, "")

    def _note_policy_slack(self, out, ref_out, dtype, task, m: cmp.Mismatch, where: str) -> None:
        """Under the kernelbench policy, remember the first output outside the strict tolerance (reduced-precision
        math) and the first that passed only by KernelBench's absolute atol (`cmp.absolute_slack`)."""
        if not self._beyond_strict and not cmp.compare(out, ref_out, task.meta.atol, task.meta.rtol).ok:
            self._beyond_strict = where
        if not self._slack:
            atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, self._policy)
            why = cmp.absolute_slack(m, cmp.compare(out, ref_out, atol, rtol), atol)
            if why:
                self._slack = f"{where}: {why}"

    def _frees_cache(self) -> bool:
        """Whether the evaluator gives its cached device memory back after a full trial: where a trial's memory
        (`_trial_bytes`) is a sixteenth of the device's or more, the comparison's gigabytes are the workers' to take
        for the next trial. Below that what it keeps is small beside the device, and giving it back waits for the
        device on every full trial (28 ms each in a bench run, `benchmarks/results/throughput_grpo_h200/repeat/`)."""
        return self.device.type == "cuda" and self._trial_bytes(self._current.state) >= self._device_bytes // 16

    def _trials_in_turn(self) -> bool:
        """Whether the reference's trial runs before the candidate's instead of beside it: when the two programs'
        memory for a trial (`_trial_bytes`) would fill more than half the GPU, as KernelBench's 6 GB activations do
        on an 80 GB card. Workers give such memory back between requests (`Harness.idle`)."""
        return self.device.type == "cuda" and self._trial_bytes(self._current.state) > self._device_bytes // 2

    def _shares(self, state: dict) -> bool:
        """Whether a job's trials may share the device (`gpulock`): their memory (`_trial_bytes`) is under a
        quarter of the device's."""
        return self._gpu.sharing and self._trial_bytes(state) <= self._device_bytes // 4

    def _calls_beside(self, state: dict) -> bool:
        """Whether a candidate's first call may run beside the GPU stage: its own memory (`_call_bytes`) is under a
        quarter of the device's. With trials that share (under a quarter) and at most two such calls beside them
        (`DeviceLock`), three quarters of the device at most; trials that do not share hold the device alone.
        A first call that runs out of memory there decides nothing (`_first_call`), and trials that do run again
        alone (`_evaluate`)."""
        return self._gpu.sharing and self._call_bytes(state) <= self._device_bytes // 4

    @staticmethod
    def _call_bytes(state: dict) -> int:
        """A candidate's memory for one call: its inputs and their kept copy, its outputs and as much again for
        what it allocates on the way."""
        return 2 * state.get("in_bytes", 0) + 2 * state.get("out_bytes", 0)

    @staticmethod
    def _trial_bytes(state: dict) -> int:
        """The two programs' memory for a trial: inputs, their kept copies, outputs, the candidate's poisoned cache,
        the evaluator's copies of both outputs and the device memory lent to the workers for them."""
        return 4 * state.get("in_bytes", 0) + (8 if devshare.ENABLED else 6) * state.get("out_bytes", 0)

    def _out_bytes(self, task: Task) -> int:
        return self._current.state["out_bytes"]

    def _trial_problem(self, h: dict, flags: list, i: int) -> bool:
        problem = h.get("problem")
        if not problem:
            return False
        kind = problem.split(":", 1)[0]
        hack = "lazy_output" if kind == "lazy_output" else None
        flags.append(Flag("output_type", f"trial {i + 1}: {problem}", hack=hack,
                          severity="reject" if hack else "warn"))
        self._incorrect_message = problem
        return True

    def _compare_outputs(self, task, ct, rt, n_ref, n_cand, where) -> cmp.Mismatch:
        if n_ref != n_cand:
            m = cmp.Mismatch(False, f"{n_cand} outputs, expected {n_ref}")
        else:
            m = cmp.Mismatch(True, "")
            dev = self.device  # a GPU compares a gigabyte in milliseconds; outputs arrive on the host
            for k in range(n_ref):
                out_k, ref_k = ct[f"out{k}"].to(dev), rt[f"out{k}"].to(dev)
                mk = cmp.compare(out_k, ref_k, task.meta.atol, task.meta.rtol, self._policy)
                if mk.ok and self._policy != "strict":
                    self._note_policy_slack(out_k, ref_k, ref_k.dtype, task, mk, f"{where}: output {k}")
                if not mk.ok or mk.rel_l2 > m.rel_l2:
                    m = mk if mk.ok else cmp.Mismatch(False, f"output {k}: {mk.reason}", mk.max_abs,
                                                      mk.max_rel, mk.rel_l2, mk.mismatched, mk.rms)
                if not mk.ok:
                    break
        if not m.ok:
            self._incorrect_message = f"{where}: {m.reason}"
            m = cmp.Mismatch(False, m.reason, m.max_abs, m.max_rel, m.rel_l2, max(m.mismatched, 1), m.rms)
        return m


def _summary(ref: dict, cand: dict) -> dict:
    """What later stages need of the first trial's outputs, not the outputs themselves (gigabytes): each output's
    scale and dtype (timed calls are checked against samples) and those the candidate made constant while the
    reference's vary (floating outputs of more than one element). Read back from the device at once (`_read`)."""
    sq, same = _read({k: cmp.squares(t) for k, t in ref.items()},
                     {(who, k): (t == t.reshape(-1)[0]).all() for who, outs in (("ref", ref), ("cand", cand))
                      for k, t in outs.items() if t.numel() > 1 and t.is_floating_point()})

    def constant(who: str, k: str) -> bool:
        return bool(same.get((who, k), [0.0])[0])

    return {"scales": {k[3:]: cmp.rms_of(*sq[k]) for k in ref},
            "dtypes": {k[3:]: t.dtype for k, t in ref.items()},
            "degenerate": [k for k in cand if constant("cand", k) and not constant("ref", k)]}


def _fingerprint(outputs: dict) -> list:
    """Sum and sum of squares (float64) of each output: equal for two draws of inputs when the output does not
    depend on them. Read back from the device at once (`_read`)."""
    f64 = torch.float64
    sums, = _read({k: torch.stack([torch.sum(t, dtype=f64), torch.linalg.vector_norm(t, dtype=f64)])
                   if t.is_floating_point() else t.sum() for k, t in outputs.items()})
    return [(k, *sums[k]) if outputs[k].is_floating_point() else (k, int(sums[k][0])) for k in sorted(outputs)]


def _read(*groups: dict) -> list[dict]:
    """Each group's tensors (a value or a few each) as lists of Python numbers, the device read once for all (twice
    where some are integers, kept exact): every read waits for the device, and in a bench run the evaluator's reads
    of its comparisons took about 13 s of the GPU stage's 233 s (`benchmarks/results/throughput_grpo_h200/repeat/`).
    Floating and bool tensors read as floats, the others as ints."""
    flat = [(g, key, t.reshape(-1)) for g, group in enumerate(groups) for key, t in group.items()]
    out = [{} for _ in groups]
    for whole in (False, True):
        mine = [(g, key, t) for g, key, t in flat if (t.is_floating_point() or t.dtype == torch.bool) != whole]
        if not mine:
            continue
        device, kind = mine[0][2].device, torch.int64 if whole else torch.float64
        values = torch.cat([t.to(device, kind) for _, _, t in mine]).tolist()
        i = 0
        for g, key, t in mine:
            out[g][key], i = values[i:i + t.numel()], i + t.numel()
    return out


def _facts_flags(facts: dict, input_independent: bool) -> list[Flag]:
    """Warnings that say what a passing candidate's outputs are (`Harness._facts`) and what the task is: facts
    for the reader, never a reason to refuse."""
    out = []
    if input_independent:
        out.append(Flag("task_property", "the task's output does not depend on its inputs (the reference returned "
                                         "the same values for two different input draws): a program that returns "
                                         "a constant solves it", severity="warn"))
    for k, name in sorted(facts["own_state"].items()):
        out.append(Flag("own_state", f"output {k} is the candidate's own state ({name}): it keeps what it returns",
                        severity="warn"))
    if facts["reused_storage"]:
        out.append(Flag("reused_storage", f"output(s) {sorted(facts['reused_storage'])} came back in the same "
                                          "storage on every call (a buffer the candidate keeps and rewrites)",
                        severity="warn"))
    return out


def _stats(m, task, ref_header: dict, trials, policy: str = "strict") -> ErrorStats:
    dtypes = ref_header.get("dtypes") or ["float32"]
    dtype = getattr(torch, dtypes[0], torch.float32)
    atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, policy)
    if m is None:
        return ErrorStats(0.0, 0.0, 0.0, atol, rtol, trials, 0)
    return ErrorStats(m.max_abs, m.max_rel, m.rel_l2, atol, rtol, trials, m.mismatched)
