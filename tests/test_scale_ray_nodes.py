"""RayScheduler on a Ray cluster of two worker nodes (`ray.cluster_utils.Cluster`, all on this machine): a node that
dies mid-run costs its jobs a retry on the other node, and every job still gets exactly one verdict."""
import time
from pathlib import Path

import pytest

from kernelrl.evaluate import EvalConfig
from kernelrl.task import Candidate, Task

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402 - after the skip

from kernelrl.scale.ray_backend import RayScheduler  # noqa: E402

EVAL = Path(__file__).resolve().parent / "data" / "eval"


@pytest.mark.slow
def test_a_node_that_dies_mid_run_costs_a_retry_on_the_other_node(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cluster = Cluster(initialize_head=True, connect=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": False})  # evaluators go to the workers
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        config = EvalConfig(device="cpu", correctness_trials=2, timing_rounds=2, max_timing_rounds=2,
                            calls_per_round=5, recheck_speedup=1e9, timeout_s=120, cache_dir=str(tmp_path))
        task, cand = Task.from_file(EVAL / "scale_add.py"), Candidate.from_file(EVAL / "correct.py")
        with RayScheduler(config, cpu_evaluators=2, lookahead=1) as sched:
            futures = [sched.submit(task, cand) for _ in range(6)]
            deadline = time.monotonic() + 180
            while sched.stats().done == 0 and time.monotonic() < deadline:
                time.sleep(0.2)  # both actors up and judging
            cluster.remove_node(nodes[0])
            verdicts = [f.result(timeout=300) for f in futures]
            stats = sched.stats()
        assert [v.status for v in verdicts] == ["ok"] * 6, [v.message for v in verdicts]
        assert stats.retried >= 1 and stats.done == 6
    finally:
        ray.shutdown()
        cluster.shutdown()
