"""Method kinds: one registry builds, trains and loads every kind; a new kind is one module plus one line;
the package has no import cycle, lazy imports included."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from test_feature_store import ROWS, write_split

import infoprompt
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.kinds import KINDS, MethodKind, fit_function, kind_of, register_kind
from infoprompt.methods import METHODS, MethodPreset, register_method
from infoprompt.model import PromptClassifier
from infoprompt.pipeline import RunSpec, build_classifier

PACKAGE = Path(infoprompt.__file__).parent


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it names in any import statement, at module level or inside a function."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    prefix = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(prefix + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph(PACKAGE)) == []


def test_the_cycle_check_finds_a_lazy_import_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from pkg.a import thing\n")
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_every_method_has_a_registered_kind_with_a_class_and_a_trainer():
    for method in METHODS:
        kind = kind_of(method)
        assert callable(kind.model_type().load), method
    assert fit_function("linear-probe").__name__ == "fit_linear_probe"


def test_prompt_classifier_loads_only_its_own_kind(bert_backbone, toy_examples, tmp_path):
    probe = build_classifier(RunSpec(task="sst2", method="linear-probe", classifier={"max_length": 48}), bert_backbone)
    infoprompt.train(probe, toy_examples, None, infoprompt.TrainConfig(progress=False))  # the probe's own trainer
    probe.save_pretrained(tmp_path / "probe")
    with pytest.raises(UserError, match="load_adapter"):
        PromptClassifier.from_pretrained(tmp_path / "probe", backbone=bert_backbone)
    assert type(infoprompt.load_adapter(tmp_path / "probe", backbone=bert_backbone)).__name__ == "LinearProbe"


@pytest.fixture
def dummy_kind():
    register_kind(MethodKind("centroid", "dummy_kind", "CentroidClassifier", "fit_centroids"))
    register_method(MethodPreset("centroid", None, "none", "cls", 0.0, 0.0, False, 0.0, kind="centroid",
                                 description="test-only: nearest class centroid"))
    yield
    del KINDS["centroid"], METHODS["centroid"]


def test_a_new_kind_trains_saves_loads_and_predicts_through_the_cli(dummy_kind, tiny_model_dirs, tmp_path, capsys):
    write_split(tmp_path / "data", ROWS)
    backbone = str(tiny_model_dirs["bert"])
    common = ["--data-dir", str(tmp_path / "data"), "--quiet"]
    assert main(["train", "--task", "sst2", "--method", "centroid", "--shots", "8", "--backbone", backbone,
                 "--max-length", "48", "--out", str(tmp_path / "run"), *common]) == 0
    trained = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert trained["method"] == "centroid" and (tmp_path / "run" / "adapter_model.safetensors").is_file()
    capsys.readouterr()
    assert main(["eval", "--adapter", str(tmp_path / "run"), *common]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == trained["metrics"]
    (tmp_path / "in.jsonl").write_text(json.dumps({"sentence": "a great movie"}) + "\n")
    assert main(["predict", "--adapter", str(tmp_path / "run"), "--input", str(tmp_path / "in.jsonl"), "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("positive", "negative")
