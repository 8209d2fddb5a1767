"""The optional extras a command needs, checked by module name before anything heavy loads."""

from __future__ import annotations

import importlib.util

from infoprompt.errors import UserError

# The modules each extra of pyproject.toml brings that a command imports (test-only ones, httpx, left out).
EXTRA_MODULES = {
    "serve": ("fastapi", "uvicorn", "pydantic", "prometheus_client"),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
}
# The commands that cannot run without an extra.
COMMAND_EXTRAS = {"serve": "serve", "export": "onnx"}


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` this environment lacks; looked up, not imported (no seconds spent on torch)."""
    missing = []
    for name in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None to block it
            found = False
        if not found:
            missing.append(name)
    return missing


def require_extra_of(command: str) -> None:
    """A one-line :class:`~infoprompt.errors.UserError` naming the ``pip install`` line when ``infoprompt
    command`` needs an extra this environment lacks."""
    extra = COMMAND_EXTRAS.get(command)
    missing = missing_modules(extra) if extra else []
    if missing:
        raise UserError(f"infoprompt {command} needs {', '.join(missing)} (the {extra} extra): "
                        f"pip install 'infoprompt[{extra}]'")
