"""The same candidates judged in three runs (fresh evaluators, fresh secret seeds) get the same status each time:
borderline members of every corpus on the CPU; benchmarks/verdict_repeat.py runs all of them on a GPU."""
from scripts import load_script

verdict_repeat = load_script("verdict_repeat")

# Honest programs whose rounding differs most from their references', reduced-precision ones refused under strict
# and allowed under kernelbench, exploits decided during timing, and programs that keep or reuse what they return.
BORDERLINE = {"conv_folded_divide", "softmax_manual", "layernorm_functional", "row_sum_sq_linalg", "matmul_tf32",
              "precision_downgrade", "result_replay", "background_thread", "class_state", "reference_rewrite",
              "level2/group_norm_swish_fp32"}


def test_every_corpus_lists_its_candidates_with_the_status_they_must_get():
    es = verdict_repeat.entries(["honest", "exploits", "suite"])
    assert {e.corpus for e in es} == {"honest", "exploits", "suite"}
    assert {e.expect for e in es if e.corpus == "exploits" and e.name == "precision_tf32"} == {"ok", "refused"}
    assert all(e.expect == "ok" for e in es if e.corpus != "exploits")


def test_borderline_candidates_get_one_status_in_three_runs(tmp_path):
    todo = [e for e in verdict_repeat.entries(["honest", "exploits", "suite"])
            if e.name in BORDERLINE and e.device != "gpu"]
    assert {e.name for e in todo} == BORDERLINE
    s = verdict_repeat.summarise(verdict_repeat.judge_runs(todo, 3, "cpu", tmp_path, fast=True))
    assert s["runs"] == 3
    assert not s["flips"], {k: [r["status"] + ": " + r["message"] for r in s["by"][k]] for k in s["flips"]}
    assert not s["unexpected"], {k: [r["status"] + ": " + r["message"] for r in s["by"][k]] for k in s["unexpected"]}
