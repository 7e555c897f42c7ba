"""Suite discovery: levels from folder names, candidates by relative path, file name or KernelBench problem id,
skipped files."""
from pathlib import Path

import pytest

from kernelrl.bench.suite import SuiteError, discover, level_of, select_levels

REF = '''"""{doc}"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
'''
CAND = '''import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x + x
'''
REPO = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("rel, level", [("level1/a.py", "level1"), ("level_2/b.py", "level2"),
                                        ("Level-3/sub/c.py", "level3"), ("extras/d.py", "extras"),
                                        ("e.py", "")])
def test_level_comes_from_the_folder_name(rel, level):
    assert level_of(rel) == level


def test_candidates_match_by_relative_path_then_by_file_name(tmp_path):
    for rel in ("level1/a.py", "level1/b.py", "level2/c.py"):
        write(tmp_path / "suite" / rel, REF.format(doc=rel))
    exact = write(tmp_path / "cands" / "level1" / "a.py", CAND)
    by_name = write(tmp_path / "cands" / "flat" / "b.py", CAND)
    suite = discover(tmp_path / "suite", tmp_path / "cands")
    found = {t.rel_path: t.candidate_path for t in suite.tasks}
    assert found == {"level1/a.py": str(exact), "level1/b.py": str(by_name), "level2/c.py": None}


def test_a_name_shared_by_several_candidates_goes_to_the_one_in_the_tasks_level(tmp_path):
    write(tmp_path / "suite" / "level2" / "x.py", REF.format(doc="x"))
    write(tmp_path / "cands" / "level1" / "x.py", CAND)
    mine = write(tmp_path / "cands" / "other" / "level2" / "x.py", CAND)
    suite = discover(tmp_path / "suite", tmp_path / "cands")
    assert suite.tasks[0].candidate_path == str(mine)


def test_an_ambiguous_name_matches_nothing(tmp_path):
    write(tmp_path / "suite" / "x.py", REF.format(doc="x"))
    write(tmp_path / "cands" / "p" / "x.py", CAND)
    write(tmp_path / "cands" / "q" / "x.py", CAND)
    assert discover(tmp_path / "suite", tmp_path / "cands").tasks[0].candidate_path is None


def test_files_that_are_not_references_are_skipped_with_a_reason(tmp_path):
    write(tmp_path / "level1" / "good.py", REF.format(doc="good"))
    write(tmp_path / "level1" / "helper.py", "X = 1\n")
    write(tmp_path / "level1" / "__init__.py", "")
    suite = discover(tmp_path)
    assert [t.rel_path for t in suite.tasks] == ["level1/good.py"]
    assert [rel for rel, _ in suite.skipped] == ["level1/helper.py"]
    assert "Model" in suite.skipped[0][1]


def test_a_candidates_folder_inside_the_suite_is_not_read_as_tasks(tmp_path):
    write(tmp_path / "level1" / "a.py", REF.format(doc="a"))
    write(tmp_path / "mine" / "level1" / "a.py", CAND)
    suite = discover(tmp_path, tmp_path / "mine")
    assert [t.rel_path for t in suite.tasks] == ["level1/a.py"] and not suite.skipped


def test_the_task_carries_its_level_and_description(tmp_path):
    write(tmp_path / "level_1" / "a.py", REF.format(doc="Doubles x."))
    t = discover(tmp_path).tasks[0]
    assert (t.level, t.task.level, t.name, t.task.meta.description) == ("level1", "level1", "level_1/a",
                                                                       "Doubles x.")


def test_a_folder_without_references_is_an_error_that_says_what_is_needed(tmp_path):
    write(tmp_path / "notes.py", "X = 1\n")
    with pytest.raises(SuiteError, match="get_inputs"):
        discover(tmp_path)
    with pytest.raises(SuiteError, match="no such suite"):
        discover(tmp_path / "nope")


def test_the_project_suite_has_three_levels_and_a_quarter_with_candidates():
    suite = discover(REPO / "suite", REPO / "suite" / "candidates")
    assert not suite.skipped
    assert len(suite.tasks) >= 42
    assert suite.levels == ("level1", "level2", "level3")
    with_cand = [t for t in suite.tasks if t.candidate_path]
    assert len(with_cand) * 4 >= len(suite.tasks)
    every_candidate = sorted((REPO / "suite" / "candidates").rglob("*.py"))
    assert len(with_cand) == len(every_candidate)  # no candidate without its task


def test_kernelbench_generation_runs_match_by_level_and_problem_id(tmp_path):
    for rel in ("level1/12_Matmul_with_diagonal.py", "level2/3_Conv_Add.py", "level3/1_MLP.py", "level3/2_Other.py"):
        write(tmp_path / "suite" / rel, REF.format(doc=rel))
    write(tmp_path / "run" / "level_1_problem_12_sample_1_kernel.py", CAND)
    first = write(tmp_path / "run" / "level_1_problem_12_sample_0_kernel.py", CAND)  # the lowest sample wins
    folder = write(tmp_path / "run" / "level2" / "3_my_fused_conv.py", CAND)
    flat = write(tmp_path / "run" / "level_3_problem_1_sample_0_kernel.py", CAND)
    write(tmp_path / "run" / "level_1_problem_2_sample_0_kernel.py", CAND)  # level 1's problem 2, not level 3's
    found = {t.rel_path: t.candidate_path for t in discover(tmp_path / "suite", tmp_path / "run").tasks}
    assert found == {"level1/12_Matmul_with_diagonal.py": str(first), "level2/3_Conv_Add.py": str(folder),
                     "level3/1_MLP.py": str(flat), "level3/2_Other.py": None}


def test_the_file_name_rule_comes_before_the_problem_id(tmp_path):
    write(tmp_path / "suite" / "level1" / "5_Relu.py", REF.format(doc="relu"))
    write(tmp_path / "cands" / "level_1_problem_5_sample_0_kernel.py", CAND)
    same_name = write(tmp_path / "cands" / "elsewhere" / "5_Relu.py", CAND)
    assert discover(tmp_path / "suite", tmp_path / "cands").tasks[0].candidate_path == str(same_name)


def test_two_candidates_for_one_problem_match_nothing_and_say_why(tmp_path):
    write(tmp_path / "suite" / "level1" / "7_Gelu.py", REF.format(doc="gelu"))
    write(tmp_path / "cands" / "level1" / "7_a.py", CAND)
    write(tmp_path / "cands" / "level1" / "7_b.py", CAND)
    task = discover(tmp_path / "suite", tmp_path / "cands").tasks[0]
    assert task.candidate_path is None
    assert "2 candidates for level1 problem 7" in task.note


def test_levels_are_selected_by_number_or_name(tmp_path):
    for rel in ("level1/a.py", "level2/b.py", "level3/c.py"):
        write(tmp_path / rel, REF.format(doc=rel))
    suite = discover(tmp_path)
    assert [t.rel_path for t in select_levels(suite, ["1", "level_3"]).tasks] == ["level1/a.py", "level3/c.py"]
    with pytest.raises(SuiteError, match="no tasks in level '4'; this suite has level1, level2, level3"):
        select_levels(suite, ["4"])


def test_with_every_sample_each_candidate_of_a_generated_run_is_a_task_of_its_own_in_sample_order(tmp_path):
    write(tmp_path / "suite" / "level1" / "12_Matmul.py", REF.format(doc="matmul"))
    write(tmp_path / "suite" / "level1" / "13_Other.py", REF.format(doc="other"))
    paths = {s: write(tmp_path / "run" / f"level_1_problem_12_sample_{s}_kernel.py", CAND) for s in (10, 2, 0)}
    tasks = discover(tmp_path / "suite", tmp_path / "run", samples="all").tasks
    assert [(t.id, t.candidate_path) for t in tasks] == [
        ("level1/12_Matmul#0", str(paths[0])), ("level1/12_Matmul#2", str(paths[2])),
        ("level1/12_Matmul#10", str(paths[10])), ("level1/13_Other", None)]
    assert {t.name for t in tasks} == {"level1/12_Matmul", "level1/13_Other"}


def test_with_every_sample_a_candidate_matched_by_name_is_the_only_one_and_a_shared_sample_matches_none(tmp_path):
    write(tmp_path / "suite" / "level1" / "5_Relu.py", REF.format(doc="relu"))
    write(tmp_path / "suite" / "level1" / "7_Gelu.py", REF.format(doc="gelu"))
    write(tmp_path / "cands" / "level_1_problem_5_sample_0_kernel.py", CAND)
    same_name = write(tmp_path / "cands" / "5_Relu.py", CAND)
    write(tmp_path / "cands" / "level_1_problem_7_sample_1_kernel.py", CAND)
    write(tmp_path / "cands" / "level1_problem_7_sample_1.py", CAND)
    relu, gelu = discover(tmp_path / "suite", tmp_path / "cands", samples="all").tasks
    assert (relu.id, relu.candidate_path) == ("level1/5_Relu", str(same_name))
    assert gelu.candidate_path is None and "2 candidates for level1 problem 7" in gelu.note


def test_an_unknown_samples_choice_is_an_error_that_names_the_choices(tmp_path):
    write(tmp_path / "suite" / "a.py", REF.format(doc="a"))
    with pytest.raises(SuiteError, match="samples must be one of lowest, all"):
        discover(tmp_path / "suite", samples="best")
