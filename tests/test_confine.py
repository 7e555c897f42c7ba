"""Confinement of a worker: each test confines a real child process and probes what it can still do."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kernelrl.sandbox.confine as confine_mod
from procs import running
from kernelrl.sandbox.confine import is_secret_name, scrub_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="confinement is Linux-only")

SRC = str(Path(confine_mod.__file__).resolve().parents[2])
FAKE_KEY = "sk-test0123456789abcdefghijklmnop"


def run_confined(tmp_path: Path, probe: str, env: dict | None = None, scrub: bool = True, own_tmp: bool = True,
                 scratch: str = "scratch") -> dict:
    """Run `probe` (Python that sets `result`) in a child after confine(tmp_path/scratch); return its JSON."""
    scratch = tmp_path / scratch
    code = textwrap.dedent(f"""
        import json, os, sys
        from kernelrl.sandbox.confine import confine
        applied = confine(sys.argv[1], own_tmp={own_tmp})
        result = None
    """) + textwrap.dedent(probe) + "\nprint(json.dumps({'applied': applied, 'result': result}))\n"
    base = dict(os.environ if env is None else env)
    child_env = scrub_env(base) if scrub else base
    child_env["PYTHONPATH"] = SRC
    out = subprocess.run([sys.executable, "-c", code, str(scratch)], env=child_env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_write_inside_scratch_succeeds(tmp_path):
    r = run_confined(tmp_path, """
        p = os.path.join(sys.argv[1], "inside.txt")
        open(p, "w").write("fine")
        result = open(p).read()
    """)
    assert r["applied"]["landlock"] is True
    assert r["result"] == "fine"


def test_write_outside_scratch_fails(tmp_path):
    outside = tmp_path / "outside.txt"  # under /tmp: Landlock alone must refuse it, without a private /tmp
    r = run_confined(tmp_path, own_tmp=False, probe=f"""
        try:
            open({str(outside)!r}, "w").write("escaped")
            result = "written"
        except PermissionError:
            result = "denied"
    """)
    assert r["result"] == "denied"
    assert not outside.exists()


def test_delete_outside_scratch_fails(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    r = run_confined(tmp_path, own_tmp=False, probe=f"""
        try:
            os.remove({str(victim)!r})
            result = "removed"
        except PermissionError:
            result = "denied"
    """)
    assert r["result"] == "denied"
    assert victim.read_text() == "keep me"


def _private_tmp(applied: dict) -> None:
    """Skip where this machine forbids mount namespaces (the report says why); elsewhere it must be applied."""
    if not applied["private_tmp"] and "unshare" in applied.get("private_tmp_reason", ""):
        pytest.skip(f"no mount namespace here: {applied['private_tmp_reason']}")
    assert applied["private_tmp"] is True, applied.get("private_tmp_reason")


def test_a_literal_tmp_path_is_writable_and_private(tmp_path):
    name = f"/tmp/cuda_extensions-{os.getpid()}-{tmp_path.name}"
    r = run_confined(tmp_path, f"""
        os.makedirs({name!r}, exist_ok=True)
        open({name!r} + "/build.ninja", "w").write("rule cc")
        result = open({name!r} + "/build.ninja").read()
    """)
    _private_tmp(r["applied"])
    assert r["result"] == "rule cc"
    assert not os.path.exists(name)  # it never reached the real /tmp
    assert (tmp_path / "scratch" / "tmp" / Path(name).name / "build.ninja").exists()  # it lives in the scratch


def test_the_real_tmp_is_out_of_reach(tmp_path):
    victim = tmp_path / "victim.txt"  # beneath the real /tmp, beside the scratch directory
    victim.write_text("keep me")
    r = run_confined(tmp_path, f"""
        result = [os.path.exists({str(victim)!r}), os.path.isdir(sys.argv[1])]
        open({str(tmp_path / "planted.txt")!r}, "w").write("x")
    """)
    _private_tmp(r["applied"])
    assert r["result"] == [False, True]  # its own scratch is there, nothing else of the real /tmp is
    assert victim.read_text() == "keep me" and not (tmp_path / "planted.txt").exists()


def test_another_workers_tmp_files_are_out_of_reach(tmp_path):
    first = run_confined(tmp_path, scratch="first", probe="""
        os.makedirs("/tmp/shared", exist_ok=True)
        open("/tmp/shared/weights.bin", "w").write("first's")
        result = os.path.realpath(sys.argv[1])
    """)
    _private_tmp(first["applied"])
    second = run_confined(tmp_path, scratch="second", probe=f"""
        result = [os.path.exists("/tmp/shared/weights.bin"),
                  os.path.exists({str(tmp_path / "first" / "tmp" / "shared" / "weights.bin")!r})]
    """)
    assert second["result"] == [False, False]


def test_loopback_connect_fails(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = run_confined(tmp_path, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                result = "connected"
            except OSError as e:
                result = "failed: " + type(e).__name__
        """)
    finally:
        server.close()
    assert r["applied"]["netns"] is True
    assert r["result"].startswith("failed")


def test_api_key_from_parent_is_absent(tmp_path):
    env = dict(os.environ, OPENAI_API_KEY=FAKE_KEY)
    r = run_confined(tmp_path, """
        result = [os.environ.get("OPENAI_API_KEY"), "OPENAI_API_KEY" in open("/proc/self/environ").read()]
    """, env=env)
    assert r["result"] == [None, False]
    assert r["applied"]["env_scrubbed"] is True


def test_unscrubbed_spawn_is_reported(tmp_path):
    # Deleting a key in-process cannot hide it from /proc/self/environ; confine must say so.
    env = dict(os.environ, OPENAI_API_KEY=FAKE_KEY)
    r = run_confined(tmp_path, "result = os.environ.get('OPENAI_API_KEY')", env=env, scrub=False)
    assert r["result"] is None
    assert r["applied"]["env_scrubbed"] is False
    assert "OPENAI_API_KEY" in r["applied"]["env_reason"]


def test_parent_environ_is_unreadable(tmp_path):
    r = run_confined(tmp_path, """
        try:
            result = open(f"/proc/{os.getppid()}/environ", "rb").read().decode(errors="replace")
        except OSError as e:
            result = "denied"
    """, env=dict(os.environ, OPENAI_API_KEY=FAKE_KEY))
    assert r["result"] == "denied"


def test_parent_memory_is_unreachable_by_ptrace(tmp_path):
    r = run_confined(tmp_path, """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_SEIZE = 0x4206
        rc = libc.ptrace(PTRACE_SEIZE, os.getppid(), 0, 0)
        result = [rc, ctypes.get_errno()]
    """)
    assert r["result"][0] == -1


def test_tool_caches_point_into_scratch(tmp_path):
    r = run_confined(tmp_path, """
        import tempfile
        result = [tempfile.gettempdir(), os.environ["TORCH_EXTENSIONS_DIR"], os.environ["TRITON_CACHE_DIR"]]
    """)
    scratch = str(tmp_path / "scratch")
    assert all(p.startswith(scratch) for p in r["result"])


def test_scrub_env_drops_credentials_and_keeps_toolchain():
    env = {"OPENAI_API_KEY": "x", "HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "x",
           "MY_SERVICE_PASSWORD": "x", "ANTHROPIC_API_KEY": "x", "DB_CREDENTIALS": "x", "UNNAMED": FAKE_KEY,
           "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/usr/lib",
           "NVIDIA_VISIBLE_DEVICES": "all", "TORCH_CUDA_ARCH_LIST": "9.0", "HOME": "/root"}
    assert scrub_env(env) == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "LD_LIBRARY_PATH": "/usr/lib",
                              "NVIDIA_VISIBLE_DEVICES": "all", "TORCH_CUDA_ARCH_LIST": "9.0", "HOME": "/root"}


def test_secret_name_patterns():
    assert is_secret_name("OPENAI_BASE_URL")  # whole OPENAI_* family, not only keys
    assert is_secret_name("some_token")
    assert not is_secret_name("CUDA_HOME")
    assert not is_secret_name("PYTHONPATH")


def test_cache_folders_cannot_be_imported(tmp_path):
    # The worker's cwd is its scratch directory: a cache folder named "triton" would be imported as triton.
    r = run_confined(tmp_path, "result = sorted(os.listdir(sys.argv[1]))")
    caches = [n for n in r["result"] if n not in ("home", "tmp")]
    assert caches and not any(n.isidentifier() for n in caches)



@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_worker_moves_onto_the_cores_set_aside_for_timing(tmp_path):
    from kernelrl.evaluate.harness import Harness

    before = os.sched_getaffinity(0)
    core = max(before)
    h = Harness({"role": "reference", "device": "cpu", "cpus": [core]}, {}, str(tmp_path))
    try:
        h.pin()
        assert os.sched_getaffinity(0) == {core}
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")
def test_a_worker_stuck_in_a_loop_ends_when_its_parent_is_killed(tmp_path):
    """A program stuck in a loop never reads its closed connection: the worker watches for its parent's end."""
    import time

    script = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from kernelrl.evaluate.evaluator import HARNESS
        from kernelrl.sandbox.process import Worker
        task = ("import torch\\nimport torch.nn as nn\\nclass Model(nn.Module):\\n    def forward(self, x):\\n"
                "        while True:\\n            pass\\n"
                "def get_inputs():\\n    return [torch.randn(4)]\\ndef get_init_inputs():\\n    return []\\n")
        w = Worker(HARNESS, scratch_root=Path(sys.argv[1]), init={"role": "reference", "device": "cpu", "seed": 1,
                                                            "task_source": task})
        w.request({"op": "ready"}, 120)
        w.send({"op": "trial", "seed": 1})
        print(w.proc.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(parent.stdout.readline())
        time.sleep(1.0)  # its call is spinning
        assert running(pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not running(pid), "the worker outlived its parent"
    finally:
        parent.kill()
        if pid is not None and running(pid):
            os.kill(pid, 9)
