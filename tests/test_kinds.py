"""Method kinds: one registry builds, trains and loads every kind; a new kind is one module plus one line;
the package has no import cycle, lazy imports included."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_feature_store import ROWS, write_split

import infoprompt
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.kinds import KINDS, METHODS, kind_of, register_kind
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
            elif isinstance(node, ast.Call) and _names_import_module(node.func) and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                targets = [node.args[0].value]  # importlib.import_module("infoprompt.x"): a dynamic import
            else:
                continue
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def _names_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id in ("import_module", "__import__")) or (
        isinstance(func, ast.Attribute) and func.attr == "import_module")


def dynamic_imports(root: Path) -> dict[str, list[str]]:
    """Module file -> the package modules it imports by string (``importlib.import_module``, ``__import__``)."""
    found: dict[str, list[str]] = {}
    for path in root.rglob("*.py"):
        if path == root / "__init__.py":
            continue  # the package's lazy public API, the one place allowed to import by name
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _names_import_module(node.func):
                argument = node.args[0] if node.args else None
                name = argument.value if isinstance(argument, ast.Constant) else ast.unparse(argument or node)
                if not isinstance(name, str) or name.startswith(root.name) or not isinstance(argument, ast.Constant):
                    found.setdefault(str(path.relative_to(root)), []).append(str(name))
    return found


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


def test_the_cycle_check_follows_imports_by_string(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("import importlib\n\ndef later():\n    return importlib.import_module('pkg.a')\n")
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]
    assert dynamic_imports(package) == {"b.py": ["pkg.a"]}


def test_only_the_lazy_public_api_imports_package_modules_by_string():
    # The package's __init__ maps public names to modules and imports them on first use (so that
    # `infoprompt.theory` never loads torch); nothing else names a module of the package in a string.
    assert dynamic_imports(PACKAGE) == {}
    assert set(infoprompt.__all__) == set(infoprompt._API)


def test_every_method_has_a_registered_kind_with_a_model_and_a_fit():
    for method in METHODS:
        kind = kind_of(method)
        assert callable(kind.model.load) and callable(kind.fit), method
        assert method in [row.name for row in kind.methods], method
    assert kind_of("linear-probe").fit.__name__ == "fit_linear_probe"


def test_one_loader_loads_every_kind(bert_backbone, toy_examples, tmp_path):
    probe = build_classifier(RunSpec(task="sst2", method="linear-probe", classifier={"max_length": 48}), bert_backbone)
    result = infoprompt.train(probe, toy_examples, None, infoprompt.TrainConfig(progress=False))  # the probe's fit
    assert isinstance(result, infoprompt.FitResult) and result.steps > 0
    probe.save_pretrained(tmp_path / "probe")
    assert type(infoprompt.load_adapter(tmp_path / "probe", backbone=bert_backbone)).__name__ == "LinearProbe"


def test_make_classifier_names_an_unknown_option_and_the_kind(bert_backbone):
    with pytest.raises(UserError, match="method infoprompt .kind prompt. has no option betta; its options: .*beta"):
        infoprompt.make_classifier(bert_backbone, "sst2", "infoprompt", betta=0.1)
    with pytest.raises(UserError, match="method setfit .kind setfit. has no option beta"):
        infoprompt.make_classifier(bert_backbone, "sst2", "setfit", beta=0.1)


def test_no_list_of_kind_names_outside_the_kinds(tmp_path):
    """What a kind can do is asked of the kind: no module outside kinds/ spells a tuple or set of kind names."""
    names = set(KINDS)
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "kinds" in path.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                spelled = {item.value for item in node.elts if isinstance(item, ast.Constant)} & names
                if len(spelled) >= 2 or (spelled and len(node.elts) == 1):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {sorted(spelled)}")
    assert found == []


@pytest.fixture
def dummy_kind():
    import dummy_kind

    register_kind(dummy_kind.KIND)  # the one registry line a new kind needs
    yield dummy_kind
    del KINDS["centroid"], METHODS["centroid"], METHODS["centroid-sharp"]


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
    results, grid = tmp_path / "results", tmp_path / "grid.yaml"
    grid.write_text(f"tasks: [sst2]\nmethods: [centroid]\nshots: [8]\nseeds: [1, 2]\nbackbone: {backbone}\n"
                    "classifier: {max_length: 48, centroid_scale: 2.0}\n")
    assert main(["sweep", "--grid", str(grid), "--results", str(results), *common]) == 0
    assert main(["report", str(results), "--compare", "centroid:centroid"]) == 2  # a method against itself: refused
    assert main(["report", str(results)]) == 0
    report = (results / "report" / "report.md").read_text()
    assert "| centroid |" in report and len(list((results / "task=sst2" / "method=centroid").rglob("*.json"))) == 2


def test_a_new_kinds_own_option_is_a_flag_checked_saved_and_refused_elsewhere(dummy_kind, tiny_model_dirs, tmp_path,
                                                                             capsys):
    """The throwaway kind's option reaches the command line, its check, its methods' presets and its saved
    adapter with nothing but its module and the registry line; other kinds' options and training flags its fit
    does not read are refused naming it, and its option is refused for the kinds that lack it."""
    write_split(tmp_path / "data", ROWS)
    train = ["train", "--task", "sst2", "--shots", "8", "--backbone", str(tiny_model_dirs["bert"]), "--max-length",
             "48", "--data-dir", str(tmp_path / "data"), "--quiet"]
    assert main(["train", "--help"]) == 0
    assert "--centroid-scale" in capsys.readouterr().out
    assert main([*train, "--method", "centroid", "--centroid-scale", "2", "--out", str(tmp_path / "two")]) == 0
    saved = json.loads((tmp_path / "two" / "infoprompt_adapter.json").read_text())
    assert saved["kind"] == "centroid" and saved["options"] == {"centroid_scale": 2.0}
    assert main([*train, "--method", "centroid-sharp", "--out", str(tmp_path / "sharp")]) == 0
    sharp = json.loads((tmp_path / "sharp" / "infoprompt_adapter.json").read_text())["options"]
    assert sharp == {"centroid_scale": 4.0}  # the method's preset
    one = infoprompt.load_adapter(tmp_path / "two")
    assert isinstance(one.config.options, dummy_kind.CentroidOptions) and one.config.options.centroid_scale == 2.0
    for bad, words in ((["--method", "centroid", "--centroid-scale", "0"], "centroid-scale"),
                       (["--method", "centroid", "--beta", "0.1"], "method centroid (kind centroid) has no option --beta"),
                       (["--method", "centroid", "--epochs", "2"], "method centroid (kind centroid) has no option --epochs"),
                       (["--method", "linear-probe", "--centroid-scale", "2"], "(kind linear-probe)")):
        capsys.readouterr()
        assert main([*train, *bad, "--out", str(tmp_path / "x")]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and words in error[0], error
        assert not (tmp_path / "x").exists()


def test_no_function_in_the_package_is_over_80_lines():
    """A function reads in one screen (the house rule; the training loop is nanoGPT's size)."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


def test_eval_plots_import_no_research_module(tmp_path):
    """``eval --plots`` draws its confusion matrix with the shared figure helpers (infoprompt.figures): of the
    research packages (analysis, experiments, theory) only their command-line parsers load with the CLI."""
    code = ("import sys\nimport infoprompt.cli\nfrom infoprompt.eval_report import plot_confusion\n"
            f"plot_confusion({{'labels': ['a', 'b'], 'matrix': [[1, 2], [0, 3]]}}, {str(tmp_path / 'c.png')!r}, 't')\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[:2] in "
            "(['infoprompt', 'analysis'], ['infoprompt', 'experiments'], ['infoprompt', 'theory']))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert (tmp_path / "c.png").stat().st_size > 0
    assert sorted(loaded) == sorted(f"infoprompt.{package}{part}" for package in ("analysis", "experiments", "theory")
                                    for part in ("", ".cli")), loaded


def test_the_layout_map_in_the_guide_names_every_module_of_the_package_root_and_of_kinds():
    guide = (PACKAGE.parents[1] / "docs" / "guide.md").read_text(encoding="utf-8")
    layout = guide[guide.index("### Layout"):]
    layout = layout[:layout.index("tests/  benchmarks/  docs/")]
    named = set(re.findall(r"[A-Za-z_][\w]*(?:\.py|\.json|/)", layout))
    present = {path.name + ("/" if path.is_dir() else "") for folder in (PACKAGE, PACKAGE / "kinds")
               for path in folder.iterdir() if not path.name.startswith("__")
               and (path.suffix in (".py", ".json") or (path / "__init__.py").exists())}
    assert not present - named, f"docs/guide.md's layout map lacks {sorted(present - named)}"
