"""``infoprompt serve``: a real server process on a loopback port, spoken to over HTTP with httpx."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the serve extra is not installed: pip install 'infoprompt[serve]'")
pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install 'infoprompt[serve]'")
pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install 'infoprompt[serve]'")

import infoprompt as ip  # noqa: E402
from infoprompt.cli import main  # noqa: E402
from infoprompt.io_utils import write_safetensors  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "adapters"
SRC = Path(ip.__file__).resolve().parents[1]
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TOLERANCE = 1e-5
TEXTS = ["a great film", "the plot was dull and boring", "quite funny , not bad", "she said it was terrible",
         "lovely", "this movie was brilliant", "bad story"]
PAIRS = [{"sentence1": "the man said yes", "sentence2": "he said yes"},
         {"sentence1": "a dog ran", "sentence2": "the cat sat on the man"}]
HAS_SETFIT = importlib.util.find_spec("setfit") is not None


# After draining, uvicorn re-raises SIGTERM, which the CLI turns into its one-line "terminated" exit (143).
DRAINED = (0, 128 + signal.SIGTERM, -signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``python -m infoprompt.cli serve ...`` in its own process, in ``workdir`` (where ``tiny-bert`` lives)."""

    def __init__(self, workdir: Path, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
        self.log = (workdir / f"server-{self.port}.log").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infoprompt.cli", "serve", "--port", str(self.port), "--threads", "1", *args],
            cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError(f"the server did not become healthy:\n{self.output()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def negated_probe(source: Path, target: Path) -> None:
    """A copy of the probe whose head is negated: its answers differ from the original's."""
    from safetensors.torch import load_file

    shutil.copytree(source, target)
    state = load_file(str(target / "adapter_model.safetensors"))
    write_safetensors(target / "adapter_model.safetensors", {k: -v for k, v in state.items()}, 1)


def pair_probe(workdir: Path, target: Path) -> None:
    """A linear probe for MRPC (a pair task) on the tiny BERT, fitted in a second."""
    backbone = ip.load_backbone(str(workdir / "tiny-bert"))
    rows = [ip.Example(fields=pair, label=label, source=f"train:{i}")
            for i, (pair, label) in enumerate(zip(PAIRS * 4, ["equivalent", "not_equivalent"] * 4, strict=True))]
    model = ip.make_classifier(backbone, task="mrpc", method="linear-probe", seed=1, max_length=32)
    ip.train(model, rows, None, ip.TrainConfig(seed=1, progress=False, device="cpu", feature_store=False))
    model.save_pretrained(target)


@pytest.fixture(scope="module")
def workdir(tiny_model_dirs, tmp_path_factory) -> Path:
    """tiny-bert (the committed adapters' backbone), an adapter root, things outside it, and a token file."""
    work = tmp_path_factory.mktemp("serve")
    shutil.copytree(tiny_model_dirs["bert"], work / "tiny-bert")
    root = work / "root"
    for kind in ("prompt", "linear-probe", "peft", "setfit", "setfit-lora", "released"):
        shutil.copytree(FIXTURES / kind, root / kind)
    negated_probe(FIXTURES / "linear-probe", root / "probe-b")
    pair_probe(work, root / "pair")
    outside = work / "outside"
    shutil.copytree(FIXTURES / "linear-probe", outside / "linear-probe")
    (root / "escape").symlink_to(outside / "linear-probe", target_is_directory=True)
    (root / "sneaky").mkdir()
    shutil.copy(FIXTURES / "linear-probe" / "adapter_config.json", root / "sneaky")
    (root / "sneaky" / "adapter_model.safetensors").symlink_to(outside / "linear-probe" / "adapter_model.safetensors")
    mismatch = root / "mismatch"
    shutil.copytree(FIXTURES / "linear-probe", mismatch)
    config = json.loads((mismatch / "adapter_config.json").read_text())
    config["backbone_fingerprint"]["embedding_sha256"] = "0" * 16
    (mismatch / "adapter_config.json").write_text(json.dumps(config))
    strict = root / "strict"  # refuses inputs over its token budget instead of cutting them
    shutil.copytree(FIXTURES / "linear-probe", strict)
    config = json.loads((strict / "adapter_config.json").read_text())
    (strict / "adapter_config.json").write_text(json.dumps({**config, "truncate": False}))
    (work / "token").write_text(TOKEN + "\n")
    return work


SERVED = {"ip": "prompt", "probe": "linear-probe", "probe-b": "probe-b", "peft": "peft", "pair": "pair",
          "released": "released"}
SETFIT_SERVED = {"setfit": "setfit", "lora": "setfit-lora"}


@pytest.fixture(scope="module")
def server(workdir):
    served = dict(SERVED, **(SETFIT_SERVED if HAS_SETFIT else {}))
    args = [arg for name, path in served.items() for arg in ("--adapter", f"{name}=root/{path}")]
    running = Server(workdir, *args, "--adapter-root", "root", "--allow-backbone-dir", "tiny-bert", "--token-file",
                     "token", "--max-inputs", "8", "--max-body-bytes", "4096", "--max-wait-ms", "5", "--allow-host",
                     "proxy.example")
    yield running
    assert running.stop() in DRAINED, running.output()


def post(server: Server, name: str, body: object, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/adapters/{name}/predict", json=body, headers=AUTH, timeout=30, **kwargs)


def cli_predict(workdir: Path, adapter: Path, inputs: list[dict[str, str]], monkeypatch, capsys) -> list[dict]:
    monkeypatch.chdir(workdir)
    path = workdir / "inputs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in inputs), encoding="utf-8")
    assert main(["predict", "--adapter", str(adapter), "--input", str(path), "--quiet"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_health_is_open_and_the_listing_shows_every_adapter_on_one_backbone(server):
    health = httpx.get(f"{server.url}/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    listing = httpx.get(f"{server.url}/v1/adapters", headers=AUTH).json()
    by_name = {a["name"]: a for a in listing["adapters"]}
    assert by_name["probe"]["kind"] == "linear-probe" and by_name["probe"]["shared_encoder_pass"]
    assert by_name["ip"]["kind"] == "prompt" and not by_name["ip"]["shared_encoder_pass"]
    assert by_name["pair"]["task"] == "mrpc" and by_name["pair"]["fields"] == ["sentence1", "sentence2"]
    assert by_name["ip"]["labels"] == ["negative", "positive"] and by_name["ip"]["backbone"] == "tiny-bert"
    assert len(listing["backbones"]) == 1  # one encoder in memory for all of them
    assert sorted(listing["backbones"][0]["adapters"]) == sorted(by_name)


@pytest.mark.parametrize("name", [*SERVED, *SETFIT_SERVED])
def test_answers_equal_infoprompt_predict(server, workdir, name, monkeypatch, capsys):
    if name in SETFIT_SERVED and not HAS_SETFIT:
        pytest.skip("the setfit extra is not installed")
    inputs = PAIRS if name == "pair" else [{"sentence": text} for text in TEXTS]
    sent = inputs if name == "pair" else [row["sentence"] for row in inputs]
    answer = post(server, name, {"inputs": sent, "return_proba": True})
    assert answer.status_code == 200, answer.text
    expected = cli_predict(workdir, workdir / "root" / dict(SERVED, **SETFIT_SERVED)[name], inputs, monkeypatch, capsys)
    got = answer.json()["predictions"]
    assert [p["label"] for p in got] == [e["label"] for e in expected]
    for prediction, record in zip(got, expected, strict=True):
        assert prediction["probabilities"] == pytest.approx(record["probabilities"], abs=TOLERANCE)
    labels_only = post(server, name, {"inputs": sent}).json()["predictions"]
    assert labels_only == [{"label": e["label"]} for e in expected]


def test_two_hundred_concurrent_requests_over_three_adapters_come_back_complete_and_correct(server):
    names = ("ip", "probe", "probe-b")
    reference = {(name, text): post(server, name, {"inputs": [text], "return_proba": True}).json()["predictions"][0]
                 for name in names for text in TEXTS}
    assert reference[("probe", "lovely")]["label"] != reference[("probe-b", "lovely")]["label"]
    batches_before = batch_count(server)
    encoded_before = metric(server, 'infoprompt_encoded_inputs_total{lane="shared"}')
    requests = [(names[i % 3], [TEXTS[(i + k) % len(TEXTS)] for k in range(1 + i % 3)]) for i in range(200)]

    async def fire():
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client.post(f"/v1/adapters/{name}/predict",
                                                      json={"inputs": texts, "return_proba": True})
                                          for name, texts in requests))

    answers = asyncio.run(fire())
    assert [a.status_code for a in answers] == [200] * 200
    for (name, texts), answer in zip(requests, answers, strict=True):
        for text, prediction in zip(texts, answer.json()["predictions"], strict=True):
            assert prediction["label"] == reference[(name, text)]["label"]
            assert prediction["probabilities"] == pytest.approx(reference[(name, text)]["probabilities"], abs=TOLERANCE)
    assert batch_count(server) - batches_before < 200  # concurrent requests were batched together
    # The probes share an encoder pass: an input sent to both in one batch is encoded once.
    probe_inputs = sum(len(texts) for name, texts in requests if name != "ip")
    assert metric(server, 'infoprompt_encoded_inputs_total{lane="shared"}') - encoded_before < probe_inputs


def metric(server: Server, series: str) -> float:
    text = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(series))


def batch_count(server: Server) -> float:
    return metric(server, "infoprompt_batch_requests_count")


def test_metrics_count_requests_errors_batches_and_latency(server):
    post(server, "probe", {"inputs": ["lovely"]})
    post(server, "nobody", {"inputs": ["lovely"]})
    answer = httpx.get(f"{server.url}/metrics", headers=AUTH)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    for series in ('infoprompt_requests_total{route="predict",status="200"}',
                   'infoprompt_errors_total{route="predict",status="404"}',
                   'infoprompt_predicted_inputs_total{adapter="probe"}', "infoprompt_batch_inputs_bucket",
                   "infoprompt_request_seconds_bucket", "infoprompt_backbones_loaded 1.0"):
        assert series in text


BAD = [
    pytest.param(dict(content=b'{"inputs": ["a great film",'), 400, "not valid JSON", id="malformed-json"),
    pytest.param(dict(json={"input": ["a"]}), 422, "inputs", id="wrong-field"),
    pytest.param(dict(json={"inputs": ["a"], "extra": 1}), 422, "extra", id="extra-field"),
    pytest.param(dict(json={"inputs": "a great film"}), 422, "inputs", id="inputs-not-a-list"),
    pytest.param(dict(json={"inputs": [3]}), 422, "inputs.0", id="input-not-text"),
    pytest.param(dict(json={"inputs": []}), 422, "inputs", id="no-inputs"),
    pytest.param(dict(json={"inputs": ["a"], "return_proba": "yes"}), 422, "return_proba", id="proba-not-bool"),
    pytest.param(dict(json={"inputs": ["a"] * 9}), 422, "more than the 8", id="too-many-inputs"),
    pytest.param(dict(json={"inputs": [""]}), 422, "inputs[0]: empty text", id="empty-text"),
    pytest.param(dict(json={"inputs": ["good", "   "]}), 422, "inputs[1]: empty text", id="blank-text"),
    pytest.param(dict(json={"inputs": [{"text": "a"}]}), 422, "unknown ['text']", id="wrong-text-field"),
    pytest.param(dict(content=b'{"inputs": ["\\ud800"]}'), 422, "surrogate", id="lone-surrogate"),
    pytest.param(dict(content=b'{"inputs": ["' + b"a" * 5000 + b'"]}'), 413, "over the limit", id="oversized-body"),
    pytest.param(dict(content=iter([b'{"inputs": ["', b"a" * 5000, b'"]}'])), 413, "over the limit",
                 id="oversized-chunked-body"),
    pytest.param(dict(content=b"[" * 1500 + b"]" * 1500, headers={"Content-Type": "application/json"}), 400, "",
                 id="deeply-nested-json"),
]


@pytest.mark.parametrize(("request_kwargs", "status", "message"), BAD)
def test_bad_input_gets_a_4xx_json_error(server, request_kwargs, status, message):
    headers = {**AUTH, "Content-Type": "application/json", **request_kwargs.pop("headers", {})}
    answer = httpx.post(f"{server.url}/v1/adapters/probe/predict", headers=headers, timeout=30, **request_kwargs)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["status"] == status and message in answer.json()["error"]["message"]


@pytest.mark.parametrize(("name", "body", "status", "message"), [
    ("nobody", {"inputs": ["a"]}, 404, "no adapter named 'nobody'"),
    ("pair", {"inputs": ["a great film"]}, 422, "send an object"),
    ("pair", {"inputs": [{"sentence1": "a dog"}]}, 422, "missing ['sentence2']"),
    ("pair", {"inputs": [{"sentence1": "a dog", "sentence2": " "}]}, 422, "empty text field(s) sentence2"),
])
def test_unknown_adapters_and_inputs_that_do_not_fit_the_task_are_refused(server, name, body, status, message):
    answer = post(server, name, body)
    assert answer.status_code == status and message in answer.json()["error"]["message"]


def test_unknown_routes_and_methods_answer_json(server):
    assert httpx.get(f"{server.url}/nowhere", headers=AUTH).json()["error"]["status"] == 404
    assert httpx.get(f"{server.url}/v1/adapters/probe/predict", headers=AUTH).status_code == 405


def test_the_token_guards_everything_but_health(server):
    body = {"inputs": ["lovely"]}
    assert httpx.post(f"{server.url}/v1/adapters/probe/predict", json=body).status_code == 401
    wrong = httpx.post(f"{server.url}/v1/adapters/probe/predict", json=body, headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{server.url}/metrics").status_code == 401
    assert httpx.get(f"{server.url}/v1/adapters").status_code == 401
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_a_foreign_host_name_is_refused_on_loopback(server):
    answer = httpx.get(f"{server.url}/v1/adapters", headers={**AUTH, "Host": "evil.example"})
    assert answer.status_code == 421
    for allowed in ("localhost", f"localhost:{server.port}", "[::1]:80", "proxy.example:443"):  # --allow-host
        assert httpx.get(f"{server.url}/v1/adapters", headers={**AUTH, "Host": allowed}).status_code == 200


def test_clients_that_vanish_mid_request_leave_the_server_serving(server, workdir):
    body = json.dumps({"inputs": TEXTS}).encode()
    head = (f"POST /v1/adapters/probe/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\n").encode()
    for payload in (head + b"Content-Length: 1000\r\n\r\n" + body[:10],  # cut off inside the body
                    head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body,  # gone before the answer
                    head[:30]):  # cut off inside the headers
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(payload)
    client = f"""
import asyncio, httpx
async def main():
    async with httpx.AsyncClient(base_url={server.url!r}, headers={AUTH!r}, timeout=60) as c:
        await asyncio.gather(*(c.post('/v1/adapters/ip/predict', json={{'inputs': {TEXTS!r}}}) for _ in range(300)))
asyncio.run(main())
"""
    killed = subprocess.Popen([sys.executable, "-c", client])
    time.sleep(1.5)
    killed.kill()  # SIGKILL: its connections drop in the middle of their requests
    killed.wait()
    answer = post(server, "ip", {"inputs": TEXTS})
    assert answer.status_code == 200 and len(answer.json()["predictions"]) == len(TEXTS)
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_adapters_are_added_and_removed_at_runtime(server):
    add = httpx.post(f"{server.url}/v1/adapters", json={"name": "added", "path": "linear-probe"}, headers=AUTH, timeout=30)
    assert add.status_code == 201 and add.json()["kind"] == "linear-probe"
    assert post(server, "added", {"inputs": ["lovely"], "return_proba": True}).json()["predictions"] == \
        post(server, "probe", {"inputs": ["lovely"], "return_proba": True}).json()["predictions"]
    again = httpx.post(f"{server.url}/v1/adapters", json={"name": "added", "path": "probe-b"}, headers=AUTH)
    assert again.status_code == 409
    listing = httpx.get(f"{server.url}/v1/adapters", headers=AUTH).json()
    assert "added" in {a["name"] for a in listing["adapters"]} and len(listing["backbones"]) == 1
    assert httpx.delete(f"{server.url}/v1/adapters/added", headers=AUTH).status_code == 200
    assert post(server, "added", {"inputs": ["lovely"]}).status_code == 404
    assert httpx.delete(f"{server.url}/v1/adapters/added", headers=AUTH).status_code == 404
    assert post(server, "probe", {"inputs": ["lovely"]}).status_code == 200  # its lane-mate keeps serving


def test_an_input_too_long_fails_its_own_request_only(server):
    add = httpx.post(f"{server.url}/v1/adapters", json={"name": "strict", "path": "strict"}, headers=AUTH, timeout=30)
    assert add.status_code == 201
    long_text = " ".join(["good"] * 40)  # over the adapter's 32 tokens

    async def fire():
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as client:
            return await asyncio.gather(*(client.post("/v1/adapters/strict/predict", json={"inputs": texts})
                                          for texts in [["lovely"], ["bad story", long_text], ["a great film"]] * 3))

    answers = asyncio.run(fire())
    assert [a.status_code for a in answers] == [200, 422, 200] * 3
    assert "inputs[1]: input has" in answers[1].json()["error"]["message"]
    assert httpx.delete(f"{server.url}/v1/adapters/strict", headers=AUTH).status_code == 200


@pytest.mark.parametrize(("path", "status", "message"), [
    ("../outside/linear-probe", 403, "may not contain '..'"),
    ("linear-probe/../../outside/linear-probe", 403, "may not contain '..'"),
    ("{outside}", 403, "outside the adapter root"),
    ("escape", 403, "outside the adapter root"),
    ("sneaky", 403, "a link that leads outside"),
    ("no-such-adapter", 422, "does not exist"),
    ("mismatch", 409, "trained on backbone"),
])
def test_runtime_loading_stays_under_the_root_and_on_the_loaded_backbone(server, workdir, path, status, message):
    path = path.format(outside=workdir / "outside" / "linear-probe")
    answer = httpx.post(f"{server.url}/v1/adapters", json={"name": "x", "path": path}, headers=AUTH, timeout=30)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]["message"]
    assert "x" not in {a["name"] for a in httpx.get(f"{server.url}/v1/adapters", headers=AUTH).json()["adapters"]}


@pytest.mark.parametrize("name", ["../x", "", "a/b", "x" * 65])
def test_bad_adapter_names_are_refused(server, name):
    answer = httpx.post(f"{server.url}/v1/adapters", json={"name": name, "path": "linear-probe"}, headers=AUTH)
    assert answer.status_code == 422 and "adapter name" in answer.json()["error"]["message"]


def test_shutdown_drains_requests_in_flight(workdir):
    slow = Server(workdir, "--adapter", "probe=root/linear-probe", "--max-wait-ms", "2000")
    answers = []
    request = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{slow.url}/v1/adapters/probe/predict", json={"inputs": ["lovely"]}, timeout=30)))
    request.start()
    time.sleep(0.7)  # the request now waits in its micro-batch
    slow.process.send_signal(signal.SIGTERM)
    request.join(30)
    assert slow.stop() in DRAINED, slow.output()
    assert answers and answers[0].status_code == 200 and answers[0].json()["predictions"][0]["label"] in ("negative", "positive")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{slow.url}/healthz", timeout=2)


@pytest.mark.parametrize(("args", "message"), [
    (["--adapter", "probe"], "expected NAME=DIRECTORY"),
    (["--adapter", "probe=root/none"], "does not exist"),
    (["--adapter", "probe=root/linear-probe", "--adapter", "probe=root/probe-b"], "more than once"),
    (["--adapter", "probe=outside/linear-probe", "--adapter-root", "root"], "outside the adapter root"),
    (["--adapter", "probe=root/linear-probe", "--adapter", "bad=root/mismatch"], "trained on backbone"),
    (["--token-file", "no-such-file"], "--token-file no-such-file"),
    (["--max-wait-ms", "-1"], "must be a finite number >= 0"),
    (["--port", "70000"], "cannot listen there"),
    (["--host", "203.0.113.7"], "cannot listen there"),
])
def test_startup_mistakes_are_one_line_errors(workdir, monkeypatch, capsys, args, message):
    monkeypatch.chdir(workdir)
    try:
        status = main(["serve", *([] if "--port" in args else ["--port", str(free_port())]), *args])
    except SystemExit as usage_error:  # argparse's own mistakes
        status = usage_error.code
    error = capsys.readouterr().err.strip()
    assert status == 2 and message in error and len(error.splitlines()) == 1


def test_create_app_embeds_in_another_asgi_server(workdir, monkeypatch):
    from fastapi.testclient import TestClient

    from infoprompt.serving.app import create_app

    monkeypatch.chdir(workdir)
    app = create_app({"probe": workdir / "root" / "linear-probe"}, adapter_root=workdir / "root",
                     backbone_dirs=[workdir / "tiny-bert"])
    with TestClient(app) as client:
        answer = client.post("/v1/adapters/probe/predict", json={"inputs": ["lovely", "bad story"]})
        assert answer.status_code == 200 and len(answer.json()["predictions"]) == 2
        assert client.post("/v1/adapters", json={"name": "b", "path": "probe-b"}).status_code == 201
        assert client.app.state.infoprompt.registry.adapters.keys() == {"probe", "b"}
