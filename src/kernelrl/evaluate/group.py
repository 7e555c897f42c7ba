"""Candidates of one task judged together (`Evaluator.judge_group`): each one's correctness trials as `judge` runs
them, then their timing in shared rounds, the reference timed once a round beside every candidate still being timed
(eager calls, then CUDA-graph replays), then each one's integrity report and re-measurement. A group of n times the
reference n times less often than n jobs judged alone, while every candidate's speedup is still measured side by
side with the reference, in the same rounds: what a GRPO group (several samples of one prompt) costs the device."""
from __future__ import annotations

import secrets
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from kernelrl.evaluate.job import Aborted, Prepared
from kernelrl.verdict import Verdict


@dataclass(eq=False)
class _Member:
    """A candidate of a group being timed: its job, its rounds so far, and how its timing ended early, if it did."""

    p: Prepared
    acc: dict = field(default_factory=dict)  # its eager rounds (`TimedRounds._rounds`)
    aborted: Aborted | None = None
    graphs: dict | None = None  # its graph-replay rounds (`TimedRounds._replays`), once they start
    replayed: bool = True  # its graph replays were timed (False: either program could not be replayed)

    def rounds(self, kind: str) -> dict:
        return self.acc if kind == "time" else self.graphs


class GroupTiming:
    """Judging a task's candidates together (mixed into `Evaluator`)."""

    def judge_group(self, group: list[Prepared]) -> list[Verdict | BaseException]:
        """The GPU stage of prepared candidates of one task, in order: their Verdicts (an exception where the
        evaluation could not run, as `judge` raises it). Judged one by one (`judge`) where they cannot share their
        timing: a single candidate, other references, a reference that carries state between calls or writes into
        its inputs (each candidate's trials and rounds start from it as built), compiled references compared."""
        if not self._groupable(group):
            return [self._judged(p) for p in group]
        out: dict[int, Verdict | BaseException] = {}
        with self._lock:
            try:
                timed, refused = self._group_untimed(group, out)
                self._group_timed(timed, refused, out)
            finally:
                self._current = None
                self._rest(group[0].ref)
                self._stage.let_go()
                for p in group:
                    self.release(p)
        return [out[id(p)] for p in group]

    def _judged(self, p: Prepared) -> Verdict | BaseException:
        try:
            return self.judge(p)
        except Exception as e:  # the evaluation could not run (EvaluationError): the scheduler sets it as the outcome
            return e

    def _groupable(self, group: list[Prepared]) -> bool:
        first = group[0]
        return (len(group) > 1 and not self.config.compare_compile and first.ref is not None
                and not first.state.get("stateful") and not first.state.get("mutates")
                and all(p.ref is first.ref and p.task.digest == first.task.digest for p in group))

    @contextmanager
    def _as(self, p: Prepared):
        """The evaluation state of `p` swapped in (the members take turns on the GPU stage's thread), and its worker
        running: outside its turns a member's worker is parked, stopped while the device is held alone, so that no
        work a candidate left running touches the device while the reference or another member is timed."""
        for k, v in p.job_state.items():
            setattr(self, k, v)
        if p.cand is not None:
            self._gpu.unpark(p.cand)
        try:
            yield
        finally:
            p.job_state = {k: getattr(self, k) for k in self.PER_JOB}
            if p.cand is not None and not p.finished:
                self._gpu.park(p.cand)

    def _group_untimed(self, group: list[Prepared], out: dict) -> tuple[list[Prepared], list[tuple]]:
        """Each candidate's GPU stage up to its timing; those decided in their trials get their Verdicts in `out`.
        The ones to time, with the device held alone and their policies checked, and (job, Verdict fields) of those
        the policies refused, to end with the others (no worker is killed beside the rounds)."""
        start = time.monotonic()
        self._stage.hold(shared=self._shares(group[0].state))
        ready = []
        for p in group:
            self._open(p, start)
            with self._as(p):
                try:
                    kw = self._untimed(p)
                    if kw is None:
                        ready.append(p)
                        continue
                except Aborted as a:
                    kw = self._cut(a, p)
                except Exception as e:  # the reference failed: as `judge` raises it
                    kw = e
                self._end(p, kw, out)
        if not ready:
            return [], []
        t0 = time.monotonic()
        self._stage.to_exclusive()  # nothing else runs on the device while the programs are timed
        for p in ready:
            p.phases.add("alone", (time.monotonic() - t0) / len(ready))
        timed, refused = [], []
        for p in ready:
            with self._as(p):
                p.phases.resume()
                try:
                    self._before_timing(p)
                    p.phases.mark("timing")
                    timed.append(p)
                except Aborted as a:
                    refused.append((p, self._cut(a, p)))
        return timed, refused

    def _group_timed(self, timed: list[Prepared], refused: list[tuple], out: dict) -> None:
        """Time the candidates together (`_group_rounds`), then finish each one's GPU stage (`_timed`); end them
        all, with those `refused` before their timing."""
        if not timed:
            return self._end_all(refused, out)
        first = timed[0]
        shared = self._rounds({}, first.first)  # one input seed and one round shape: the reference's rounds serve all
        members = [_Member(p, self._rounds({"seed": shared["seed"], "shape": shared["shape"]}, p.first)) for p in timed]
        try:
            self._group_rounds(first.task, first.ref, members, "time")
            if self.config.use_graphs and self.device.type == "cuda":
                timing = [m for m in members if m.aborted is None and m.acc["ref_s"]]
                shape = self._round_for(statistics.median(timing[0].acc["ref_s"])) if timing else {}
                for m in members:
                    m.graphs = self._replays(shape)
                self._group_rounds(first.task, first.ref, members, "graph")
        except Exception as e:  # the reference failed while being timed: as `judge` raises it, for every one left
            return self._end_all(refused + [(m.p, e) for m in members], out)
        # Each one's integrity report and re-measurement; their workers are killed once all are done (a worker's
        # end is not timed beside: `_finish`).
        done = []
        for m in members:
            with self._as(m.p):
                m.p.phases.resume()
                try:
                    if m.aborted is not None:  # in the shared rounds, whose share of time it has had
                        kw = self._aborted(m.aborted, m.p)
                    else:
                        kw = self._timed(m.p, measured=(m.acc, self._graph_timings(m.graphs) if m.graphs and
                                                        m.replayed else {}))
                except Aborted as a:
                    kw = self._cut(a, m.p)
                except Exception as e:  # the reference failed in a re-measurement: as `judge` raises it
                    kw = e
                m.p.phases.mark("finish")
                done.append((m.p, kw))
        self._end_all(refused + done, out)

    def _end_all(self, ended: list[tuple], out: dict) -> None:
        """End each (job, Verdict fields or the exception that ended it) into `out` (`_end`)."""
        for p, kw in ended:
            with self._as(p):
                p.phases.resume()
                self._end(p, kw, out)

    def _end(self, p: Prepared, kw: dict | BaseException, out: dict) -> None:
        """A member's Verdict (from its fields `kw`) or the exception that ended it into `out`, its worker gone."""
        self._finish(p, in_stage=True)
        out[id(p)] = self._verdict(p, kw) if isinstance(kw, dict) else kw

    def _group_rounds(self, task, ref, members: list[_Member], kind: str) -> None:
        """Rounds of eager calls (`kind` "time") or graph replays ("graph") of the reference and every member still
        being timed, as `_timing` and `_graphs` run them for one: the same request to each (one input seed, fresh
        inputs every call), the reference first in even rounds and last in odd ones, the members in an order that
        turns each round; each member's rounds end at its own precision (or when its outputs refuse it, in
        `m.aborted`), and its share of each round's time is counted to its phase."""
        eager = kind == "time"
        bounds = self._latency_bounds() if eager else {"least": self._graph_least()}
        most = min(bounds.get("most") or self._round_limit(), self._round_limit())
        shape = members[0].rounds(kind)["shape"]  # one dict for all, its first round's update read by the next
        seed = members[0].acc["seed"] if eager else secrets.randbits(62)
        for r in range(most):
            live = [m for m in members if m.aborted is None and (eager or m.replayed) and not self._precise_enough(
                m.rounds(kind)["ref_r"], m.rounds(kind)["cand_r"], bounds.get("precision"), bounds.get("least"))]
            if not live:
                break
            t0 = time.monotonic()
            op = self._time_op(seed, kind=kind, **shape)
            turn = r % len(live)
            replies, rref = [], None
            try:
                if r % 2 == 0:
                    rref = self._group_reference(task, ref, op, live, eager)
                for m in live[turn:] + live[:turn]:
                    with self._as(m.p):
                        try:
                            replies.append((m, self._ask(m.p.cand, op, m.p.left(), f"timing round {r + 1}" if eager
                                                         else "graph replay")))
                        except Aborted as a:
                            m.aborted = a
                if r % 2 == 1:
                    rref = self._group_reference(task, ref, op, live, eager)
            except Aborted as a:  # every member's time ran out
                for m in live:
                    m.aborted = m.aborted or a
                return
            for m, reply in replies:
                with self._as(m.p):
                    try:
                        if eager:
                            self._eager_round(task, r, rref, reply, m.p.first, m.p.flags, m.acc)
                        elif not self._graph_round(task, r, rref, reply, m.p.first, m.p.flags, m.graphs):
                            m.replayed = False
                    except Aborted as a:
                        m.aborted = a
            share = (time.monotonic() - t0) / len(live)
            for m in live:
                m.p.phases.add("timing" if eager else "graphs", share)

    def _group_reference(self, task, ref, op: dict, live: list[_Member], eager: bool):
        """The reference's reply to a group's round, within the most time a member left has (Aborted where none has
        any); an eager round's failure raises EvaluationError, a graph round's is read as `_graph_round` reads it."""
        lefts, cut = [], None
        for m in live:
            try:
                lefts.append(m.p.left())
            except Aborted as a:
                cut = a
        if not lefts:
            raise cut
        most = max(lefts)
        return self._reference_round(task, ref, op, lambda cap=None: min(most, cap) if cap else most) if eager \
            else ref.request(op, most)
