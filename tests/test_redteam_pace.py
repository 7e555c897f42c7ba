"""benchmarks/redteam_pace.py: a red team's pace and GPU stage, call by call, from a journal made here."""
import json
import lzma

import pytest

from scripts import load_script

redteam_pace = load_script("redteam_pace")


def record(kind, task, at, status="", **phases):
    r = {"kind": kind, "task": task, "policy": "strict", "at": at}
    if kind == "template":
        r.update(name="zeros", status=status, phases={"waited": 9.0, "reference": 3.0, **phases})
    return r


def test_a_journal_is_split_into_calls_by_its_pauses_and_each_reads_its_pace_and_gpu_stage(tmp_path):
    recs = [record("audit", "a", 1000.0), record("template", "a", 1005.0, "incorrect", correctness=0.3, finish=0.2),
            record("template", "a", 1010.0, "ok", correctness=0.5, timing=1.0, graphs=1.0, finish=0.5),
            record("audit", "b", 1020.0),
            record("template", "b", 1050.0, "incorrect", correctness=0.1, finish=0.4),
            record("audit", "c", 5000.0),  # the next call, an hour later
            record("template", "c", 5010.0, "rejected", correctness=1.0, finish=1.0),
            {"kind": "template", "task": "c", "name": "input", "status": "skipped"}]  # no time: left out
    journal = tmp_path / "redteam_strict" / "redteam.jsonl.xz"
    journal.parent.mkdir()
    with lzma.open(journal, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs) + '{"kind": "aud')  # a last line cut short
    first, second = [redteam_pace.summarise(c) for c in redteam_pace.calls(redteam_pace.records(journal), 120)]
    assert (first["audits"], first["judged"], first["span_s"]) == (2, 3, 50.0)
    assert first["tasks_per_100s"] == 4.0 and first["gpu_stage_s"] == 4.0 and first["gpu_share"] == 0.08
    assert first["by_status"]["incorrect"] == pytest.approx({"n": 2, "gpu_stage": 0.5, "correctness": 0.2,
                                                             "finish": 0.3})
    assert first["by_phase"] == pytest.approx({"correctness": 0.9, "alone": 0.0, "timing": 1.0, "graphs": 1.0,
                                               "recheck": 0.0, "finish": 1.1})
    assert (second["audits"], second["judged"], second["first"]) == (1, 1, "c")
    out = tmp_path / "pace.md"
    redteam_pace.main([str(journal), "--out", str(out)])
    rows = out.read_text().splitlines()[2:]
    assert len(rows) == 2
    assert rows[0].startswith("| redteam_strict 1 | strict | 2 (`a` … `b`) | 50 s | 4.0 | 3 | 4 s | 8% | 1, 0, 1, 1, 0, 1 |")
