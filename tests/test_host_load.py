"""benchmarks/host_load.py: what keeps the cores busy during a run, sampled from /proc, and its summary."""
import json
import os
import subprocess
import sys
import time

import pytest

from scripts import BENCHMARKS, load_script

host_load = load_script("host_load")


def test_the_summary_gives_the_busy_share_its_spread_the_programs_and_the_cores_while_the_gpu_idles(tmp_path):
    rows = [{"t": 1.0, "cores": 16, "busy": 0.95, "by": {"cicc": 10.0, "python": 5.0}, "gpu": 10.0},
            {"t": 2.0, "cores": 16, "busy": 0.45, "by": {"python": 7.0}, "gpu": 90.0},
            {"t": 3.0, "cores": 16, "busy": 0.25, "by": {"cc1plus": 3.0}, "gpu": 80.0}]
    path = tmp_path / "load.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = host_load.summary(path)
    assert "3 samples over 3 s, 16 cores: busy 55% on average, 90% busy or more in 33% of the samples" in text
    assert "GPU idle (under 50%) in 33% of the samples; the cores were 95% busy then" in text
    assert "GPU busy (50% or more) in 67% of the samples; the cores were 35% busy then" in text
    lines = text.splitlines()
    table = lines[lines.index("| program | core-seconds | share |") + 2:]
    assert table[:3] == ["| python | 12 | 48% |", "| cicc | 10 | 40% |", "| cc1plus | 3 | 12% |"]


def test_a_sampling_counts_a_busy_process_under_its_program_and_the_kernelrl_command_apart(tmp_path):
    out, stop = tmp_path / "load.jsonl", tmp_path / "stop"
    # a busy process whose command line names the kernelrl command, as `python -m kernelrl.cli bench` does
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: pass",
                             "kernelrl.cli"])
    sampler = subprocess.Popen([sys.executable, str(BENCHMARKS / "host_load.py"), str(out), "--interval", "0.3",
                                "--until-file", str(stop)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
            time.sleep(0.1)
        stop.touch()
        assert sampler.wait(timeout=10) == 0
    finally:
        spin.kill()
        spin.wait()
        if sampler.poll() is None:
            sampler.kill()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 3
    assert all(0.0 <= r["busy"] <= 1.0 and r["cores"] == len(os.sched_getaffinity(0)) for r in rows)
    assert all(r["busy"] > 0 for r in rows)  # a core spins the whole time
    # the spinning process shows up apart from other Python processes, a fair share of an interval each sample
    assert sum(r["by"].get("python (kernelrl command)", 0.0) for r in rows[1:]) >= 0.3 * 0.25 * (len(rows) - 1)


def test_bad_arguments_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        host_load.main([str(tmp_path / "x.jsonl"), "--interval", "0"])
    assert "--interval must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        host_load.main([str(tmp_path / "missing.jsonl"), "--summary"])
    assert "no such sampling" in capsys.readouterr().err
