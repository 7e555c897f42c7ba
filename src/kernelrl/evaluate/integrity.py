"""The integrity report: the candidate worker's tampering evidence, task policies checked by watching what runs,
the roofline floor, and the static audit's findings, as flags under the job's precision policy."""
from __future__ import annotations

import secrets


from kernelrl.verdict import Flag, Timing


# Library operators that do a task's heavy work; a task with the own_kernels policy may not call them.
_LIBRARY_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::conv", "aten::_convolution", "aten::cudnn_", "aten::mkldnn_", "aten::scaled_dot_product",
                "aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")


class Integrity:
    """Evidence beyond the outputs (mixed into `Evaluator`)."""

    def _report(self, cand, left, flags, reported: dict, when: str = "after the timed calls") -> dict:
        """The candidate worker's tampering evidence, as flags; its confinement report is returned."""
        h, _ = self._ask(cand, {"op": "report", "when": when}, left(), "integrity report")
        for finding in h.get("findings", []):
            hack, message = finding[0], finding[1]
            severity = finding[2] if len(finding) > 2 and finding[2] in ("warn", "reject") else "reject"
            flags.append(_under_policy(Flag("runtime_evidence", message, hack=hack, severity=severity), self._policy))
        reported.update(h.get("confinement", {}), done=True)
        return h.get("confinement", {})

    def _policies(self, task, ref, cand, left, flags):
        """Task policies checked by watching what runs: own_kernels forbids the reference's library ops."""
        if "own_kernels" not in task.meta.policies:
            return
        seed = secrets.randbits(62)
        ref_ops = set(ref.request({"op": "profile", "seed": seed}, left())[0].get("ops", []))
        cand_ops = set(self._ask(cand, {"op": "profile", "seed": seed}, left(), "profile")[0].get("ops", []))
        heavy = {op for op in ref_ops & cand_ops if any(k in op for k in _LIBRARY_OPS)}
        if heavy:
            flags.append(Flag("own_kernels", f"the task asks for the candidate's own kernels, but it runs the "
                                             f"library operators {sorted(heavy)} that the reference uses",
                              hack="reference_fallback"))

    def _peaks(self):
        from kernelrl.evaluate.guards import roofline

        if self.device.type == "cuda":
            return roofline.cuda_peaks(self._device_name)
        if self._cpu_peaks is None:
            self._cpu_peaks = roofline.cpu_peaks()
        return self._cpu_peaks

    def _roofline(self, state, first, cand_t: Timing, flags):
        """Flag a call timed below what writing the outputs takes on this machine: work every correct program must
        do (never the reference's flops: a program may do less arithmetic than the reference). The fastest call is
        judged: no honest call beats the floor, and a faked time stays under it in the calls a loaded machine did
        not slow (a median can cross it when the harness's own overhead per call is stretched)."""
        from kernelrl.evaluate.guards import roofline

        counted = [n for n in (state.get("written_bytes"), first["cand_header"].get("written_bytes"))
                   if n is not None]
        peaks = self._peaks()
        if not counted or peaks is None:
            return
        why = roofline.below_floor(cand_t.min_us, min(counted), peaks)
        if why:
            flags.append(Flag("roofline", why, hack="impossible_speed"))


def _under_policy(flag: Flag, policy: str) -> Flag:
    """`flag` as `policy` judges it: the kernelbench policy allows reduced-precision math (a warning, not a
    rejection); every other class of finding stands under every policy."""
    if policy == "kernelbench" and flag.hack == "precision_downgrade" and flag.severity == "reject":
        return Flag(flag.check, f"{flag.message} (allowed by the kernelbench policy)", flag.hack, "warn")
    return flag


def _static_flags(source: str, task_source: str | None = None) -> list[Flag]:
    """Findings of the static audit (a first filter and evidence; runtime checks decide)."""
    try:
        from kernelrl.evaluate.audit import audit
    except ImportError:
        return []
    try:
        findings = audit(source, task_source)
    except Exception:
        return []
    out = []
    for f in findings:
        out.append(Flag(check="static_audit", message=f"line {getattr(f, 'line', '?')}: {getattr(f, 'message', f)}",
                        hack=getattr(f, "hack", None) or getattr(f, "hack_class", None),
                        severity=getattr(f, "severity", "warn") if getattr(f, "severity", "warn") in ("warn", "reject")
                        else "warn"))
    return out
