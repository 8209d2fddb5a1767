"""``infoprompt serve`` with LoRA adapters: requests to different adapters of one backbone share a batch (the
mixed lane), answer what each adapter predicts alone, and the server's rules for adapters (the root, the
backbone fingerprint, damaged files) hold for adapters that join the mixed lane at runtime."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from test_mixed_lora import randomise_lora_and_head
from test_serve import AUTH, FIXTURES, HAS_SETFIT, TEXTS, TOKEN, TOLERANCE, Server, metric

import infoprompt as ip
from infoprompt.training.inference import predict

httpx = pytest.importorskip("httpx", reason="the serve extra is not installed: pip install 'infoprompt[serve]'")
pytestmark = pytest.mark.skipif(not HAS_SETFIT, reason="the setfit extra is not installed")

KINDS = ("lora", "setfit-lora", "top-lora")


def random_variant(backbone, source: Path, target: Path, seed: int) -> None:
    """A copy of the adapter at ``source`` whose LoRA and linear head are random: it answers differently."""
    randomise_lora_and_head(ip.load_adapter(source, backbone=backbone), seed).save_pretrained(target)


@pytest.fixture(scope="module")
def workdir(tiny_model_dirs, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("serve-lora")
    shutil.copytree(tiny_model_dirs["bert"], work / "tiny-bert")
    root = work / "root"
    backbone = ip.load_backbone(str(work / "tiny-bert"))
    for seed, kind in enumerate(KINDS, 1):
        shutil.copytree(FIXTURES / kind, root / kind)
        random_variant(backbone, FIXTURES / kind, root / f"{kind}-b", seed)
    random_variant(backbone, FIXTURES / "top-lora", work / "outside" / "top-lora", 7)
    (root / "escape").symlink_to(work / "outside" / "top-lora", target_is_directory=True)
    mismatch = root / "mismatch"
    shutil.copytree(FIXTURES / "top-lora", mismatch)
    config = json.loads((mismatch / "infoprompt_adapter.json").read_text())
    config["backbone_fingerprint"]["embedding_sha256"] = "0" * 16
    (mismatch / "infoprompt_adapter.json").write_text(json.dumps(config))
    damaged = root / "damaged"
    shutil.copytree(FIXTURES / "top-lora", damaged)
    (damaged / "peft" / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    random_variant(backbone, FIXTURES / "setfit-lora", root / "late", 9)
    (work / "token").write_text(TOKEN + "\n")
    return work


SERVED = {name: name for kind in KINDS for name in (kind, f"{kind}-b")}


def start(workdir: Path, *extra: str) -> Server:
    args = [arg for name, path in SERVED.items() for arg in ("--adapter", f"{name}=root/{path}")]
    return Server(workdir, *args, "--adapter-root", "root", "--allow-backbone-dir", "tiny-bert", "--token-file",
                  "token", "--max-wait-ms", "20", *extra)


@pytest.fixture(scope="module")
def expected(workdir) -> dict[tuple[str, str], dict]:
    """Every served adapter's record for every text, from ``predict`` with the adapter alone."""
    backbone = ip.load_backbone(str(workdir / "tiny-bert"))
    records = {}
    for name, path in {**SERVED, "late": "late"}.items():
        model = ip.load_adapter(workdir / "root" / path, backbone=backbone)
        for text, record in zip(TEXTS, predict(model, [{"sentence": t} for t in TEXTS]), strict=True):
            records[(name, text)] = record
    return records


def fire(server: Server, requests: list[tuple[str, list[str]]]) -> list[httpx.Response]:
    async def send():
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as client:
            return await asyncio.gather(*(client.post(f"/v1/adapters/{name}/predict",
                                                      json={"inputs": texts, "return_proba": True})
                                          for name, texts in requests))

    return asyncio.run(send())


def check_answers(requests, answers, expected) -> None:
    assert [a.status_code for a in answers] == [200] * len(requests), answers[0].text
    for (name, texts), answer in zip(requests, answers, strict=True):
        for text, prediction in zip(texts, answer.json()["predictions"], strict=True):
            assert prediction["label"] == expected[(name, text)]["label"]
            assert prediction["probabilities"] == pytest.approx(expected[(name, text)]["probabilities"], abs=TOLERANCE)


@pytest.mark.parametrize("lanes", ["mixed", "per-adapter"])
def test_lora_adapters_answer_as_alone_in_mixed_and_per_adapter_lanes(workdir, expected, lanes):
    server = start(workdir, *(["--per-adapter-lanes"] if lanes == "per-adapter" else []))
    try:
        listing = httpx.get(f"{server.url}/v1/adapters", headers=AUTH).json()["adapters"]
        assert {a["name"]: a["mixed_lora_batch"] for a in listing} == {name: lanes == "mixed" for name in SERVED}
        names = list(SERVED)
        different = [(names[i % len(names)], [TEXTS[(i + k) % len(TEXTS)] for k in range(1 + i % 3)]) for i in range(36)]
        fan_out = [(name, TEXTS[:3]) for name in names] * 3
        for requests in (different, fan_out):
            check_answers(requests, fire(server, requests), expected)
        requests_per_batch = metric(server, 'infoprompt_batch_requests_sum{lane="lora"}')
        batches = metric(server, 'infoprompt_batch_requests_count{lane="lora"}')
        if lanes == "mixed":  # requests of different adapters shared batches, and fanned-out texts were read once
            assert batches and requests_per_batch / batches > 1
            rows = sum(len(texts) for _, texts in different + fan_out)
            assert metric(server, 'infoprompt_encoded_inputs_total{lane="lora"}') < rows
        else:
            assert batches == 0
    finally:
        server.stop()


REFUSED = [("escape", 403, "outside the adapter root"), ("mismatch", 409, "trained on backbone"),
           ("damaged", 422, "adapter_model.safetensors")]


def test_lora_adapters_added_at_runtime_keep_the_servers_rules(workdir, expected):
    server = start(workdir)
    try:
        for path, status, message in REFUSED:
            answer = httpx.post(f"{server.url}/v1/adapters", json={"name": "x", "path": path}, headers=AUTH, timeout=30)
            assert answer.status_code == status and message in answer.json()["error"]["message"], answer.text
        added = httpx.post(f"{server.url}/v1/adapters", json={"name": "late", "path": "late"}, headers=AUTH, timeout=30)
        assert added.status_code == 201 and added.json()["mixed_lora_batch"], added.text
        requests = [("late", TEXTS[:4]), ("top-lora", TEXTS[:4]), ("lora-b", TEXTS[2:5])] * 2
        check_answers(requests, fire(server, requests), expected)
        assert httpx.delete(f"{server.url}/v1/adapters/late", headers=AUTH).status_code == 200
        check_answers(requests[1:3], fire(server, requests[1:3]), expected)
    finally:
        server.stop()
