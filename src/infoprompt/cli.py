"""The ``infoprompt`` command line: train, eval, predict, and the listing commands."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from infoprompt.analysis.cli import add_analysis_commands
from infoprompt.errors import UserError
from infoprompt.eval_report import CONFUSION_PNG
from infoprompt.experiments.cli import add_experiment_commands
from infoprompt.export import add_export_command
from infoprompt.extras import require_extra_of
from infoprompt.options import (
    COUNT,
    POSITIVE,
    OneLineParser,
    add_flags,
    config_overrides,
    flag_values,
    parse_shots,
    task_name,
)
from infoprompt.prediction_format import FORMATS
from infoprompt.recommended import RECOMMENDED_METHOD
from infoprompt.serving.cli import add_serve_command
from infoprompt.theory.cli import add_theory_commands
from infoprompt.tracking import add_tracking_options
from infoprompt.train_flags import flag_name, kind_flags, model_flags, training_flags

DEFAULT_SHOTS = 64
DEFAULT_PROMPTS = 4  # --n-prompts for a kind with prompts, when not given
SHOTS_UNSET = object()  # --shots not given: 64 for a task, every row of a --train-file


def method_name(value: str) -> str:
    """argparse type for --method: a row of the method table (checked against the registry's snapshot until the
    registry is loaded, so that a typo is refused at once; see :mod:`infoprompt.train_flags`)."""
    from infoprompt.train_flags import check_method

    try:
        return check_method(value)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def column_list(value: str) -> tuple[str, ...]:
    """argparse type for --keep-columns: ``"id,text"`` -> ``("id", "text")``; an empty or repeated name is refused."""
    names = tuple(part.strip() for part in value.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected column names separated by commas, got {value!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"column {repeated[0]!r} is named more than once")
    return names


def add_prediction_output_options(predict: argparse.ArgumentParser) -> None:
    """predict's --format, --keep-columns and --top-k: what each output record holds."""
    predict.add_argument("--format", choices=FORMATS,
                         help="jsonl: one JSON object per input (line, label, probabilities); csv: a header, then a "
                              "row per input (line, label, probability_<label> ...; a text cell starting with = + - "
                              "@ tab CR or ' gets a ' in front, so no spreadsheet runs it). Default: csv for an "
                              "--output named *.csv, else jsonl")
    predict.add_argument("--keep-columns", type=column_list, default=(), metavar="COL,...",
                         help="also write these input columns (csv: after line; jsonl: under input), so rows join "
                              "without line numbers; a .txt line's column is the task's field (text or sentence). "
                              "Default: none")
    predict.add_argument("--top-k", type=POSITIVE, metavar="K",
                         help="also give the K most probable labels with their probabilities, most probable first "
                              "(jsonl: top_k; csv: top1_label, top1_probability, ...)")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (defaults come from the method; [kinds] that have the option)")
    add_flags(group, model_flags())


def add_training_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training (what the method's kind reads; the others are refused; a flag that "
                                      "names an option of the method's kind sets that option)")
    add_flags(group, training_flags())
    add_device_options(group)


def add_device_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--device", default="auto", help="auto (GPU when CUDA is available, else CPU), cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=POSITIVE, help="torch CPU threads (default: the CPUs this process may use, "
                        "by affinity and cgroup quota, unless OMP_NUM_THREADS is set)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: encoder passes under bfloat16 autocast (faster on GPUs and recent CPUs)")


def split_flags(args: argparse.Namespace) -> tuple[dict[str, object], dict[str, object]]:
    """The kind options (``--n-prompts`` included) and the training fields the command line set, split by the
    method's kind (:meth:`~infoprompt.kinds.registry.Kind.split`, which refuses the flags the kind lacks)."""
    from infoprompt.kinds import kind_of
    from infoprompt.training.config import TrainConfig

    given = {**config_overrides(args, TrainConfig),
             **flag_values(args, [(name, spec) for name, (spec, _) in kind_flags().items()])}
    return kind_of(args.method).split(args.method, given, shown=flag_name)


def classifier_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The shared config fields and kind options the command line set, but the prompt count (a run's axis)."""
    from infoprompt.kinds.config import ClassifierConfig

    options = {name: value for name, value in split_flags(args)[0].items() if name != "n_prompts"}
    return {**config_overrides(args, ClassifierConfig), **options}


def training_config(args: argparse.Namespace, seed: int):
    from infoprompt.training.config import TrainConfig

    return TrainConfig(seed=seed, progress=not args.quiet, device=args.device, precision=args.precision,
                       **split_flags(args)[1])


def cmd_train(args: argparse.Namespace) -> int:
    from infoprompt.pipeline import RunSpec, run_training
    from infoprompt.threads import use_threads
    from infoprompt.tracking import check_tracking_flags, make_tracker, track_run
    from infoprompt.training.runtime import process_state

    check_tracking_flags(args.track, args.tracking_uri, args.tracking_experiment, args.register_model)
    split_flags(args)  # a flag the method's kind lacks is refused before anything loads
    use_threads(args.threads)
    shots = args.shots
    if shots is SHOTS_UNSET:
        shots = None if args.train_file else DEFAULT_SHOTS  # a file trains on every row unless --shots says
    n_prompts = DEFAULT_PROMPTS if args.n_prompts is None else args.n_prompts
    spec = RunSpec(
        task=args.task, method=args.method, shots=shots, n_prompts=n_prompts, seed=args.seed,
        backbone=args.backbone, data_dir=args.data_dir, source=args.source, classifier=classifier_overrides(args),
        training=training_config(args, args.seed), cache_dir=args.cache_dir, sampling=args.sampling,
        train_file=args.train_file, eval_file=args.eval_file, keep_training_state=args.keep_training_state,
        task_name=args.task_name, **file_columns(args),
    )
    tracker = make_tracker(args.track, args.tracking_uri, args.tracking_experiment, args.register_model)
    record = run_training(spec, args.out, overwrite=args.overwrite)
    if not process_state().is_main_process:
        return 0  # under accelerate launch the main process reports (and wrote) the run
    if tracker is not None:
        record = track_run(tracker, args.out, record, run_name=Path(args.out).name)
        tracked = record["tracking"]
        registered = tracked.get("registered_model")
        model = (f"models:/{registered}/{tracked['registered_model_version']}"
                 if registered and "registered_model_version" in tracked else tracked.get("model_uri"))
        print(f"tracked: {tracked['tracking_uri']} run {tracked['run_id']}" + (f", model {model}" if model else ""))
    metrics = ", ".join(f"{k}={v:.4f}" for k, v in record["metrics"].items())
    print(f"{record['task']} {record['method']} seed={record['seed']} shots={record['shots']}: {metrics} "
          f"({record['timings']['total_s']:.1f} s) -> {args.out}")
    return 0


def file_columns(args: argparse.Namespace) -> dict[str, object]:
    """The column options of ``train`` as RunSpec fields."""
    return {"text_column": args.text_column or "text", "text_pair_column": args.text_pair_column,
            "label_column": args.label_column or "label", "multi_label": args.multi_label}


def add_file_options(parser: argparse.ArgumentParser, *, training: bool) -> None:
    group = parser.add_argument_group("your own data (CSV, TSV, JSON lines, Parquet)")
    if training:
        group.add_argument("--train-file", help="your labelled training file, instead of --task: its labels (any "
                           "values, at least 2 classes) become the adapter's classes; --shots K then draws K "
                           "per class (every row without --shots)")
        group.add_argument("--eval-file", help="a labelled file to evaluate on after training; without it there is "
                           "no final evaluation (metrics are empty) and nothing is held out of --train-file")
        group.add_argument("--multi-label", action="store_true",
                           help="a label cell holds several labels (a|b or a JSON list)")
        group.add_argument("--task-name", help="the name of the task --train-file makes, as the adapter and its "
                           "model card call it (default: the file's stem)")
        default = " (default %(default)s)"
    else:
        group.add_argument("--eval-file", help="a labelled file to evaluate on instead of a split; the columns "
                           "default to the adapter's")
        default = " (default: the adapter's)"
    group.add_argument("--text-column", help="column of the text" + default, default="text" if training else None)
    group.add_argument("--text-pair-column", help="column of the second text of a sentence pair")
    group.add_argument("--label-column", help="column of the label" + default, default="label" if training else None)


def eval_examples(args: argparse.Namespace, task):
    """The examples ``eval`` scores and their name: a split of a built-in task, or ``--eval-file`` read with
    the adapter's columns (a built-in task's file with the task's own reader)."""
    from infoprompt.pipeline import read_split
    from infoprompt.tasks import (
        UserTask,
        check_eval_labels,
        is_multi_label,
        read_labelled_file,
    )

    if args.eval_file is None:
        if not task.splits:  # a task read from the adapter: its data is wherever the user keeps it
            raise UserError(f"adapter task {task.name} is your own data, with no splits here; give --eval-file")
        split = args.split or task.eval_split
        return read_split(task, split, args.data_dir, args.source), split
    if not isinstance(task, UserTask):  # a built-in task's file, read as its splits are
        path = Path(args.eval_file)
        if not path.is_file():
            raise UserError(f"evaluation file {path} not found")
        examples = task.reader(path)
        for example in examples:
            if example.label is not None:
                task.label_index(example.label, where=example.source)
        if not examples:
            raise UserError(f"evaluation file {path} holds no examples")
        return examples, args.eval_file
    if args.text_pair_column is not None and task.columns.text_pair_column is None:
        raise UserError(f"--text-pair-column {args.text_pair_column!r}: adapter task {task.name} reads one text "
                        f"per example, not sentence pairs")
    columns = dataclasses.replace(task.columns, **{name: value for name, value in (
        ("text_column", args.text_column), ("text_pair_column", args.text_pair_column),
        ("label_column", args.label_column)) if value is not None})
    examples = read_labelled_file(args.eval_file, columns)
    check_eval_labels(task.labels, examples, multi_label=is_multi_label(task))
    return examples, args.eval_file


def cmd_eval(args: argparse.Namespace) -> int:
    """One JSON line on stdout (the metrics, the per-class report and the confusion matrix), the same as a table on
    stderr for people (unless --quiet), and the confusion matrix as a PNG with --plots."""
    from infoprompt.io_utils import atomic_write_json, check_output_file
    from infoprompt.kinds import load_adapter
    from infoprompt.kinds.config import config_task, read_adapter_config
    from infoprompt.threads import use_threads
    from infoprompt.training.data import encode_examples
    from infoprompt.training.inference import predict_encoded, task_metrics
    from infoprompt.training.runtime import resolve_device

    if args.output:
        check_output_file(args.output)
    if args.plots is not None and not args.plots.strip():
        raise UserError("--plots: expected a directory, got an empty name")
    plot = Path(args.plots, CONFUSION_PNG) if args.plots else None
    if plot is not None:
        check_output_file(plot)
    use_threads(args.threads)
    device = resolve_device(args.device)
    config = read_adapter_config(Path(args.adapter))
    task = config_task(config)
    examples, split = eval_examples(args, task)  # bad data fails before the encoder loads
    model = load_adapter(args.adapter, cache_dir=args.cache_dir, config=config).to(device)
    encoded = encode_examples(model, examples)
    if encoded.labels is None:
        raise UserError("evaluation needs labelled examples")
    probabilities = predict_encoded(model, encoded, args.batch_size, progress=not args.quiet, precision=args.precision)
    metrics = task_metrics(model, encoded.labels, probabilities)
    report = class_report(model, encoded.labels, probabilities)
    record = {"adapter": str(args.adapter), "task": task.name, "split": split, "n": len(examples), "metrics": metrics,
              "per_class": report["per_class"], "confusion_matrix": report["confusion_matrix"]}
    print(json.dumps(record, sort_keys=True, allow_nan=False), flush=True)
    if not args.quiet:  # stdout stays the one JSON line that scripts read
        print(f"{config.method} on {task.name} ({split}, {len(examples)} examples)\n{report['text']}", end="",
              file=sys.stderr)
    if args.output:
        atomic_write_json(args.output, record)
    if plot is not None:
        if record["confusion_matrix"] is None:
            # Said even under --quiet: the user asked for a file that is not written.
            print("infoprompt: --plots: nothing written: a multi-label task has no confusion matrix", file=sys.stderr)
        else:
            from infoprompt.eval_report import plot_confusion

            plot_confusion(record["confusion_matrix"], plot,
                           f"{config.method} on {task.name} ({Path(split).name}, {len(examples)} examples)")
            if not args.quiet:
                print(f"wrote {plot}", file=sys.stderr)
    return 0


def class_report(model, labels, probabilities) -> dict[str, object]:
    """The per-class report and the confusion matrix (``None`` for a multi-label task) of the decisions the
    metrics score: the argmax, or (multi-label) every label at or over the adapter's threshold."""
    from infoprompt.eval_report import confusion, per_class, report_text
    from infoprompt.tasks import is_multi_label
    from infoprompt.training.inference import threshold_of

    names = list(model.config.labels)
    if is_multi_label(model.task):
        gold, predicted = labels.int().numpy(), (probabilities >= threshold_of(model)).int().numpy()
        matrix = None
    else:
        gold, predicted = labels.tolist(), probabilities.argmax(-1).tolist()
        matrix = confusion(gold, predicted, names)
    return {"per_class": per_class(gold, predicted, names), "confusion_matrix": matrix,
            "text": report_text(gold, predicted, names, matrix)}


def cmd_predict(args: argparse.Namespace) -> int:
    """Read, predict and write in chunks (:data:`~infoprompt.inputs.CHUNK_ROWS` rows), so that memory does not
    grow with the input; a file input is checked whole before the encoder loads."""
    from infoprompt.inputs import iter_inputs
    from infoprompt.io_utils import check_output_file
    from infoprompt.kinds import load_adapter
    from infoprompt.kinds.config import config_task, read_adapter_config
    from infoprompt.prediction_format import PredictionWriter, output_format
    from infoprompt.tasks import is_multi_label
    from infoprompt.templates import CHARS_PER_TOKEN
    from infoprompt.threads import use_threads
    from infoprompt.training.inference import predict
    from infoprompt.training.runtime import resolve_device

    use_threads(args.threads)
    device = resolve_device(args.device)
    output = args.output or "-"
    check_output_file(output)
    if len(args.adapter) > 1:
        if args.keep_columns:
            raise UserError("--keep-columns takes one --adapter; with several, join on the 'line' column")
        return predict_several_adapters(args, output, device)
    args.adapter = args.adapter[0]
    config = read_adapter_config(Path(args.adapter))
    task = config_task(config)
    writer = PredictionWriter(output_format(args.format, output), config.labels, multi_label=is_multi_label(task),
                              top_k=args.top_k, keep=args.keep_columns)
    # A .txt line is cut to what the model's cut can read; with truncation off, a longer one is refused later.
    cut = config.max_length * CHARS_PER_TOKEN if config.truncate else None
    reading = {"encoding": args.encoding, "keep": args.keep_columns, "cut_chars": cut}
    if args.input != "-":
        for _ in iter_inputs(args.input, task, **reading):
            pass  # bad data fails before the encoder loads
    model = load_adapter(args.adapter, cache_dir=args.cache_dir, config=config).to(device)

    def render(chunk: Any) -> str:
        records = predict(model, chunk.rows, args.batch_size, args.precision, chunk.sources)
        return writer.lines(chunk.lines, records, chunk.kept)

    return stream_predictions(args, output, task, reading, writer.header(), render)


def stream_predictions(args: argparse.Namespace, output: str, task: Any, reading: dict[str, Any], header: str,
                       render: Callable[[Any], str]) -> int:
    """Write ``header``, then ``render(chunk)`` for each chunk of ``args.input`` as it is read (flushed, so memory
    does not grow with the input), and say how many blank lines were skipped."""
    from infoprompt.inputs import iter_inputs
    from infoprompt.io_utils import open_output

    skipped = 0
    with open_output(output) as handle:
        handle.write(header.encode("utf-8"))
        for chunk in iter_inputs(args.input, task, **reading):
            skipped += chunk.skipped
            handle.write(render(chunk).encode("utf-8"))
            handle.flush()
    if skipped and not args.quiet:
        print(f"infoprompt: skipped {skipped} blank line(s); each record names its input line", file=sys.stderr)
    return 0


def predict_several_adapters(args: argparse.Namespace, output: str, device: object) -> int:
    """``predict`` with several ``--adapter``: one column set per adapter (see :mod:`infoprompt.several_adapters`)."""
    from infoprompt.inputs import iter_inputs
    from infoprompt.prediction_format import PredictionWriter, SeveralPredictionWriter, output_format
    from infoprompt.several_adapters import adapter_names, load_models, predict_several, read_configs
    from infoprompt.tasks import is_multi_label
    from infoprompt.templates import CHARS_PER_TOKEN

    configs, task = read_configs(args.adapter)
    # A .txt line is cut to what the longest-reading adapter's cut can read (as with one adapter).
    cut = (max(c.max_length for c in configs) * CHARS_PER_TOKEN if all(c.truncate for c in configs) else None)
    reading = {"encoding": args.encoding, "cut_chars": cut}
    if args.input != "-":
        for _ in iter_inputs(args.input, task, **reading):  # bad data fails before the encoders load
            pass
    models = load_models(args.adapter, configs, args.cache_dir, device)
    names = adapter_names(args.adapter)
    chosen = output_format(args.format, output)
    writer = SeveralPredictionWriter(chosen, {name: PredictionWriter(chosen, model.config.labels, top_k=args.top_k,
                                                                      multi_label=is_multi_label(model.task))
                                              for name, model in zip(names, models, strict=True)})

    def render(chunk: Any) -> str:
        records = predict_several(models, chunk.rows, chunk.sources, args.batch_size, args.precision)
        return writer.lines(chunk.lines, dict(zip(names, records, strict=True)))

    return stream_predictions(args, output, task, reading, writer.header(), render)


def cmd_tasks(args: argparse.Namespace) -> int:
    from infoprompt.tasks import TASKS

    for task in TASKS.values():
        print(f"{task.name:12s} {', '.join(task.metrics):18s} {len(task.labels):3d} labels  {task.description}")
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    """The method table, the recommended method marked ``*`` (and named under the table)."""
    from infoprompt.train_flags import method_rows  # the snapshot: no torch, an answer at once

    for name, kind, lr, description in method_rows():
        mark = "*" if name == RECOMMENDED_METHOD else " "
        print(f"{mark} {name:30s} {kind:12s} lr={lr:<6g} {description}")
    print(f"* {RECOMMENDED_METHOD}: the recommended method (the default of train --method)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="infoprompt", description=__doc__)
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--data-dir", help="data directory (default: $INFOPROMPT_DATA_DIR)")
        sub.add_argument("--source", choices=("files", "hub"), default="files", help="read data files or Hugging Face datasets")
        sub.add_argument("--cache-dir", help="where packaged backbones are extracted (default ~/.cache/infoprompt)")
        sub.add_argument("--quiet", action="store_true",
                         help="no progress (the bar, or its lines when stderr is a file): errors and results only")

    train = commands.add_parser("train", help="train an adapter and evaluate it on the task's eval split")
    train.add_argument("--config", help="a .yaml or .toml file of these options (same keys as the flags; flags "
                       "on the command line win)")
    train.add_argument("--task", type=task_name, help="task name (see infoprompt tasks); or --train-file")
    train.add_argument("--method", default=RECOMMENDED_METHOD, type=method_name,
                       help=f"a row of the method table (see infoprompt methods; default {RECOMMENDED_METHOD}, the "
                            f"recommended one)")
    train.add_argument("--shots", type=parse_shots, default=SHOTS_UNSET,
                       help="training examples per seed, or 'full' (default 64); with --train-file, examples per "
                            "class (default: every row)")
    train.add_argument("--seed", type=COUNT, default=1,
                       help="seeds the few-shot draw, the initialisation, the batch order and the sampling noise "
                            "(default 1)")
    train.add_argument("--sampling", choices=("proportional", "balanced"), default="proportional",
                       help="share --shots over classes proportionally (default) or evenly")
    train.add_argument("--backbone", default="minilm", help="minilm, mpnet, a Hugging Face id or a local path")
    train.add_argument("--out", required=True, help="run directory (adapter, log, metrics.json)")
    train.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    train.add_argument("--keep-training-state", action="store_true",
                       help="also keep the training-only parameters (the information critics) in "
                            "training_state.safetensors; the adapter holds what prediction needs")
    common(train)
    add_file_options(train, training=True)
    add_model_options(train)
    add_training_options(train)
    add_tracking_options(train)
    train.set_defaults(handler=cmd_train)

    evaluate = commands.add_parser(
        "eval", help="evaluate a saved adapter",
        description="Evaluate a saved adapter: one JSON line on stdout (the metrics, precision, recall, F1 and "
                    "support per class, and the confusion matrix: rows true labels, columns predicted), and the "
                    "same as a table on stderr unless --quiet.")
    evaluate.add_argument("--adapter", required=True, help="a run directory written by infoprompt train")
    evaluate.add_argument("--split", help="split to evaluate (default: the task's eval split)")
    evaluate.add_argument("--batch-size", type=POSITIVE, default=64, help="examples per forward pass (default 64)")
    evaluate.add_argument("--output", help="also write the JSON record here (metrics, per-class report, confusion "
                          "matrix)")
    evaluate.add_argument("--plots", metavar="DIR", help=f"also draw the confusion matrix as DIR/{CONFUSION_PNG} "
                          "(created if missing; single-label tasks)")
    add_file_options(evaluate, training=False)
    add_device_options(evaluate)
    common(evaluate)
    evaluate.set_defaults(handler=cmd_eval)

    predict = commands.add_parser("predict", help="predict labels for new inputs: JSON lines or CSV")
    predict.add_argument("--adapter", required=True, action="append",
                         help="a run directory written by infoprompt train; repeat it to predict with several adapters "
                              "(one column set each; LoRA adapters of one encoder share its passes)")
    predict.add_argument("--input", required=True, help="a .txt (one text per line), a .csv or .tsv with a header, a .jsonl, "
                         "or - for stdin; columns are named by the task's fields or your training file's columns")
    predict.add_argument("--output", help="write predictions here instead of stdout")
    add_prediction_output_options(predict)
    predict.add_argument("--batch-size", type=POSITIVE, default=64, help="examples per forward pass (default 64)")
    predict.add_argument("--encoding", default="utf-8",
                         help="text encoding of the input (default utf-8; a byte-order mark is skipped)")
    predict.add_argument("--cache-dir", help="where packaged backbones are extracted (default ~/.cache/infoprompt)")
    predict.add_argument("--quiet", action="store_true", help="no progress bars or notices")
    add_device_options(predict)
    predict.set_defaults(handler=cmd_predict)

    commands.add_parser("tasks", help="list tasks").set_defaults(handler=cmd_tasks)
    commands.add_parser("methods", help="list methods").set_defaults(handler=cmd_methods)
    for register in (add_experiment_commands, add_analysis_commands, add_theory_commands, add_serve_command,
                     add_export_command):
        register(commands)
    return parser


def train_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return commands.choices["train"]


def train_option_keys() -> set[str]:
    """The keys a ``train --config`` file may hold: the ``train`` options in snake case."""
    from infoprompt.run_config import setting_keys

    return setting_keys(train_parser(build_parser()))


def expand_run_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``train --config run.yaml``: the file's settings as flags, before those of the command line (which win)."""
    if not argv or argv[0] != "train":
        return argv
    from infoprompt.run_config import config_argv

    return ["train", *config_argv(train_parser(parser), argv[1:])]


def _quiet_libraries() -> None:
    """The progress bars of transformers and the Hub ("Loading weights", downloads): off under ``--quiet``, and
    where stderr is no terminal, into which they would write a carriage-return update per refresh."""
    import huggingface_hub.utils
    import transformers

    transformers.utils.logging.disable_progress_bar()
    huggingface_hub.utils.disable_progress_bars()


def _version() -> str:
    from infoprompt import __version__

    return f"infoprompt {__version__}"


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``docker stop``, SLURM) as an interrupt: every cleanup that Ctrl-C runs runs too
    (scratch directories, temporary files, sweep claims)."""


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
    raise Terminated


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: signals go to the main thread's handler anyway
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(expand_run_config(parser, sys.argv[1:] if argv is None else list(argv)))
        require_extra_of(args.command)  # a missing extra at once, not after seconds of loading torch
    except SystemExit as stop:  # a usage error (one line printed) or --help / --version
        return stop.code if isinstance(stop.code, int) else 2
    except UserError as error:  # a bad run config file, a missing extra
        print(f"infoprompt: error: {error}", file=sys.stderr)
        return 2
    from infoprompt.progress import is_terminal
    from infoprompt.threads import check_environment_before_torch, say_thread_notes

    check_environment_before_torch()  # done as infoprompt was imported, unless the variables changed since
    say_thread_notes()
    if hasattr(args, "quiet") and (args.quiet or not is_terminal(sys.stderr)):
        _quiet_libraries()
    try:
        with _sigterm_as_interrupt():
            return int(args.handler(args) or 0)
    except UserError as error:
        print(f"infoprompt: error: {error}", file=sys.stderr)
        return 2
    except Terminated:
        stopped = "server stopped" if args.command == "serve" else "unfinished outputs were removed"
        print(f"infoprompt: terminated (SIGTERM); {stopped}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("infoprompt: interrupted", file=sys.stderr)
        return 130
    except OSError as error:  # what the file system refused that no check foresaw (a path over PATH_MAX)
        from infoprompt.io_utils import os_error_message

        print(f"infoprompt: error: {os_error_message(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
