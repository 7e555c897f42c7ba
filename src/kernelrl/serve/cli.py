"""`kernelrl serve`: the reward as an HTTP service over a durable job queue."""
from __future__ import annotations

import ipaddress
import os
import sys
import threading
from pathlib import Path
from typing import List, Optional

import typer
import uvicorn  # the `serve` extra: imported here so `kernelrl serve` without it names the extra to install

from kernelrl.scale import RAY_HELP, check_group
from kernelrl.scale.ray_backend import RayUnavailable  # imports Ray only when a RayScheduler is made

TOKEN_ENV = "KERNELRL_API_TOKEN"


def serve_command(
    host: str = typer.Option("127.0.0.1", help="address to listen on; any but loopback needs $KERNELRL_API_TOKEN"),
    port: int = typer.Option(8000, help="TCP port"),
    db: Path = typer.Option(Path("runs/serve/jobs.db"), "--db", help="SQLite job queue and verdicts (WAL); a "
                                                                     "restart on the same file finishes its jobs"),
    device: List[str] = typer.Option(["cpu"], "--device", help="evaluator device, repeatable: cpu, cuda, cuda:N"),
    suite: Optional[Path] = typer.Option(None, "--suite", help="folder of references a request may name by "
                                                               "\"task\" (its path without .py, or file name)"),
    policy: str = typer.Option("strict", help="precision policy for requests that name none: strict, kernelbench"),
    max_body: int = typer.Option(1_000_000, help="largest request body accepted, in bytes"),
    window: int = typer.Option(0, help="jobs handed to the scheduler at once (0: 8 per device)"),
    trials: int = typer.Option(5, help="correctness trials (fresh secret seeds each)"),
    rounds: int = typer.Option(5, help="timing rounds (reference and candidate alternate)"),
    calls: int = typer.Option(20, help="timed calls per program per round"),
    max_rounds: int = typer.Option(15, help="more rounds, up to this many, until the speedup is --precision sure"),
    precision: float = typer.Option(0.004, help="target relative standard error of the speedup (0: fixed rounds)"),
    timeout: float = typer.Option(300.0, help="seconds for one whole evaluation, build included"),
    report_every: float = typer.Option(60.0, help="seconds between progress lines on the console"),
    ray: Optional[str] = typer.Option(None, "--ray", help=RAY_HELP + " (instead of --device)"),
    group: int = typer.Option(1, "--group", help="judge up to this many waiting candidates of one task together "
                                                "(a GRPO group), the reference timed once a round beside each"),
):
    """Serve rewards over HTTP. This service runs untrusted code (the candidates it is sent) on this machine:
    it listens on 127.0.0.1 unless told otherwise, and refuses any other address unless $KERNELRL_API_TOKEN is
    set, in which case every request but /healthz must carry `Authorization: Bearer TOKEN`."""
    from kernelrl.cli import fail

    token = os.environ.get(TOKEN_ENV) or None
    if not token and not is_loopback(host):
        fail(f"refusing to listen on {host} without a token: this service runs untrusted code; set "
             f"{TOKEN_ENV} (clients send it as a bearer token) or listen on 127.0.0.1")
    if not 0 <= port < 65536 or max_body < 1 or window < 0 or report_every <= 0:
        fail("--port must be 0..65535, --max-body and --report-every positive, --window not negative")
    if timeout <= 0 or trials < 1 or rounds < 1 or calls < 1 or max_rounds < 1 or precision < 0:
        fail("--timeout, --trials, --rounds, --calls and --max-rounds must be positive, --precision not negative")
    try:
        check_group(group, ray)
    except ValueError as e:
        fail(f"--{e}")

    from kernelrl.evaluate import EvalConfig, EvaluationError
    from kernelrl.serve.jobs import JobStore, JobStoreError
    from kernelrl.task import TaskError

    try:
        config = EvalConfig(device=device[0], timeout_s=timeout, build_timeout_s=min(timeout, 240.0),
                            correctness_trials=trials, timing_rounds=rounds, calls_per_round=calls,
                            max_timing_rounds=max_rounds, timing_precision=precision, policy=policy)
        tasks = load_suite(suite) if suite else {}
        jobs = JobStore(db)
    except (ValueError, TaskError, JobStoreError) as e:
        fail(str(e))
    try:
        service = _service(jobs, config, tuple(device), tasks, window or (8 * len(device) if ray is None else 0),
                           ray=ray, group=group)
    except (EvaluationError, RayUnavailable) as e:
        jobs.close()
        fail(str(e))
    run(service, host, port, token, max_body, report_every, db)


def _service(jobs, config, devices: tuple[str, ...], tasks: dict, window: int, ray: str | None = None,
             group: int = 1):
    """The Service over a scheduler for `devices`, or for the GPUs of the Ray cluster `ray` names."""
    from kernelrl.evaluate.candidates import toolchain_key
    from kernelrl.scale import make_scheduler
    from kernelrl.serve.service import Service, context_key

    settings = {k: v for k, v in config.to_dict().items() if k not in ("device", "cache_dir", "policy")}
    scheduler = make_scheduler(config, devices, ray=ray, group=group)
    if ray is None:
        kind = device_kind(devices)
    else:  # verdicts come from the cluster's devices: stored answers are keyed by their hardware
        kind = ",".join(scheduler.device_names()) or scheduler.device_kind
        devices, window = (f"{scheduler.device_kind}@ray",), window or 4 * scheduler.capacity
    context = context_key(kind, toolchain_key(), settings)
    return Service(jobs, scheduler, context=context, devices=devices, suite=tasks,
                   default_policy=config.policy, window=window)


def run(service, host: str, port: int, token: str | None, max_body: int, report_every: float, db) -> None:
    """Serve `service` until interrupted, with a progress line every `report_every` seconds; then close it."""
    from kernelrl.serve.app import create_app
    from kernelrl.serve.service import progress_line

    app = create_app(service, token=token, max_body=max_body)
    stop = threading.Event()

    def report():
        while not stop.wait(report_every):
            _say(progress_line(service.progress()))

    requeued = service.dispatcher.requeued
    _say(f"kernelrl serve on http://{host}:{port} (devices {', '.join(service.devices)}; jobs in {db}"
         f"{f'; {requeued} unfinished job(s) queued again' if requeued else ''}; "
         f"{'bearer token required' if token else 'no token: loopback only'})")
    threading.Thread(target=report, name="kernelrl-progress", daemon=True).start()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        stop.set()
        service.close()


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name could resolve anywhere


def device_kind(devices: tuple[str, ...]) -> str:
    """The kinds of device verdicts come from, e.g. 'cpu' or 'NVIDIA H100 80GB HBM3' (comma-joined if mixed)."""
    names = set()
    for d in devices:
        if d.startswith("cuda"):
            import torch

            index = int(d.partition(":")[2] or 0)
            names.add(torch.cuda.get_device_name(index) if torch.cuda.is_available() else d)
        else:
            names.add(d)
    return ",".join(sorted(names))


def load_suite(folder: Path) -> dict:
    """Task id -> Task for every reference under `folder`: its relative path without .py, and its file name
    where no other task shares it."""
    from kernelrl.bench.suite import discover

    found = discover(folder).tasks
    stems: dict[str, list] = {}
    for t in found:
        stems.setdefault(t.task.name, []).append(t.task)
    by_id = {name: ts[0] for name, ts in stems.items() if len(ts) == 1}
    by_id.update({t.name: t.task for t in found})
    return by_id


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
