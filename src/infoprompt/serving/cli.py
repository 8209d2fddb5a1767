"""``infoprompt serve``: the command that loads adapters and runs the HTTP API under uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from pathlib import Path

from infoprompt.errors import UserError
from infoprompt.validation import option, positive_int

POSITIVE = option(positive_int)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
DEFAULT_MAX_THREADS = 4


def non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value}")
    return number


def adapter_spec(value: str) -> tuple[str, str]:
    name, sep, directory = value.partition("=")
    if not sep or not name or not directory:
        raise argparse.ArgumentTypeError(f"expected NAME=DIRECTORY, got {value!r}")
    return name, directory


def add_serve_command(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve", help="serve saved adapters over HTTP (JSON), sharing one copy of each frozen encoder",
        description="Serve saved adapters as an HTTP JSON API; see docs/serving.md.")
    serve.add_argument("--adapter", action="append", type=adapter_spec, default=[], metavar="NAME=DIR",
                       help="an adapter to serve under NAME (repeat for more)")
    serve.add_argument("--adapter-root", help="the only directory adapters may be loaded from; also turns on "
                                              "POST /v1/adapters (runtime loading)")
    serve.add_argument("--allow-backbone-dir", action="append", default=[], metavar="DIR",
                       help="with --adapter-root, adapters may also name backbone directories under DIR (by default "
                            "only packaged names, Hugging Face ids and directories under the root); repeat for more")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=POSITIVE, default=8080, help="port to listen on (default 8080)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="on a loopback address, also answer requests whose Host header is NAME (a reverse "
                            "proxy that passes its own host name on); repeat for more")
    serve.add_argument("--token-file", help="file holding a bearer token that every request but /healthz must send")
    serve.add_argument("--max-batch", type=POSITIVE, default=32, help="inputs per micro-batch (default 32)")
    serve.add_argument("--max-wait-ms", type=non_negative_float, default=2.0,
                       help="how long a batch waits for more requests (default 2 ms)")
    serve.add_argument("--max-inputs", type=POSITIVE, default=256, help="inputs per request (default 256)")
    serve.add_argument("--max-body-bytes", type=POSITIVE, default=1 << 20, help="request body limit (default 1 MiB)")
    serve.add_argument("--max-queue", type=POSITIVE, default=1024,
                       help="requests waiting per adapter before 503 (default 1024)")
    serve.add_argument("--threads", type=POSITIVE,
                       help="torch threads for inference (default: the CPUs this process may use, by affinity and "
                            f"cgroup quota, at most {DEFAULT_MAX_THREADS}, unless OMP_NUM_THREADS is set)")
    serve.add_argument("--drain-timeout", type=POSITIVE, default=30,
                       help="seconds a shutdown waits for requests in flight (default 30)")
    serve.add_argument("--separate-backbones", action="store_true",
                       help="give every adapter its own copy of its encoder (the one-model-per-task baseline of "
                            "benchmarks/serve_bench.py; wasteful otherwise)")
    serve.add_argument("--per-adapter-lanes", action="store_true",
                       help="run every LoRA adapter in a batch of its own instead of mixing the rows of every LoRA "
                            "adapter on a backbone in one batch (the baseline of benchmarks/serve_bench.py)")
    serve.add_argument("--cache-dir", help="where packaged backbones are extracted (default ~/.cache/infoprompt)")
    serve.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"), default="warning")
    serve.set_defaults(handler=cmd_serve)


MAX_TOKEN_BYTES = 4096  # a bearer token is tens of bytes; a token file is read no further than this


def read_token(path: str) -> str:
    """The token of ``--token-file``: at most :data:`MAX_TOKEN_BYTES` are read (``/dev/zero`` is one line, not
    all of memory)."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_TOKEN_BYTES + 1)
        if len(data) > MAX_TOKEN_BYTES:
            raise UserError(f"--token-file {path}: more than {MAX_TOKEN_BYTES} bytes; the file holds one token")
        token = data.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--token-file {path}: cannot read it ({error})") from None
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise UserError(f"--token-file {path}: expected one printable token without spaces")
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bound_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a busy port is a one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as error:  # OverflowError: a port over 65535
        sock.close()
        reason = getattr(error, "strerror", None) or str(error)
        raise UserError(f"--host {host} --port {port}: cannot listen there ({reason})") from None
    sock.set_inheritable(True)
    return sock


def quiet_progress_bars() -> None:
    """A server's log is no place for the progress bars of transformers and the Hub ("Loading weights")."""
    import huggingface_hub.utils
    import transformers

    transformers.utils.logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from infoprompt.serving.app import ServeSettings, create_app
    except ModuleNotFoundError as error:
        raise UserError(f"infoprompt serve needs {error.name}: pip install 'infoprompt[serve]'") from None
    from infoprompt.serving.registry import AdapterRegistry
    from infoprompt.threads import use_threads

    names = [name for name, _ in args.adapter]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise UserError(f"argument --adapter: the name(s) {', '.join(duplicates)} are given more than once")
    if args.adapter_root is not None and not Path(args.adapter_root).is_dir():
        raise UserError(f"--adapter-root {args.adapter_root} is not a directory")
    token = read_token(args.token_file) if args.token_file else None
    loopback = is_loopback(args.host)
    threads = use_threads(args.threads, at_most=DEFAULT_MAX_THREADS)
    quiet_progress_bars()
    for directory in args.allow_backbone_dir:
        if args.adapter_root is None:
            raise UserError("--allow-backbone-dir needs --adapter-root (without a root, backbones are not restricted)")
        if not Path(directory).is_dir():
            raise UserError(f"--allow-backbone-dir {directory} is not a directory")
    registry = AdapterRegistry(Path(args.adapter_root) if args.adapter_root else None, args.cache_dir,
                               separate_backbones=args.separate_backbones, mixed_lora=not args.per_adapter_lanes,
                               backbone_dirs=[Path(directory) for directory in args.allow_backbone_dir])
    for name, directory in args.adapter:
        registry.load(name, directory)
    settings = ServeSettings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, max_inputs=args.max_inputs,
                             max_body_bytes=args.max_body_bytes, max_queue=args.max_queue, token=token,
                             allowed_hosts=(*LOOPBACK_NAMES, *args.allow_host) if loopback else None)
    sock = bound_socket(args.host, args.port)
    if not loopback and token is None:
        print(f"infoprompt: warning: serving on {args.host} without --token-file: anyone who can reach the port "
              "can use the adapters", file=sys.stderr)
    config = uvicorn.Config(create_app(registry=registry, settings=settings), log_level=args.log_level,
                            timeout_graceful_shutdown=args.drain_timeout, access_log=args.log_level in ("info", "debug"))
    print(f"infoprompt: serving {len(registry.adapters)} adapter(s) on {len(registry.backbones)} backbone(s) at "
          f"http://{args.host if ':' not in args.host else f'[{args.host}]'}:{args.port} with {threads.threads} torch "
          f"thread(s) ({threads.source})", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
