"""Timing: reference and candidate in alternating, adaptive rounds of eager calls and of CUDA-graph replays, every
timed call on fresh inputs with its outputs checked, and large speedups re-measured in a fresh worker."""
from __future__ import annotations

import math
import secrets
import shutil
import statistics
from concurrent.futures import TimeoutError as FutureTimeout

import torch

from kernelrl.evaluate import compare as cmp
from kernelrl.sandbox.process import Worker
from kernelrl.verdict import Flag, Timing
from kernelrl.evaluate.job import Aborted, EvaluationError


class TimedRounds:
    """The timing of a job (mixed into `Evaluator`)."""

    def _method(self) -> str:
        return "cuda_events" if self.device.type == "cuda" else "perf_counter"

    def _time_op(self, seed: int, kind: str = "time", **extra) -> dict:
        """One round's request: `calls` timed calls, each on fresh inputs (`Harness.fresh` of those for `seed`)."""
        cfg = self.config
        return {"op": kind, "seed": seed, "sample_seed": secrets.randbits(62), "perm_seed": secrets.randbits(62),
                "calls": cfg.calls_per_round, "warmup": cfg.warmup, "flush": cfg.flush_l2, **extra}

    def _round_for(self, call_us: float) -> dict:
        """A round's `calls` and `warmup` for programs whose calls take about `call_us`: `calls_per_round` and
        `warmup`, fewer for long calls (a round of `round_us` of timed calls, at least `min_calls_per_round`, after
        a quarter of that warming up, at least one call). A long call's time varies little; rounds, which the
        speedup's precision counts, are what cancel drift."""
        cfg = self.config
        us = max(call_us, 1e-3)
        least = min(cfg.min_calls_per_round, cfg.calls_per_round)
        return {"calls": max(least, min(cfg.calls_per_round, math.ceil(cfg.round_us / us))),
                "warmup": min(cfg.warmup, max(1, math.ceil(cfg.round_us / 4 / us)))}

    def _time(self, worker: Worker, compiled: bool, timeout: float):
        h, t = worker.request(self._time_op(secrets.randbits(62), compiled=compiled), timeout)
        if h.get("type") == "error" or h.get("problem"):
            raise EvaluationError(f"the reference failed while being timed: {h.get('message') or h.get('problem')}")
        return h, t

    def _timing(self, task, ref, cand, left, flags, first, compiled: bool | None = None,
                precision: float | None = None, rounds: dict | None = None, least: int | None = None,
                most: int | None = None):
        """Eager per-call timing of both programs in alternating, adaptive rounds, at least `least` (default: the
        config's `timing_rounds`), until the speedup's relative standard error is under `precision` (default: the
        config's `timing_precision`), `most` rounds in all at most (default: `_round_limit`). `rounds`, when given,
        holds the rounds measured so far and is filled in place: a later call with it goes on where this one
        stopped (more rounds to a finer precision). Returns (reference, candidate, compiled reference timings, the
        speedup's relative standard error)."""
        cfg = self.config
        compiled = cfg.compare_compile if compiled is None else compiled
        acc = self._rounds(rounds if rounds is not None else {}, first)
        ref_r, cand_r, comp_s, seed, shape = (acc[k] for k in ("ref_r", "cand_r", "comp_s", "seed", "shape"))
        for r in range(len(ref_r), min(most or self._round_limit(), self._round_limit())):
            if self._precise_enough(ref_r, cand_r, precision, least):
                break
            op = self._time_op(seed, **shape)
            order = ("ref", "cand") if r % 2 == 0 else ("cand", "ref")
            got = {}
            for who in order:
                if who == "ref":
                    got["ref"] = self._reference_round(task, ref, op, left)
                else:
                    got["cand"] = self._ask(cand, op, left(), f"timing round {r + 1}")
            self._eager_round(task, r, got["ref"], got["cand"], first, flags, acc)
            if compiled:
                comp_s += ref.request(dict(op, compiled=True), left())[0]["times_us"]
        return self._eager_timings(acc, flags)

    def _rounds(self, acc: dict, first) -> dict:
        """`acc` made ready to hold a job's eager timing rounds (`_timing`), where it does not already."""
        for k in ("ref_s", "ref_w", "cand_s", "cand_w", "comp_s", "quiet", "ref_r", "cand_r"):  # ref_r: round medians
            acc.setdefault(k, [])
        acc.setdefault("seed", secrets.randbits(62))  # one base input set; each timed call draws fresh inputs
        # calls and warm-up of a round (`_round_for`): from the reference's trials, then its first round's times
        acc.setdefault("shape", self._round_for(first["ref_call_us"]) if first.get("ref_call_us") else {})
        return acc

    def _reference_round(self, task, ref, op: dict, left):
        """The reference's reply to a round of timed calls; raises EvaluationError where it fails."""
        rh, rt = ref.request(op, left())
        if rh.get("type") == "error" or rh.get("problem"):
            raise EvaluationError(f"{task.name}: the reference failed while being timed")
        return rh, rt

    def _eager_round(self, task, r: int, ref_reply, cand_reply, first, flags, acc: dict) -> None:
        """Check a timing round's candidate reply against the reference's (its outputs, its threads, its state;
        raises Aborted where they refuse it) and add the round to `acc` (`_timing`'s rounds)."""
        (rh, rt), (ch, ct) = ref_reply, cand_reply
        if ch.get("problem"):
            self._trial_problem(ch, flags, r)
            raise Aborted({"status": "incorrect", "message": ch["problem"], "flags": flags})
        bad = self._check_samples(task, rt, ct, first)
        if bad and ch.get("threads_running", 0) > 0:  # the runtime evidence names the cause
            flags.append(Flag("timed_outputs", f"round {r + 1}: {bad} while {ch['threads_running']} Python "
                                               "thread(s) the candidate started were still running after its "
                                               "calls returned (work finished behind the caller's back)",
                              hack="background_thread"))
        elif bad:
            flags.append(Flag("timed_outputs", f"round {r + 1}: {bad} (work cached, replayed, deferred "
                                               "or skipped while being timed)", hack="result_replay"))
            self._incorrect_message = f"outputs of timed calls are wrong: {bad}"
            raise Aborted({"status": "rejected", "flags": flags,
                            "message": f"outputs of timed calls are wrong: {bad}"})
        if ch.get("state_changed") and rh.get("state_changed"):  # the task carries state between calls
            if not any(f.check == "state" for f in flags):
                flags.append(Flag("state", f"the program changed {', '.join(ch['state_changed'][:6])} during "
                                           "timed calls, as the reference changes "
                                           f"{', '.join(rh['state_changed'][:6])}: the task carries state "
                                           "between calls; timed outputs are checked as always", severity="warn"))
        elif ch.get("state_changed"):
            flags.append(Flag("state", f"round {r + 1}: the program changed {', '.join(ch['state_changed'][:6])} "
                                       "during timed calls: state carried between calls can replay results",
                              hack="result_replay"))
        if self._behind(ch) and not any(f.check == "thread_work" for f in flags):
            flags.append(Flag("thread_work", f"round {r + 1}: threads the candidate started were still running "
                                             f"after its call returned: {ch['behind_us']:.0f} us of CPU work "
                                             f"behind the caller's back, beside a call timed at "
                                             f"{ch['behind_call_us']:.0f} us", hack="background_thread"))
        if ch.get("threads_grew", 0) > 0:
            flags.append(Flag("threads", f"round {r + 1}: {ch['threads_grew']} new Python thread(s) "
                                         "while being timed", hack="background_thread"))
        self._add_round(task, acc["ref_r"], acc["cand_r"], rh, ch)
        if len(acc["ref_r"]) == 1:
            acc["shape"].update(self._round_for(acc["ref_r"][-1]))
        acc["ref_s"] += rh["times_us"]
        acc["ref_w"] += rh["wall_us"]
        acc["cand_s"] += ch["times_us"]
        acc["cand_w"] += ch["wall_us"]
        acc["quiet"] += ch["quiesce_us"]

    def _eager_timings(self, acc: dict, flags):
        """(reference, candidate, compiled reference timings, the speedup's relative standard error) of `acc`'s
        rounds; a candidate whose device stayed busy after its stream finished is flagged (`side_stream`)."""
        cand_t = Timing.from_samples(acc["cand_s"], self._method(), acc["cand_w"], acc["cand_r"])
        if self.device.type == "cuda":
            q = statistics.median(acc["quiet"])
            if q > 40.0 + 0.25 * cand_t.median_us:
                flags.append(Flag("side_stream", f"the device was still busy {q:.0f} µs (median) after the "
                                                 f"candidate's stream finished ({cand_t.median_us:.0f} µs): work "
                                                 "was launched on another stream", hack="side_stream"))
        comp_s = acc["comp_s"]
        return (Timing.from_samples(acc["ref_s"], self._method(), acc["ref_w"], acc["ref_r"]), cand_t,
                Timing.from_samples(comp_s, self._method()) if comp_s else None,
                _relative_stderr(acc["ref_r"], acc["cand_r"]))

    def _round_limit(self) -> int:
        """How many timing rounds a job may take in all (`_timing` resumes its rounds up to this)."""
        return max(self.config.timing_rounds, self.config.max_timing_rounds)

    def _precise_enough(self, ref_r: list[float], cand_r: list[float], precision: float | None = None,
                        least: int | None = None) -> bool:
        """Whether the rounds with medians `ref_r` and `cand_r` suffice: the minimum (`least`, default the config's
        `timing_rounds`) is done and the speedup is as precise as asked (`precision`, default the config's
        `timing_precision`; 0 asks for fixed rounds)."""
        cfg = self.config
        precision = cfg.timing_precision if precision is None else precision
        least = cfg.timing_rounds if least is None else least
        return len(ref_r) >= least and (precision <= 0 or _relative_stderr(ref_r, cand_r) <= precision)

    def _add_round(self, task, ref_r: list[float], cand_r: list[float], rh: dict, ch: dict) -> None:
        """Record a round's medians (reference and candidate replies `rh`, `ch`), and start the re-measurement's
        worker if its speedup reads above the threshold (`_foresee_recheck`)."""
        ref_r.append(statistics.median(rh["times_us"]))
        cand_r.append(statistics.median(ch["times_us"]))
        self._foresee_recheck(task, ref_r[-1] / max(cand_r[-1], 1e-9))

    def _graphs(self, task, ref, cand, left, flags, first, shape: dict, compiled: bool | None = None) -> dict:
        """CUDA-graph replay times (device time) of both programs, when both can be captured.

        Rounds alternate and adapt as in `_timing` (`shape` from `_round_for` of the eager reference time), from
        `graph_rounds` on (device time repeats from round to round, unlike the host's launch work in eager
        latency; `timing_rounds` where `timing_precision` is 0, which asks for fixed rounds), and every replay's
        outputs are checked the same way.
        With `compare_compile`, the torch.compile'd reference is replayed too (its time is None when it
        cannot be captured)."""
        cfg = self.config
        acc = self._replays()
        comp_s = []
        compiled = cfg.compare_compile if compiled is None else compiled
        seed = secrets.randbits(62)
        for r in range(self._round_limit()):
            if self._precise_enough(acc["ref_r"], acc["cand_r"], least=self._graph_least()):
                break
            op = self._time_op(seed, kind="graph", **shape)
            if r % 2 == 0:
                rh, rt = ref.request(op, left())
                ch, ct = self._ask(cand, op, left(), "graph replay")
            else:
                ch, ct = self._ask(cand, op, left(), "graph replay")
                rh, rt = ref.request(op, left())
            if not self._graph_round(task, r, (rh, rt), (ch, ct), first, flags, acc):
                return {}
            if compiled:
                kh, _ = ref.request(dict(op, compiled=True), left())
                if kh.get("unavailable") or kh.get("type") == "error":
                    flags.append(Flag("cuda_graph", "the torch.compile'd reference could not be replayed from a "
                                                    f"CUDA graph ({kh.get('unavailable') or kh.get('message')}); "
                                                    "no compile speedup", severity="warn"))
                    compiled, comp_s = False, []
                else:
                    comp_s += kh["times_us"]
        return self._graph_timings(acc, comp_s)

    @staticmethod
    def _replays(shape: dict | None = None) -> dict:
        """Empty graph-replay rounds (`_graph_round` fills them), with the round's calls and warm-up where given."""
        return {"ref_s": [], "cand_s": [], "ref_r": [], "cand_r": [], "shape": shape or {}}

    def _graph_least(self) -> int:
        """The fewest graph-replay rounds: `graph_rounds`, or the fixed rounds a timing_precision of 0 asks for."""
        cfg = self.config
        return min(cfg.graph_rounds, cfg.timing_rounds) if cfg.timing_precision > 0 else cfg.timing_rounds

    def _graph_round(self, task, r: int, ref_reply, cand_reply, first, flags, acc: dict) -> bool:
        """Check a graph-replay round's candidate reply against the reference's (raises Aborted where its outputs
        refuse it) and add the round to `acc`; False, flagged, where either program could not be replayed."""
        (rh, rt), (ch, ct) = ref_reply, cand_reply
        if rh.get("type") == "error":
            rh = {"unavailable": rh.get("message", "error")}
        if rh.get("unavailable") or ch.get("unavailable"):
            who = "reference" if rh.get("unavailable") else "candidate"
            if self._current is not None:  # its process may compute wrong results after a failed capture
                self._current.uncaptured = who
            flags.append(Flag("cuda_graph", f"graph replay not timed (the {who}): "
                                            f"{rh.get('unavailable') or ch.get('unavailable')}; the speedup is "
                                            "per-call latency", severity="warn"))
            return False
        bad = self._check_samples(task, rt, ct, first)
        if bad:
            flags.append(Flag("timed_outputs", f"graph replay round {r + 1}: {bad}", hack="result_replay"))
            raise Aborted({"status": "rejected", "flags": flags,
                            "message": f"outputs of replayed calls are wrong: {bad}"})
        self._add_round(task, acc["ref_r"], acc["cand_r"], rh, ch)
        acc["ref_s"] += rh["times_us"]
        acc["cand_s"] += ch["times_us"]
        return True

    @staticmethod
    def _graph_timings(acc: dict, comp_s: list | None = None) -> dict:
        """The graph-replay fields of a Verdict from `acc`'s rounds (`_graphs`)."""
        rg = Timing.from_samples(acc["ref_s"], "cuda_graph", rounds_us=acc["ref_r"])
        cg = Timing.from_samples(acc["cand_s"], "cuda_graph", rounds_us=acc["cand_r"])
        return {"reference_graph": rg, "candidate_graph": cg, "graph_speedup": _ratio(rg, cg),
                "graph_stderr": _relative_stderr(acc["ref_r"], acc["cand_r"]),
                "reference_compiled_graph": Timing.from_samples(comp_s, "cuda_graph") if comp_s else None}

    BEHIND_FLOOR_US = 100.0  # an idle thread pool's bookkeeping after a call is a few tens of us of CPU

    @classmethod
    def _behind(cls, header: dict) -> bool:
        """Whether the candidate's threads went on working after a timed call returned: more CPU time than the
        floor and than half the call itself. A program whose outputs are complete when its call returns has no
        work left to do; one that finishes them behind its caller's back is timed for the part it let be seen."""
        return header.get("behind_us", 0.0) > max(cls.BEHIND_FLOOR_US, 0.5 * header.get("behind_call_us", 0.0))

    def _check_samples(self, task, rt, ct, first) -> str:
        """'' when every sampled output element of every timed call matches the reference's."""
        if set(rt) != set(ct):
            return "the timed calls returned a different number of outputs"
        for key in sorted(rt):
            call, out = key[1:].split("o")
            dtype = first["dtypes"].get(out, torch.float32)
            atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, self._policy)
            scale = 1.0 if self._policy == "kernelbench" else first["scales"].get(out, 1.0)  # its atol is absolute
            # an output found accurate against the exact result differs from the reference by the reference's own
            # rounding error, which may exceed the tolerance: the timed checks allow three times what was seen
            atol, rtol = max(atol, 3 * self._accurate.get(out, 0.0)), max(rtol, 3 * self._accurate.get(out, 0.0))
            if not cmp.compare_samples(ct[key], rt[key], scale, atol, rtol):
                return f"timed call {call} output {out} does not match"
        return ""

    def _recheck(self, task, candidate, speedup, stderr, kind, left, flags, first, shape):
        """Re-measure a large speedup in a fresh worker beside the reference, by the same adaptive, alternating
        procedure as the first measurement (`kind`: "time" or "graph"). A re-measurement lower beyond the
        measurements' errors (`_refuted`) is made once more in another fresh worker: a speedup that both refute is
        impossible_speed; one that the re-measurements do not both refute keeps the lowest value, with an
        unstable_timing warning where they disagree. Returns (reference, candidate, speedup) of the lowest
        re-measurement when it is lower than `speedup`, else None."""
        measured = []
        for _ in range(2):
            got = self._measure_fresh(task, candidate, kind, left, flags, first, shape)
            if got is None:
                return None
            measured.append(got)
            if not _refuted(speedup, stderr, got[2], got[3]):
                break
        lowest = min(measured, key=lambda g: g[2])
        seen = ", ".join(f"{g[2]:.2f}×" for g in measured)
        if all(_refuted(speedup, stderr, g[2], g[3]) for g in measured) and len(measured) == 2:
            # CPU timings on a shared machine wander too much to reject on; a GPU's do not.
            flags.append(Flag("recheck", f"speedup {speedup:.2f}× did not hold in two fresh workers ({seen} "
                                         "there, each lower beyond the measurements' errors)", hack="impossible_speed",
                              severity="reject" if self.device.type == "cuda" else "warn"))
        elif any(_refuted(speedup, stderr, g[2], g[3]) for g in measured):
            flags.append(Flag("unstable_timing", f"speedup {speedup:.2f}× re-measured in fresh workers as {seen}: "
                                                 "the measurements disagree beyond their errors; the lowest is kept",
                              severity="warn"))
        flags.append(Flag("recheck", f"speedup above {self.config.recheck_speedup:g}× re-measured in a fresh "
                                     f"worker: {speedup:.2f}× then {seen}; the lowest is kept", severity="warn"))
        return lowest[:3] if lowest[2] < speedup else None

    def _recheck_threshold(self, task) -> float:
        """The speedup above which a job's speedup is re-measured in a fresh worker."""
        return max(self.config.recheck_speedup, task.meta.suspicious_speedup or 0)

    def _foresee_recheck(self, task, ratio: float) -> None:
        """Once the job under way reads a speedup above the re-measurement threshold (its correctness trials' call
        times, or a timing round), start its fresh worker and build on a CPU lane (`_fresh_worker`) while the device
        times on: the re-measurement then waits only for its own timing. A speedup that ends below the threshold
        leaves the worker unused."""
        p = self._current
        if p is None or p.foreseen or self._closed or not ratio > self._recheck_threshold(task):
            return
        p.foreseen = True
        p.fresh = self._ahead.submit(self._fresh_worker, task, p.candidate, p.state)

    def _fresh_worker(self, task, candidate, state, timeout: float | None = None,
                      what: str = "re-measurement build") -> tuple[Worker, object]:
        """A fresh candidate worker with the candidate loaded and built: (worker, its build slot); raises Aborted
        (with the worker closed) when the build fails. `timeout` defaults to the build's own limit."""
        again, slot = self._candidate_worker(candidate)
        try:
            self._ask(again, self._load_op(task, state["init"]["seed"], candidate),
                      timeout or self.config.build_timeout_s, what)
        except BaseException:
            close_fresh(again, slot)
            raise
        return again, slot

    def _measure_fresh(self, task, candidate, kind, left, flags, first, shape):
        """The candidate loaded in a fresh worker and timed beside the reference as in `_timing` or `_graphs`:
        (reference, candidate, speedup, its relative standard error), or None (flagged) where it cannot be. The
        worker is the one started ahead for this job (`_foresee_recheck`) when there is one, else started now."""
        p = self._current  # the job under way holds the reference
        ref, state = p.ref, p.state
        ahead, p.fresh = p.fresh, None
        if ahead is not None:
            try:
                again, slot = ahead.result(timeout=left())
            except FutureTimeout:
                drop_fresh(ahead)
                raise Aborted({"status": "timeout", "message": "re-measurement build: the evaluation's time ran out"})
        else:
            again, slot = self._fresh_worker(task, candidate, state)
        seen = []  # the measurement's own flags: only its refusals (wrong timed outputs ...) count
        try:
            if kind == "graph":
                g = self._graphs(task, ref, again, left, seen, first, shape, compiled=False)
                got = (g["reference_graph"], g["candidate_graph"], g["graph_speedup"], g["graph_stderr"]) if g \
                    else None
            else:
                rt, ct, _, stderr = self._timing(task, ref, again, left, seen, first, compiled=False)
                got = (rt, ct, _ratio(rt, ct), stderr)
        finally:
            close_fresh(again, slot)
        flags.extend(f for f in seen if f.severity == "reject")
        if got is None:
            flags.append(Flag("recheck", "the speedup could not be re-measured in a fresh worker: "
                                         f"{'; '.join(f.message for f in seen)[:300]}", hack="impossible_speed"))
        return got


def close_fresh(worker: Worker, slot) -> None:
    """Close a re-measurement's worker and remove its build slot (its build is the job's own, kept already)."""
    worker.close()
    if slot is not None:
        shutil.rmtree(slot, ignore_errors=True)


def drop_fresh(future) -> None:
    """Give up a fresh worker started ahead for a re-measurement that did not happen: closed once it is up."""
    if future is None or future.cancel():
        return
    future.add_done_callback(lambda f: f.exception() is None and close_fresh(*f.result()))


def _relative_stderr(ref_r: list[float], cand_r: list[float]) -> float:
    """Relative standard error of the speedup from its per-round ratios (the rounds' reference over candidate
    medians), inf with fewer than two rounds: the standard error of their logarithms' mean, less the fifth of the
    rounds (rounded down) farthest from their median. The speedup is a ratio of medians, which a round slowed as a
    whole (a clock change, another process's burst on the host) barely moves; counted, such a round would read as
    imprecision and ask for every round up to the limit, for a speedup it does not change. Rounds split between two
    speeds still disagree once the farthest are set aside, and ask for more."""
    if len(ref_r) < 2:
        return math.inf
    logs = [math.log(max(a, 1e-9) / max(b, 1e-9)) for a, b in zip(ref_r, cand_r)]
    mid = statistics.median(logs)
    kept = sorted(logs, key=lambda x: abs(x - mid))[:len(logs) - len(logs) // 5]
    return statistics.stdev(kept) / math.sqrt(len(kept))


def _ratio(ref: Timing | None, cand: Timing | None) -> float | None:
    """Reference time over candidate time (medians); None when either is missing."""
    if ref is None or cand is None:
        return None
    return ref.median_us / cand.median_us if cand.median_us > 0 else float("inf")


def _refuted(speedup: float, stderr: float | None, again: float, again_stderr: float | None) -> bool:
    """Whether a re-measured speedup `again` refutes `speedup`: lower by a factor above 1.5, and by more than three
    combined standard errors (relative errors `stderr`, `again_stderr`; none known counts as none)."""
    spread = math.hypot(speedup * (stderr if stderr and math.isfinite(stderr) else 0.0),
                        again * (again_stderr if again_stderr and math.isfinite(again_stderr) else 0.0))
    return again < speedup / 1.5 and speedup - again > 3 * spread
