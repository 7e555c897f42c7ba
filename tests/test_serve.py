"""`kernelrl serve`: a real server in a subprocess on a free localhost port, real CPU verdicts, a real SQLite queue."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kernelrl.client import Client, RemoteScheduler, ServiceError, request
from kernelrl.serve.jobs import JobStore

pytest.importorskip("uvicorn")

DATA = Path(__file__).parent / "data" / "eval"
REFERENCE = (DATA / "scale_add.py").read_text()
CORRECT = (DATA / "correct.py").read_text()
WRONG = (DATA / "wrong.py").read_text()
TOKEN = "s3cret-token"
FAST = ["--trials", "1", "--rounds", "1", "--calls", "2", "--max-rounds", "1", "--precision", "0", "--timeout", "120"]


def variant(i) -> str:
    """The correct candidate with a distinct source (so a distinct job), same behaviour."""
    return CORRECT + f"\n# variant {i}\n"


class Server:
    """`kernelrl serve` in a subprocess on a free port; stop() kills it with `sig`."""

    def __init__(self, db: Path, cache: Path, token: str | None = None, extra: tuple = ()):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = dict(os.environ, KERNELRL_CACHE=str(cache))
        env.pop("KERNELRL_API_TOKEN", None)
        if token:
            env["KERNELRL_API_TOKEN"] = token
        self.log = db.with_suffix(f".{self.port}.log")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelrl.cli", "serve", "--port", str(self.port), "--db", str(db), *FAST,
             *extra], stdout=subprocess.DEVNULL, stderr=self.log.open("w"), env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                Client(self.url, timeout=2).health()
                return
            except ServiceError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"kernelrl serve did not come up: {self.log.read_text()[-2000:]}")
                time.sleep(0.3)

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    (root / "suite" / "level1").mkdir(parents=True)
    (root / "suite" / "level1" / "scale_add.py").write_text(REFERENCE)
    s = Server(root / "jobs.db", root / "cache", token=TOKEN, extra=("--suite", str(root / "suite")))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return Client(server.url, token=TOKEN)


def raw(url: str, method: str = "GET", body: bytes | None = None, token: str | None = None) -> tuple[int, dict]:
    """(status, JSON answer) of one HTTP request, 4xx included."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_concurrent_clients_each_get_their_own_verdict(server, client):
    results, errors = {}, []

    def one_client(i):
        try:
            c = Client(server.url, token=TOKEN)
            own = c.submit(variant(i), reference=REFERENCE)
            shared = c.submit(CORRECT, reference=REFERENCE)
            results[i] = (own, shared, c.wait_many([own, shared], timeout=300))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=one_client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=400)
    assert not errors, errors
    assert len(results) == 4
    assert len({own for own, _, _ in results.values()}) == 4        # distinct programs, distinct jobs
    assert len({shared for _, shared, _ in results.values()}) == 1  # one program sent four times: one job
    for own, shared, verdicts in results.values():
        assert [v.status for v in verdicts] == ["ok", "ok"], [v.message for v in verdicts]
    with urllib.request.urlopen(urllib.request.Request(
            server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}), timeout=30) as r:
        metrics = r.read().decode()
    done = [line for line in metrics.splitlines() if line.startswith("kernelrl_verdicts_total ")]
    assert done and float(done[0].split()[1]) >= 5
    assert 'kernelrl_device_busy_fraction{device="cpu"}' in metrics


def test_an_identical_request_is_answered_from_the_store(client):
    first = client.submit(variant("cached"), reference=REFERENCE)
    verdict = client.wait(first, timeout=300)
    status, answer = raw(client.url + "/v1/evaluations", "POST",
                         json.dumps(request(variant("cached"), reference=REFERENCE)).encode(), TOKEN)
    assert status == 202 and answer == {"id": first, "cached": True}
    job = client.get(first)
    assert job["state"] == "done" and job["verdict"] == verdict.to_dict()
    fresh = client.submit(variant("cached"), reference=REFERENCE, cache=False)  # asked to judge it again
    assert fresh != first


def test_a_suite_task_id_names_the_same_task_as_its_source(client):
    by_source = client.submit(variant("suite"), reference=REFERENCE)
    client.wait(by_source, timeout=300)
    assert client.submit(variant("suite"), task="level1/scale_add") == by_source  # its path in the suite
    assert client.submit(variant("suite"), task="scale_add") == by_source        # its file name, unique there


def test_without_the_token_or_with_a_wrong_one_every_request_gets_401(server, client):
    body = json.dumps(request(CORRECT, reference=REFERENCE)).encode()
    for token in (None, "wrong"):
        assert raw(server.url + "/v1/evaluations", "POST", body, token)[0] == 401
        assert raw(server.url + "/metrics", token=token)[0] == 401
        status, answer = raw(server.url + "/v1/evaluations/anything", token=token)
        assert status == 401 and "KERNELRL_API_TOKEN" in answer["error"]
    assert raw(server.url + "/v1/evaluations", "POST", body, TOKEN)[0] == 202
    assert raw(server.url + "/healthz")[0] == 200  # liveness stays open
    with pytest.raises(ServiceError, match="401"):
        Client(server.url, token="wrong").submit(CORRECT, reference=REFERENCE)


BAD = [
    (b"{not json", 400, "not valid JSON"),
    (json.dumps({"reference": "x = 1\n", "candidate": CORRECT}).encode(), 400, "must define Model"),
    (json.dumps({"reference": REFERENCE, "candidate": "x = 1\n"}).encode(), 400, "ModelNew"),
    (json.dumps({"reference": REFERENCE, "candidate": CORRECT, "policy": "lenient"}).encode(), 400, "unknown policy"),
    (json.dumps({"reference": REFERENCE}).encode(), 400, "candidate"),
    (json.dumps({"task": "nope", "candidate": CORRECT}).encode(), 400, "unknown task 'nope'"),
    (json.dumps({"reference": REFERENCE, "candidate": CORRECT, "extra": 1}).encode(), 400, "unknown field"),
    (json.dumps([1, 2]).encode(), 400, "JSON object"),
    (json.dumps({"reference": REFERENCE, "candidate": CORRECT + "#" * 1_100_000}).encode(), 413, "limit"),
]


@pytest.mark.parametrize("body, status, reason", BAD, ids=[b[2] for b in BAD])
def test_bad_input_gets_a_4xx_with_a_one_line_reason_and_the_server_keeps_serving(server, body, status, reason):
    got, answer = raw(server.url + "/v1/evaluations", "POST", body, TOKEN)
    assert got == status and reason in answer["error"] and "\n" not in answer["error"]
    assert raw(server.url + "/healthz")[0] == 200
    assert raw(server.url + "/v1/evaluations/unknown-id", token=TOKEN)[0] == 404


def test_an_oversized_body_is_read_to_its_end_before_the_413_so_its_client_can_read_it(server):
    import socket
    import urllib.parse

    # Answering while the client still sends, then closing, leaves that client a broken pipe (seen under load).
    url = urllib.parse.urlsplit(server.url)
    size = 2_000_000
    with socket.create_connection((url.hostname, url.port), timeout=30) as s:
        s.sendall(f"POST /v1/evaluations HTTP/1.1\r\nHost: {url.hostname}\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode() + b"x" * 1000)
        s.settimeout(0.5)
        try:
            early = s.recv(64)
        except socket.timeout:
            early = b""
        assert early == b"", early  # no answer while the body is still coming
        s.settimeout(30)
        s.sendall(b"x" * (size - 1000))
        answer = b""
        while b"limit" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"limit" in answer, answer[:200]


def test_a_bad_item_refuses_the_whole_batch_and_names_it(server, client):
    items = [request(CORRECT, reference=REFERENCE), {"reference": REFERENCE, "candidate": "x = 1\n"}]
    status, answer = raw(server.url + "/v1/evaluations:batch", "POST", json.dumps(items).encode(), TOKEN)
    assert status == 400 and answer["error"].startswith("evaluation 1:")


def test_the_reward_function_shapes_service_verdicts_like_training_does(client):
    from kernelrl.train.service_reward import ServiceReward
    from kernelrl.train.shaping import RewardShaping

    reward = ServiceReward(client.url, token=TOKEN)
    replies = [f"```python\n{CORRECT}```", "no code here", f"```python\n{WRONG}```"]
    rewards = reward(prompts=["p"] * 3, completions=replies, reference=[REFERENCE] * 3)
    shaping = RewardShaping()
    assert rewards[1] == shaping.failure and rewards[2] == shaping.failure
    assert -shaping.clip <= rewards[0] <= shaping.clip and rewards[0] > shaping.failure
    assert [len(p) for p in reward.population.values()] == [1]


def test_a_reward_pool_judges_on_the_service_and_records_in_the_store(client, tmp_path):
    from kernelrl.search.store import Store
    from kernelrl.task import Task
    from kernelrl.train.reward import RewardPool, Rollout

    task = Task.from_source(REFERENCE, name="scale_add")
    with Store(tmp_path / "store.db") as store, \
            RewardPool(store, ("cpu",), scheduler=RemoteScheduler(client)) as pool:
        judged = pool.judge([Rollout(task=task, reply=f"```python\n{CORRECT}```"),
                             Rollout(task=task, reply=f"```python\n{WRONG}```")])
        assert [j.status for j in judged] == ["ok", "incorrect"]
        assert pool.evaluations == 2
        assert [r.status for r in store.candidates(task)] == ["ok", "incorrect"]


def test_a_job_gets_one_verdict_however_often_it_is_finished(tmp_path):
    from kernelrl.task import Candidate, Task
    from kernelrl.verdict import Verdict

    store = JobStore(tmp_path / "jobs.db")
    task, cand = Task.from_source(REFERENCE), Candidate.from_source(CORRECT)
    [(job, cached)] = store.add([(task, cand, "strict", "k", True)])
    assert not cached and store.add([(task, cand, "strict", "k", True)]) == [(job, True)]
    assert [c[0] for c in store.claim(5)] == [job] and store.claim(5) == []
    assert store.requeue_running() == 1                     # as a restart does after a kill
    assert [c[0] for c in store.claim(5)] == [job]
    assert store.finish(job, Verdict(status="incorrect"))
    assert not store.finish(job, Verdict(status="ok", speedup=2.0))  # the first run's verdict, arriving late
    assert not store.fail(job, "too late")
    assert store.verdict_counts() == {job: 1}
    got = store.get(job)
    assert (got.state, got.verdict.status, got.attempts) == ("done", "incorrect", 2)


def test_kill_9_and_restart_finishes_every_accepted_job_exactly_once(tmp_path):
    db = tmp_path / "jobs.db"
    first = Server(db, tmp_path / "cache", extra=("--window", "1"))  # one job out at a time: the rest stay queued
    c = Client(first.url)
    ids = c.submit_many([request(variant(i), reference=REFERENCE) for i in range(3)])
    ids.append(c.submit(WRONG, reference=REFERENCE))
    deadline = time.monotonic() + 120
    while not any(c.get(i)["state"] == "running" for i in ids):
        assert time.monotonic() < deadline, "no job started"
        time.sleep(0.1)
    first.stop(signal.SIGKILL)
    assert first.proc.returncode == -signal.SIGKILL
    left = [i for i in ids if JobStore(db).get(i).state != "done"]
    assert left, "every job finished before the kill; the test proves nothing"

    second = Server(db, tmp_path / "cache")
    try:
        verdicts = Client(second.url).wait_many(ids, timeout=300)
    finally:
        second.stop()
    assert [v.status for v in verdicts] == ["ok", "ok", "ok", "incorrect"]
    assert "unfinished job(s) queued again" in second.log.read_text()
    store = JobStore(db)
    assert store.verdict_counts() == {i: 1 for i in ids}  # none lost, none twice, nothing else accepted
    assert max(store.get(i).attempts for i in ids) == 2    # the job cut off by the kill ran again


def test_refuses_to_listen_on_a_public_address_without_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "KERNELRL_API_TOKEN"}
    r = subprocess.run([sys.executable, "-m", "kernelrl.cli", "serve", "--host", "0.0.0.0", "--db",
                        str(tmp_path / "jobs.db")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "KERNELRL_API_TOKEN" in lines[0] and "untrusted" in lines[0], r.stderr
    assert not (tmp_path / "jobs.db").exists()


def test_train_with_a_service_that_is_not_there_says_so_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kernelrl.cli", "train", "--smoke", "--service", "http://127.0.0.1:9",
                        "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot reach the kernelrl service at http://127.0.0.1:9" in errors[0], r.stderr
    assert "Traceback" not in r.stderr
