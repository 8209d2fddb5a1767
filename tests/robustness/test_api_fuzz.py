"""The HTTP API fuzzed from its own OpenAPI schema: bodies the schema allows, any JSON, any bytes, and any path
parameter, on every route. Whatever comes in, the answer is never a 500.

The bodies the schema allows are drawn by :func:`from_schema`, a Hypothesis strategy for the JSON Schema subset
FastAPI writes (objects, arrays, strings, numbers, booleans, ``anyOf``, ``$ref``): hypothesis-jsonschema (0.23.1,
its latest release) draws objects through Hypothesis internals that Hypothesis 6.170 no longer has.
Every ``pytest`` runs a small, derandomised budget (a few seconds); ``--hypothesis-profile=fuzz`` runs many more.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")

FIXTURES = Path(__file__).parents[1] / "fixtures" / "adapters"
TOKEN = "fuzz-token"
# Values any JSON document may hold; the schema's own bodies come from its request schemas.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Strings a fuzzer should try beside random text (a dictionary, as fuzzers keep one): the served adapter's name,
# its field, a name free for a new adapter, and texts that only look like text.
WORDS = ("probe", "sentence", "b", "good film", "\u200b", "\ud800", "..", "/")
STRINGS = st.text() | st.sampled_from(WORDS) | st.builds(str.__add__, st.sampled_from(WORDS), st.text(max_size=4))


@pytest.fixture(scope="module")
def api(tiny_model_dirs, tmp_path_factory):
    """The app over an adapter root holding the committed linear probe, its backbone beside the root."""
    import os

    from fastapi.testclient import TestClient

    from infoprompt.serving.app import ServeSettings, create_app

    work = tmp_path_factory.mktemp("api-fuzz")
    shutil.copytree(tiny_model_dirs["bert"], work / "tiny-bert")
    shutil.copytree(FIXTURES / "linear-probe", work / "root" / "probe")
    previous = Path.cwd()
    os.chdir(work)  # the adapter names its backbone by the relative path tiny-bert
    try:
        app = create_app({"probe": work / "root" / "probe"}, adapter_root=work / "root",
                         backbone_dirs=[work / "tiny-bert"],
                         settings=ServeSettings(max_inputs=8, max_body_bytes=1 << 16, token=TOKEN))
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client, app.openapi()
    finally:
        os.chdir(previous)


def operations(schema: dict) -> list[tuple[str, str, dict]]:
    return [(method.upper(), path, operation) for path, item in sorted(schema["paths"].items())
            for method, operation in sorted(item.items())]


def from_schema(schema: dict, components: dict) -> st.SearchStrategy:
    """Values a JSON schema of FastAPI's allows (``components``: the OpenAPI document's, for ``$ref``)."""
    if "$ref" in schema:
        return from_schema(components["schemas"][schema["$ref"].rsplit("/", 1)[1]], components)
    if "anyOf" in schema:
        return st.one_of([from_schema(arm, components) for arm in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        properties = {name: from_schema(value, components) for name, value in schema.get("properties", {}).items()}
        required = set(schema.get("required", ()))
        extra = schema.get("additionalProperties", True)
        if not properties and extra is not False:
            values = from_schema(extra, components) if isinstance(extra, dict) else JSON_VALUES
            return st.dictionaries(STRINGS, values, max_size=4)
        return st.fixed_dictionaries({name: value for name, value in properties.items() if name in required},
                                     optional={name: value for name, value in properties.items() if name not in required})
    if kind == "array":
        smallest = schema.get("minItems", 0)
        return st.lists(from_schema(schema.get("items", {}), components), min_size=smallest, max_size=smallest + 6)
    simple = {"string": STRINGS, "boolean": st.booleans(), "integer": st.integers(), "null": st.none(),
              "number": st.floats(allow_nan=False, allow_infinity=False)}
    return simple.get(kind, JSON_VALUES)


def body_strategy(schema: dict, operation: dict) -> st.SearchStrategy:
    """A body for ``operation``: one its schema allows (most often), any JSON value, or any bytes."""
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    anything = JSON_VALUES.map(lambda value: ("json", value)) | st.binary(max_size=64).map(lambda raw: ("raw", raw))
    if content is None:
        return st.none() | anything
    allowed = from_schema(content["schema"], schema["components"]).map(lambda value: ("json", value))
    return allowed | allowed | anything


@settings(max_examples=settings.default.max_examples * 25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(data=st.data())
def test_no_request_gets_a_500(api, data):
    client, schema = api
    method, path, operation = data.draw(st.sampled_from(operations(schema)), label="operation")
    for parameter in operation.get("parameters", []):
        value = data.draw(STRINGS, label=parameter["name"])
        path = path.replace("{" + parameter["name"] + "}", urllib.parse.quote(value, safe="", errors="surrogatepass") or "%20")
    body = data.draw(body_strategy(schema, operation), label="body")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if body is None:
        answer = client.request(method, path, headers=headers)
    elif body[0] == "json":
        answer = client.request(method, path, content=json.dumps(body[1]).encode("utf-8", "surrogatepass"),
                                headers={**headers, "Content-Type": "application/json"})
    else:
        answer = client.request(method, path, content=body[1], headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code < 500, (method, path, body, answer.text[:300])
    if answer.status_code >= 400 and path != "/metrics":
        message = answer.json()["error"]["message"]
        assert isinstance(message, str) and "\n" not in message
