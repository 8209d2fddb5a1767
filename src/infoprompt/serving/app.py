"""The HTTP JSON API (FastAPI): health, the adapter list, prediction, runtime add/remove and Prometheus metrics.

:func:`create_app` is also the entry point for embedding the server in an existing ASGI application or server.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from infoprompt.errors import UserError
from infoprompt.gate import check_texts, parse_json
from infoprompt.serving.batching import Batcher, BatchReport, Busy
from infoprompt.serving.registry import (
    AdapterConflict,
    AdapterNotFound,
    AdapterRegistry,
    ForbiddenPath,
    LoadedAdapter,
)

ERROR_STATUS = ((AdapterNotFound, 404), (AdapterConflict, 409), (ForbiddenPath, 403), (UserError, 422))
UNAUTHENTICATED = ("/healthz",)


@dataclass(frozen=True)
class ServeSettings:
    """Limits and switches of a server.

    Attributes:
        max_batch: the most inputs one micro-batch gathers (a larger request runs as a batch of its own).
        max_wait_ms: how long the first request of a batch waits for others to join it.
        max_inputs: the most inputs one request may send.
        max_body_bytes: the largest request body accepted.
        max_queue: the most requests waiting per lane before the server answers 503.
        token: when set, every endpoint but ``/healthz`` needs ``Authorization: Bearer <token>``.
        allowed_hosts: when set, the ``Host`` header must name one of these (with any port): a server on the
            loopback interface refuses pages on other sites that resolve their own name to 127.0.0.1.
    """

    max_batch: int = 32
    max_wait_ms: float = 2.0
    max_inputs: int = 256
    max_body_bytes: int = 1 << 20
    max_queue: int = 1024
    token: str | None = None
    allowed_hosts: tuple[str, ...] | None = None


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: list[StrictStr | dict[StrictStr, StrictStr]] = Field(min_length=1)
    return_proba: StrictBool = False


class AddAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr
    path: StrictStr


class Metrics:
    """The server's Prometheus metrics, in a registry of its own (so that several apps can share a process)."""

    def __init__(self, registry: AdapterRegistry):
        self.registry = CollectorRegistry()
        self.requests = Counter("infoprompt_requests", "HTTP requests answered, by route and status code",
                                ["route", "status"], registry=self.registry)
        self.errors = Counter("infoprompt_errors", "HTTP requests answered with a 4xx or 5xx status",
                              ["route", "status"], registry=self.registry)
        self.latency = Histogram("infoprompt_request_seconds", "Time from request to response", ["route"],
                                 registry=self.registry)
        self.inputs = Counter("infoprompt_predicted_inputs", "Inputs predicted, by adapter", ["adapter"],
                              registry=self.registry)
        buckets = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
        self.batch_inputs = Histogram("infoprompt_batch_inputs", "Inputs per micro-batch", ["lane"],
                                      buckets=buckets, registry=self.registry)
        self.batch_requests = Histogram("infoprompt_batch_requests", "Requests per micro-batch", ["lane"],
                                        buckets=buckets, registry=self.registry)
        self.encoded = Counter("infoprompt_encoded_inputs", "Inputs the encoder read (an input sent to several "
                               "adapters that share a pass counts once)", ["lane"], registry=self.registry)
        self.batch_seconds = Histogram("infoprompt_batch_seconds", "Time to compute one micro-batch", ["lane"],
                                       registry=self.registry)
        Gauge("infoprompt_adapters_loaded", "Adapters loaded", registry=self.registry).set_function(
            lambda: len(registry.adapters))
        Gauge("infoprompt_backbones_loaded", "Distinct backbones in memory", registry=self.registry).set_function(
            lambda: len(registry.backbones))

    def batch(self, report: BatchReport) -> None:
        self.batch_inputs.labels(report.lane_kind).observe(report.inputs)
        self.batch_requests.labels(report.lane_kind).observe(report.jobs)
        self.batch_seconds.labels(report.lane_kind).observe(report.seconds)
        self.encoded.labels(report.lane_kind).inc(report.encoded)

    def response(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)


def error_body(status: int, message: str) -> dict[str, object]:
    return {"error": {"status": status, "message": message}}


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status, headers=dict(headers or {}))


def route_of(path: str) -> str:
    """A metrics label for ``path`` from a fixed set (never the path itself, which a client chooses)."""
    if path.startswith("/v1/adapters/") and path.endswith("/predict"):
        return "predict"
    if path == "/v1/adapters" or path.startswith("/v1/adapters/"):
        return "adapters"
    return path.lstrip("/") if path in ("/healthz", "/metrics") else "other"


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port or IPv6 brackets."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """ASGI middleware in front of every route: host and token checks, the body size limit, and the metrics of
    every response (also the refusals that never reach a route)."""

    def __init__(self, app: Any, settings: ServeSettings, metrics: Metrics):
        self.app = app
        self.settings = settings
        self.metrics = metrics

    def refusal(self, scope: dict) -> JSONResponse | None:
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        if self.settings.allowed_hosts is not None and host_name(headers.get("host", "")) not in self.settings.allowed_hosts:
            return error_response(421, f"host {headers.get('host', '')!r} is not served here")
        if self.settings.token is not None and scope["path"] not in UNAUTHENTICATED:
            given = headers.get("authorization", "")
            expected = f"Bearer {self.settings.token}"
            if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8")):
                return error_response(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                                      {"WWW-Authenticate": "Bearer"})
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.settings.max_body_bytes):
            return error_response(413, f"request body of {length} bytes is over the limit of "
                                       f"{self.settings.max_body_bytes} bytes")
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]
        received = [0]
        limit = self.settings.max_body_bytes

        async def send_and_note(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        async def receive_within_limit() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > limit:  # a chunked body has no Content-Length to check in advance
                    raise HTTPException(413, f"request body is over the limit of {limit} bytes")
            return message

        try:
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send_and_note)
            else:
                await self.app(scope, receive_within_limit, send_and_note)
        finally:
            self.metrics.response(route_of(scope["path"]), status[0], time.perf_counter() - started)


class GatedRequest(Request):
    """A request whose JSON body the gate reads (:func:`~infoprompt.gate.parse_json`: its depth limit and its
    messages), as every JSON file is read; a body it refuses is a 400 with the gate's one line."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = parse_json(await self.body(), "the body")
            except UserError as error:
                raise HTTPException(400, str(error)) from None
        return self._json


class GatedRoute(APIRoute):
    """A route that hands its handler a :class:`GatedRequest` (FastAPI's way to replace the body parser)."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def gated(request: Request) -> Response:
            return await handler(GatedRequest(request.scope, request.receive))

        return gated


def request_rows(adapter: LoadedAdapter, inputs: list[str | dict[str, str]]) -> tuple[list[dict[str, str]], list[str]]:
    """The request's inputs as the adapter's field dicts, with the names (``inputs[i]``) errors quote."""
    fields = adapter.info.fields
    rows, sources = [], []
    for index, item in enumerate(inputs):
        where = f"inputs[{index}]"
        if isinstance(item, str):
            if len(fields) != 1:
                raise UserError(f"{where}: adapter {adapter.name!r} (task {adapter.info.task}) reads the fields "
                                f"{', '.join(fields)}: send an object with them")
            row = {fields[0]: item}
        else:
            missing = [name for name in fields if name not in item]
            unknown = sorted(set(item) - set(fields))
            if missing or unknown:
                raise UserError(f"{where}: adapter {adapter.name!r} (task {adapter.info.task}) reads the fields "
                                f"{', '.join(fields)}; missing {missing}, unknown {unknown}")
            row = {name: item[name] for name in fields}
        rows.append(check_texts(row, where))
        sources.append(where)
    return rows, sources


@dataclass
class ServerState:
    """What the routes share: the registry, the lanes, the executors and whether startup finished."""

    registry: AdapterRegistry
    settings: ServeSettings
    metrics: Metrics
    startup: dict[str, str | Path]
    batcher: Batcher | None = None
    predictor: ThreadPoolExecutor | None = None
    loader: ThreadPoolExecutor | None = None
    ready: bool = False

    async def in_loader(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.loader, function, *args)


def create_app(adapters: Mapping[str, str | Path] | None = None, *, registry: AdapterRegistry | None = None,
               adapter_root: str | Path | None = None, settings: ServeSettings | None = None,
               backbone_dirs: Sequence[str | Path] = ()) -> FastAPI:
    """The server as an ASGI app.

    ``adapters`` (name → directory) are loaded at startup, before the app answers; ``registry`` may instead (or
    as well) hold adapters loaded already (the CLI loads them first, so that a bad one is a one-line error).
    ``adapter_root`` (when no registry is given) is the only directory adapters may come from, and turns on
    ``POST /v1/adapters``; their backbones are then packaged names, Hugging Face ids, or directories under the
    root or ``backbone_dirs``. Inference runs in one worker thread; set torch's thread count before serving.
    """
    settings = settings or ServeSettings()
    if registry is None:
        registry = AdapterRegistry(Path(adapter_root) if adapter_root is not None else None,
                                   backbone_dirs=[Path(directory) for directory in backbone_dirs])
    state = ServerState(registry, settings, Metrics(registry), dict(adapters or {}))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # One inference thread: the passes of all adapters on a shared encoder must not overlap (see
        # AdapterRegistry.model_thread); torch's own threads parallelise each pass.
        state.predictor = ThreadPoolExecutor(1, thread_name_prefix="infoprompt-predict")
        state.loader = ThreadPoolExecutor(1, thread_name_prefix="infoprompt-load")
        registry.model_thread = state.predictor
        state.batcher = Batcher(state.predictor, settings.max_batch, settings.max_wait_ms / 1000,
                                settings.max_queue, state.metrics.batch)
        try:
            for name, path in state.startup.items():
                await state.in_loader(registry.load, name, path)
            state.ready = True
            yield
        finally:
            state.ready = False
            await state.batcher.close()  # the server has drained its connections: finish what is queued
            registry.model_thread = None
            state.predictor.shutdown(wait=True)
            state.loader.shutdown(wait=True)

    app = FastAPI(title="infoprompt", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.router.route_class = GatedRoute
    app.state.infoprompt = state
    add_error_handlers(app)
    add_routes(app, state)
    app.add_middleware(Guard, settings=settings, metrics=state.metrics)
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every error is ``{"error": {"status", "message"}}``; bad input is a 4xx with one line saying why."""

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            return error_response(400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', '')})")
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        return error_response(422, f"{where}: {first.get('msg', 'invalid')}{more}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail), error.headers)

    @app.exception_handler(UserError)
    async def user_error(request: Request, error: UserError) -> JSONResponse:
        status = next(code for kind, code in ERROR_STATUS if isinstance(error, kind))
        return error_response(status, str(error))

    @app.exception_handler(Exception)
    async def fault(request: Request, error: Exception) -> JSONResponse:
        return error_response(500, f"internal error ({type(error).__name__}); the server log has the details")

    @app.exception_handler(Busy)
    async def busy(request: Request, error: Busy) -> JSONResponse:
        return error_response(503, str(error), {"Retry-After": "1"})


def add_routes(app: FastAPI, state: ServerState) -> None:
    registry = state.registry

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        if not state.ready:
            return error_response(503, "loading adapters")
        return JSONResponse({"status": "ok", "adapters": len(registry.adapters)})

    @app.get("/v1/adapters")
    async def list_adapters() -> dict[str, object]:
        return {"adapters": registry.describe(),
                "backbones": [{"name": key, "adapters": sorted(shared.users)}
                              for key, shared in sorted(registry.backbones.items())]}

    @app.post("/v1/adapters", status_code=201)
    async def add_adapter(request: AddAdapterRequest) -> dict[str, object]:
        return (await state.in_loader(registry.load, request.name, request.path, True)).describe()

    @app.delete("/v1/adapters/{name}")
    async def remove_adapter(name: str) -> dict[str, object]:
        removed = await state.in_loader(registry.remove, name)
        # A copy of the values: a load in the loader thread may add an adapter meanwhile.
        if not any(other.lane == removed.lane for other in list(registry.adapters.values())):
            state.batcher.retire(removed.lane)
        return {"removed": name}

    @app.post("/v1/adapters/{name}/predict")
    async def predict(name: str, request: PredictRequest) -> dict[str, object]:
        adapter = registry.get(name)
        if len(request.inputs) > state.settings.max_inputs:
            raise UserError(f"inputs: {len(request.inputs)} inputs, more than the {state.settings.max_inputs} "
                            "one request may send")
        rows, sources = request_rows(adapter, request.inputs)
        records = await state.batcher.submit(adapter, rows, sources)
        state.metrics.inputs.labels(name).inc(len(rows))
        if not request.return_proba:
            records = [{"label": record["label"]} for record in records]
        return {"adapter": name, "predictions": records}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
