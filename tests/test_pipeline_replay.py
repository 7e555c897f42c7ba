"""benchmarks/pipeline_replay.py: a run's phases replayed through the scheduler's rules, on jobs made here."""
import json

import pytest
from scripts import load_script

from kernelrl.bench.result import TaskResult
from kernelrl.bench.resume import RESULTS_FILE, ResultLog
from kernelrl.verdict import Verdict

replay = load_script("pipeline_replay")


def test_a_device_bound_run_takes_its_gpu_stage_and_a_lane_bound_one_its_cpu_stage_over_the_lanes():
    wall, busy = replay.replay([("a", 0.1, 1.0)] * 10, lanes=4, lookahead=3)
    assert wall == pytest.approx(0.1 + 10.0) and busy == pytest.approx(10.0 / 10.1)
    wall, busy = replay.replay([("a", 10.0, 0.1)] * 8, lanes=2, lookahead=3)
    assert wall == pytest.approx(40.0 + 0.2) and busy == pytest.approx(0.8 / 40.2)  # the last two ready together


def test_a_group_is_judged_together_and_its_members_count_in_the_room_ahead():
    # eight jobs of one task prepared at once: one judgement of all eight
    assert replay.replay([("a", 1.0, 1.0)] * 8, lanes=8, lookahead=3, group=8, room_judged=8)[0] == pytest.approx(9.0)
    # a group of 4 judged while the next task's fast members wait for its slow one: a room that counts one job
    # judged leaves 4 + 4 + 1 - 4 - 3 = 2 of the 4 lanes working, so the task after is prepared later
    jobs = [(t, prep, 1.0) for t in "abcdefgh" for prep in (0.5, 0.5, 0.5, 8.0)]
    whole = replay.replay(jobs, lanes=4, lookahead=4, group=4, room_judged=4)[0]
    one = replay.replay(jobs, lanes=4, lookahead=4, group=4, room_judged=1)[0]
    assert (whole, one) == (pytest.approx(32.5), pytest.approx(34.5))


def test_the_script_replays_a_bench_folder_in_suite_order_and_prints_the_measured_run(tmp_path, capsys):
    log = ResultLog(tmp_path / RESULTS_FILE)
    for task, sample in (("level1/b", 1), ("level1/a", 0), ("level1/b", 0)):
        phases = {"reference": 1.0, "start_and_build": 2.0, "first_call": 1.0, "compiling": 0.5, "waited": 9.0,
                  "correctness": 0.5, "timing": 0.25, "graphs": 0.25}
        log.append(f"{task}#{sample}", TaskResult(task=task, level="level1", status="ok", speedup=1.0, sample=sample,
                                                  verdict=Verdict(status="ok", speedup=1.0, phases=phases)))
    (tmp_path / "runs.jsonl").write_text(json.dumps({"wall_s": 9.0, "judged": 3, "per_hour": 1200.0,
                                                     "device_busy": {"cuda": 0.4}}) + "\n")
    jobs = replay.jobs_of(replay.load(tmp_path)[0])
    # compiling is part of first_call and waited is neither stage: 4 s on a lane (1 of them the first call), 1 s on
    # the device
    assert jobs == [("level1/a", 4.0, 1.0, 1.0, 1.0), ("level1/b", 4.0, 1.0, 1.0, 1.0),
                    ("level1/b", 4.0, 1.0, 1.0, 1.0)]
    # each reference started ahead: no job but the first task's waits for it
    assert replay.references_ahead(jobs) == [jobs[0], ("level1/b", 3.0, 1.0, 1.0, 1.0), ("level1/b", 3.0, 1.0, 1.0, 1.0)]
    assert replay.main([str(tmp_path), "--lanes", "1,3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| measured | 3 | 9.0 | 1200 | 40% |"
    # one lane: 4 + 4 + 4 s of preparation and the last job's 1 s; three lanes: all prepared at 4 s, then 3 s
    assert "| 1 lanes," in out[3] and "| 3 | 13.0 |" in out[3] and "| 3 | 7.0 |" in out[4]


def test_first_calls_off_the_lanes_free_a_lane_once_its_job_is_built():
    # 10 s of CPU stage a job, 8 of them its first call: two lanes build two jobs every 2 s instead of every 10 s
    jobs = [("a", 10.0, 0.1, 8.0)] * 4
    assert replay.replay(jobs, lanes=2, lookahead=8)[0] == pytest.approx(20.2)
    assert replay.replay(jobs, lanes=2, lookahead=8, first_calls_apart=True)[0] == pytest.approx(12.2)


def test_the_script_repeats_a_run_as_tasks_of_their_own(tmp_path, capsys):
    log = ResultLog(tmp_path / RESULTS_FILE)
    phases = {"reference": 1.0, "start_and_build": 2.0, "first_call": 1.0, "correctness": 0.5, "timing": 0.5}
    log.append("level1/a#0", TaskResult(task="level1/a", level="level1", status="ok", speedup=1.0, sample=0,
                                        verdict=Verdict(status="ok", speedup=1.0, phases=phases)))
    (tmp_path / "runs.jsonl").write_text(json.dumps({"wall_s": 5.0, "judged": 1, "per_hour": 720.0}) + "\n")
    assert replay.main([str(tmp_path), "--lanes", "1", "--repeat", "3"]) == 0
    row = capsys.readouterr().out.splitlines()[3]
    # one lane: three copies' 4 s of preparation each, then the last one's 1 s on the device
    assert "the run 3 times over | 3 | 13.0 |" in row
    with pytest.raises(SystemExit):
        replay.main([str(tmp_path), "--repeat", "0"])
