"""benchmarks/stage_profile.py: a py-spy recording of a bench process, read by thread and by kernelrl's frames."""
import lzma

from scripts import load_script

stage_profile = load_script("stage_profile")

RAW = """\
thread (11): judge-cuda;_gpu_stage (kernelrl/scale/local.py:231);wait (threading.py:327);Condition.wait (threading.py:331) 300
thread (11): judge-cuda;judge (kernelrl/evaluate/evaluator.py:215);_check (kernelrl/evaluate/trials.py:118);empty_cache (torch/cuda/memory.py:224) 50
thread (11): judge-cuda;judge (kernelrl/evaluate/evaluator.py:215);Worker.receive (kernelrl/sandbox/process.py:118);_PollLikeSelector.select (selectors.py:415) 150
thread (12): prepare-0;_cpu_stage (kernelrl/scale/local.py:196);Condition.wait (threading.py:327) 999
"""


def test_a_threads_time_reads_by_its_kernelrl_frames_and_its_work_apart_from_its_waits(tmp_path):
    path = tmp_path / "all.spy.xz"
    path.write_bytes(lzma.compress(RAW.encode()))
    rows = stage_profile.read(path)
    assert len(rows) == 4 and rows[0][0] == "judge-cuda"
    by = stage_profile.chains(rows, "judge-", depth=2)
    assert by == {"_gpu_stage": 300, "Worker.receive < judge": 150, "_check < judge": 50}
    busy = stage_profile.working(rows, "judge-")
    assert busy == {("empty_cache", "evaluate/trials.py:118"): 50}  # the polls and waits are not work
