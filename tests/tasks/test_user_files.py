"""Users' own files: every format read alike, real data made into custom tasks, and every bad input refused."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks import (
    Example,
    FileColumns,
    check_eval_labels,
    collect_labels,
    label_set,
    read_labelled_file,
    sample_few_shot,
    sample_few_shot_multilabel,
    task_from_json,
    task_to_json,
    user_task,
)
from infoprompt.tasks.glue import _read_mrpc

INTENTS = [
    ("Je voudrais réserver un vol pour Lyon, demain matin", "réserver vol"),
    ('Quel temps fera-t-il à Paris ? "beau", j\'espère', "météo"),
    ("Annule ma réservation\nde jeudi, s'il te plaît", "annuler réservation"),
    ("Un billet d'avion pour Nice, en classe éco", "réserver vol"),
    ("Il va pleuvoir ce week-end ?", "météo"),
    ("Je ne veux plus de ma réservation", "annuler réservation"),
    ("Trouve-moi un vol Paris–Montréal", "réserver vol"),
    ("Prévisions météo pour Brest", "météo"),
    ("Supprime le voyage prévu", "annuler réservation"),
]
INTENT_LABELS = ("annuler réservation", "météo", "réserver vol")


def write_csv(path: Path, header: list[str], rows: list[tuple], **options) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, **options)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    return path


def write_parquet(path: Path, records: list[dict]) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), path)
    return path


def intent_file(tmp_path: Path, suffix: str) -> Path:
    """The intent data in one format; the multi-line text makes CSV quoting and line numbering matter."""
    records = [{"utterance": text, "intent": label, "id": i} for i, (text, label) in enumerate(INTENTS)]
    path = tmp_path / f"intents{suffix}"
    if suffix == ".csv":
        return write_csv(path, ["id", "utterance", "intent"], [(r["id"], r["utterance"], r["intent"]) for r in records])
    if suffix == ".tsv":  # TSV cells hold no line breaks
        lines = ["id\tutterance\tintent"] + [f"{r['id']}\t{r['utterance'].replace(chr(10), ' ')}\t{r['intent']}"
                                              for r in records]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path
    if suffix == ".jsonl":
        return write_jsonl(path, records)
    if suffix == ".json":
        path.write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
        return path
    return write_parquet(path, records)


INTENT_COLUMNS = FileColumns(text_column="utterance", label_column="intent")


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".json", ".parquet"])
def test_every_format_reads_the_same_intents(tmp_path, suffix):
    examples = read_labelled_file(intent_file(tmp_path, suffix), INTENT_COLUMNS)
    expected_texts = [text if suffix != ".tsv" else text.replace("\n", " ") for text, _ in INTENTS]
    assert [e.fields for e in examples] == [{"text": text} for text in expected_texts]
    assert [e.label for e in examples] == [label for _, label in INTENTS]
    assert collect_labels(examples) == INTENT_LABELS


def test_sources_name_the_line_a_row_starts_on(tmp_path):
    csv_rows = read_labelled_file(intent_file(tmp_path, ".csv"), INTENT_COLUMNS)
    # The header is line 1 and the third text spans two lines, so the rows after it start one line later.
    assert [e.source.rsplit(":", 1)[1] for e in csv_rows] == ["2", "3", "4", "6", "7", "8", "9", "10", "11"]
    json_rows = read_labelled_file(intent_file(tmp_path, ".json"), INTENT_COLUMNS)
    assert json_rows[1].source == f"{tmp_path / 'intents.json'}:7"  # indent=2: each object spans 5 lines
    parquet = read_labelled_file(intent_file(tmp_path, ".parquet"), INTENT_COLUMNS)
    assert parquet[0].source.endswith("intents.parquet:row 1")


def test_unlabelled_reading_ignores_labels_and_reads_plain_text_lines(tmp_path):
    examples = read_labelled_file(intent_file(tmp_path, ".csv"), INTENT_COLUMNS, labelled=False)
    assert all(e.label is None for e in examples) and len(examples) == len(INTENTS)
    without = write_csv(tmp_path / "new.csv", ["utterance"], [("Quel temps demain ?",)])
    assert read_labelled_file(without, INTENT_COLUMNS, labelled=False)[0].fields == {"text": "Quel temps demain ?"}
    lines = tmp_path / "new.txt"
    lines.write_text("première phrase\r\n\r\nseconde\u2028ligne\n", encoding="utf-8")
    read = read_labelled_file(lines, FileColumns(), labelled=False)
    assert [(e.fields["text"], e.source.rsplit(":", 1)[1]) for e in read] == [("première phrase", "1"),
                                                                             ("seconde\u2028ligne", "3")]


@pytest.mark.parametrize("newline", ["\r", "\r\n"])
@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_cr_and_crlf_line_ends_and_a_bom(tmp_path, newline, suffix):
    rows = [("un", "a"), ("deux", "b"), ("trois", "a")]
    if suffix == ".jsonl":
        lines = [json.dumps({"text": text, "label": label}) for text, label in rows]
    else:
        separator = "\t" if suffix == ".tsv" else ","
        lines = [f"text{separator}label"] + [f"{text}{separator}{label}" for text, label in rows]
    path = tmp_path / f"data{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + newline.join(lines).encode("utf-8") + newline.encode())
    examples = read_labelled_file(path, FileColumns())
    assert [(e.fields["text"], e.label) for e in examples] == rows
    assert examples[-1].source == f"{path}:{len(lines)}"


def test_utf16_file_with_a_bom_is_read(tmp_path):
    path = tmp_path / "excel.tsv"
    path.write_bytes("text\tlabel\r\nbonjour\tsalut\r\nau revoir\tadieu\r\n".encode("utf-16"))
    assert [e.label for e in read_labelled_file(path, FileColumns())] == ["salut", "adieu"]


def test_numbers_and_booleans_become_strings(tmp_path):
    path = write_jsonl(tmp_path / "n.jsonl", [{"text": "a", "label": 1}, {"text": 42, "label": 2.5},
                                              {"text": "c", "label": True}])
    examples = read_labelled_file(path, FileColumns())
    assert [e.label for e in examples] == ["1", "2.5", "true"]
    assert examples[1].fields == {"text": "42"}
    table = write_parquet(tmp_path / "n.parquet", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    assert [e.label for e in read_labelled_file(table, FileColumns())] == ["0", "1"]


# -- real data, custom labels ---------------------------------------------------------------------------------

def test_mrpc_pairs_read_as_the_builtin_reader_does(data_dir):
    """The staged MRPC file: a BOM, bare quotes at the start of cells, two texts per row."""
    path = data_dir / "MRPC" / "dev.tsv"
    columns = FileColumns(text_column="#1 String", text_pair_column="#2 String", label_column="Quality")
    mine = read_labelled_file(path, columns)
    builtin = _read_mrpc(path)
    assert len(mine) == len(builtin) == 408
    names = {"0": "not_equivalent", "1": "equivalent"}
    assert [(e.fields["text"].strip(), e.fields["text_pair"].strip(), names[e.label]) for e in mine] == [
        (e.fields["sentence1"], e.fields["sentence2"], e.label) for e in builtin]
    assert any(e.fields["text"].startswith('"') for e in mine)


SEMEVAL_NAMES = {"Cause-Effect": "cause → effet", "Component-Whole": "partie ⊂ tout", "Content-Container": "contenu",
                 "Entity-Destination": "destination", "Entity-Origin": "origine", "Instrument-Agency": "outil d'agent",
                 "Member-Collection": "membre / groupe", "Message-Topic": "message sur", "Product-Producer": "produit"}


def semeval_file(data_dir: Path, split: str, target: Path) -> Path:
    """SemEval rows as a CSV of marked sentences and custom relation names (direction kept, 'Other' renamed)."""
    rows = []
    for line in (data_dir / "semeval2010_task8" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        kind = record["relation_type"]
        label = "aucune relation" if kind == "Other" else f"{SEMEVAL_NAMES[kind]} [{record['direction']}]"
        rows.append((record["sentence"], label))
    return write_csv(target, ["phrase", "relation"], rows)


def test_semeval_as_a_19_class_csv(data_dir, tmp_path):
    columns = FileColumns(text_column="phrase", label_column="relation")
    train = read_labelled_file(semeval_file(data_dir, "train", tmp_path / "rel_train.csv"), columns)
    labels = collect_labels(train, where="rel_train.csv")
    assert len(labels) == 19 and "aucune relation" in labels and "cause → effet [e2,e1]" in labels
    assert labels == tuple(sorted(labels))
    original = Counter(json.loads(line)["relation"] for line in
                       (data_dir / "semeval2010_task8" / "train.jsonl").read_text(encoding="utf-8").splitlines())
    assert sorted(Counter(e.label for e in train).values()) == sorted(original.values())
    test = read_labelled_file(semeval_file(data_dir, "test", tmp_path / "rel_test.csv"), columns)
    check_eval_labels(labels, test)

    # K per class with the library's seeded sampler: balanced shares of K * classes. One direction of
    # Entity-Destination has a single training example, so its share goes to the first classes by name.
    draw = sample_few_shot(train, 4 * len(labels), seed=3, labels=labels, strategy="balanced")
    sizes, counts = Counter(e.label for e in train), Counter(e.label for e in draw)
    assert sizes["destination [e2,e1]"] == counts["destination [e2,e1]"] == 1
    assert all(counts[label] >= min(4, sizes[label]) for label in labels) and sum(counts.values()) == 76
    assert [e.source for e in draw] == [e.source for e in
                                        sample_few_shot(train, 4 * len(labels), seed=3, strategy="balanced")]
    assert {e.source for e in draw} != {e.source for e in sample_few_shot(train, 76, seed=4, strategy="balanced")}

    task = user_task("relations", columns, labels)
    assert task.fields == ("text",) and len(task.labels) == 19
    back = task_from_json(json.loads(json.dumps(task_to_json(task))), "adapter/config.json")
    assert back == task and back.labels == labels
    assert back.reader(tmp_path / "rel_test.csv")[0] == test[0]


def conll04_records(data_dir: Path, split: str) -> list[dict]:
    records = []
    for line in (data_dir / "conll04" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        records.append({"sentence": " ".join(record["tokens"]),
                        "types": sorted({entity["type"] for entity in record["entities"]})})
    return records


def test_conll04_entity_types_as_a_multi_label_file(data_dir, tmp_path):
    columns = FileColumns(text_column="sentence", label_column="types", multi_label=True)
    records = conll04_records(data_dir, "train")
    from_json = read_labelled_file(write_jsonl(tmp_path / "types.jsonl", records), columns)
    piped = write_csv(tmp_path / "types.csv", ["sentence", "types"],
                      [(r["sentence"], " | ".join(reversed(r["types"]))) for r in records])
    from_csv = read_labelled_file(piped, columns)
    assert [label_set(e) for e in from_json] == [tuple(r["types"]) for r in records]
    assert [e.label for e in from_csv] == [e.label for e in from_json]
    labels = collect_labels(from_json, multi_label=True)
    assert labels == ("Loc", "Org", "Other", "Peop")
    assert len({e.label for e in from_json}) > 4  # a real multi-label problem: many distinct label sets
    dev = read_labelled_file(write_jsonl(tmp_path / "dev.jsonl", conll04_records(data_dir, "dev")), columns)
    check_eval_labels(labels, dev, multi_label=True)

    draw = sample_few_shot_multilabel(from_json, 8, seed=1, labels=labels)
    assert len(draw) == 8 and len({e.source for e in draw}) == 8
    assert {label for e in draw for label in label_set(e)} == set(labels)
    assert draw == sample_few_shot_multilabel(from_json, 8, seed=1)
    assert any(sample_few_shot_multilabel(from_json, 8, seed=s) != draw for s in range(2, 5))

    task = user_task("entity-types", columns, labels)
    assert task.multi_label and task.metrics[0] == "multilabel_micro_f1"
    assert task_from_json(json.loads(json.dumps(task_to_json(task))), "config.json") == task


# -- multi-label cells ----------------------------------------------------------------------------------------

def test_multi_label_cells_in_every_spelling(tmp_path):
    path = tmp_path / "ml.csv"
    write_csv(path, ["text", "label"], [("a", "x|y"), ("b", '["y", "a|b"]'), ("c", "[]"), ("d", " z "), ("e", "x|x")])
    examples = read_labelled_file(path, FileColumns(multi_label=True))
    assert [label_set(e) for e in examples] == [("x", "y"), ("a|b", "y"), (), ("z",), ("x",)]
    semicolons = tmp_path / "semi.csv"
    semicolons.write_text("text,label\nq,u;v\n", encoding="utf-8")
    semi = read_labelled_file(semicolons, FileColumns(multi_label=True, label_separator=";"))
    assert label_set(semi[0]) == ("u", "v")
    parquet = write_parquet(tmp_path / "ml.parquet", [{"text": "a", "label": ["p", "q"]}, {"text": "b", "label": []}])
    assert [label_set(e) for e in read_labelled_file(parquet, FileColumns(multi_label=True))] == [("p", "q"), ()]


def test_multilabel_draw_covers_rare_labels_and_refuses_what_it_cannot():
    def example(i: int, *labels: str) -> Example:
        return Example(fields={"text": str(i)}, label=json.dumps(sorted(labels), separators=(",", ":")), source=f"f:{i}")

    data = [example(i, "common", "other") for i in range(50)] + [example(50, "rare", "common"), example(51)]
    for seed in range(6):
        draw = sample_few_shot_multilabel(data, 3, seed)
        assert {label for e in draw for label in label_set(e)} == {"common", "other", "rare"}
        assert any(label_set(e) == () for e in draw)  # the examples without a label are a stratum too
    with pytest.raises(UserError, match="never carry 1 label"):
        sample_few_shot_multilabel(data, 3, 1, labels=["common", "other", "rare", "absent"])
    with pytest.raises(UserError, match="needs 3 to cover"):
        sample_few_shot_multilabel(data, 2, 1)
    with pytest.raises(UserError, match="from a split of 52"):
        sample_few_shot_multilabel(data, 53, 1)
    assert sample_few_shot_multilabel(data, None, 1) == data


def test_multilabel_metrics_match_hand_counts():
    from infoprompt.metrics import compute_metrics

    user_task("ml", FileColumns(multi_label=True), ["a", "b", "c"])  # building a multi-label task registers them
    gold = [{0}, {0, 1}, set()]
    predicted = [{0}, {1, 2}, {2}]
    scores = compute_metrics(["multilabel_micro_f1", "multilabel_macro_f1"], gold, predicted, ["a", "b", "c"])
    # micro: tp 2 (a, b), fp 2 (c twice), fn 1 (a) -> 4/7; per label: a 2/3, b 1, c 0.
    assert scores["multilabel_micro_f1"] == pytest.approx(4 / 7)
    assert scores["multilabel_macro_f1"] == pytest.approx((2 / 3 + 1 + 0) / 3)


# -- bad input ------------------------------------------------------------------------------------------------

def one_line_error(call, *fragments: str) -> str:
    with pytest.raises(UserError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def csv_file(tmp_path: Path, text: str, name: str = "bad.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("content", "fragments"), [
    ("phrase,label\nbonjour,a\n", ["bad.csv:1", "no column 'text'", "columns present: 'phrase', 'label'"]),
    ("text;label\nbonjour;a\n", ["no column 'text'", "'text;label'"]),
    ("text,label\nbonjour,a\n   ,b\n", ["bad.csv:3: empty text field(s) text"]),
    ("text,label\nbonjour,a\nsalut,\n", ["bad.csv:3", "column 'label'", "blank or missing"]),
    ("text,label\nbonjour,a\nsalut,NaN\n", ["bad.csv:3", "column 'label'", "'NaN'"]),
    ("text,label\nbonjour,a\nsalut,<NA>\n", ["bad.csv:3", "'<NA>'"]),
    ("text,label,text\nbonjour,a,b\n", ["bad.csv:1", "column 'text' twice"]),
    ("text,label\nbonjour,a,extra\n", ["bad.csv:2", "3 cells", "2 columns"]),
    ('text,label\nbonjour,a\n"never closed,b\nmore,c\n', ["bad.csv:3", "never closed", "not valid CSV"]),
    ("text,label\n", ["bad.csv", "holds no rows"]),
])
def test_bad_csv_names_file_line_and_column(tmp_path, content, fragments):
    path = csv_file(tmp_path, content)
    one_line_error(lambda: read_labelled_file(path, FileColumns()), str(path.parent), *fragments)


@pytest.mark.parametrize(("line", "fragments"), [
    ('{"text": "salut", "label": null}', ["bad.jsonl:2", "column 'label'", "blank or missing"]),
    ('{"text": "salut", "label": NaN}', ["bad.jsonl:2", "column 'label'", "blank or missing"]),
    ('{"text": "salut", "label": "  "}', ["bad.jsonl:2", "blank"]),
    ('{"text": "", "label": "b"}', ["bad.jsonl:2: empty text field(s) text"]),
    ('{"text": null, "label": "b"}', ["bad.jsonl:2: empty text field(s) text"]),
    ('{"text": ["a"], "label": "b"}', ["bad.jsonl:2", "column 'text'", "expected text"]),
    ('{"phrase": "salut", "label": "b"}', ["bad.jsonl:2", "no column 'text'", "'phrase'"]),
    ('{"text": "a", "text": "b", "label": "b"}', ["bad.jsonl:2", "column 'text' twice"]),
    ('{"text": "a", "label": ["a", "b"]}', ["bad.jsonl:2", "holds a list", "multi-label"]),
    ('{"text": "a", "label": "b"', ["bad.jsonl:2", "not valid JSON"]),
    ('["a", "b"]', ["bad.jsonl:2", "expected a JSON object"]),
])
def test_bad_jsonl_names_file_line_and_column(tmp_path, line, fragments):
    path = csv_file(tmp_path, '{"text": "bonjour", "label": "a"}\n' + line + "\n", "bad.jsonl")
    one_line_error(lambda: read_labelled_file(path, FileColumns()), *fragments)


@pytest.mark.parametrize(("cell", "fragment"), [("a||b", "empty label"), ("[a, b", "not valid JSON"),
                                                ('["a", ""]', "blank"), ('["a", null]', "blank"),
                                                ('["a", ["b"]]', "must be a name"), ("", "blank")])
def test_bad_multi_label_cells(tmp_path, cell, fragment):
    path = write_csv(tmp_path / "ml.csv", ["text", "label"], [("ok", "a"), ("bad", cell)])
    one_line_error(lambda: read_labelled_file(path, FileColumns(multi_label=True)), "ml.csv:3", "column 'label'",
                   fragment)


def test_bad_json_array_and_parquet(tmp_path):
    array = csv_file(tmp_path, '[\n{"text": "a", "label": "x"},\n{"text": "b", "label": null}\n]', "bad.json")
    one_line_error(lambda: read_labelled_file(array, FileColumns()), "bad.json:3", "column 'label'")
    unclosed = csv_file(tmp_path, '[{"text": "a", "label": "x"}\n{"text": "b"}]', "open.json")
    one_line_error(lambda: read_labelled_file(unclosed, FileColumns()), "open.json:2", "expected ',' or ']'")
    not_parquet = csv_file(tmp_path, "text,label\na,b\n", "fake.parquet")
    one_line_error(lambda: read_labelled_file(not_parquet, FileColumns()), "fake.parquet", "not a readable Parquet")
    table = write_parquet(tmp_path / "gap.parquet", [{"text": "a", "label": "x"}, {"text": "b", "label": None}])
    one_line_error(lambda: read_labelled_file(table, FileColumns()), "gap.parquet:row 2", "column 'label'", "missing")
    one_line_error(lambda: read_labelled_file(table, FileColumns(label_column="intent")), "gap.parquet",
                   "no column 'intent'", "'text', 'label'")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    twice = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["text", "text"]), twice)
    one_line_error(lambda: read_labelled_file(twice, FileColumns()), "twice.parquet", "column 'text' twice")


def test_files_that_cannot_be_read(tmp_path):
    one_line_error(lambda: read_labelled_file(tmp_path / "data.xlsx", FileColumns()), "data.xlsx",
                   "unknown file format '.xlsx'", ".csv, .tsv, .jsonl, .json, .parquet")
    one_line_error(lambda: read_labelled_file(tmp_path / "notes.txt", FileColumns()), "without labels")
    one_line_error(lambda: read_labelled_file(tmp_path / "absent.csv", FileColumns()), "absent.csv", "no such file")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\nbonjour,a\ncaf\xe9,b\n".encode("latin-1"))
    one_line_error(lambda: read_labelled_file(latin, FileColumns()), "latin.csv:3", "not valid UTF-8", "iconv")


def test_pair_column_on_a_file_without_it(tmp_path):
    path = write_csv(tmp_path / "single.csv", ["text", "label"], [("a", "x"), ("b", "y")])
    one_line_error(lambda: read_labelled_file(path, FileColumns(text_pair_column="hypothesis")),
                   "single.csv:1", "no column 'hypothesis'", "'text', 'label'")
    lines = csv_file(tmp_path, "a\nb\n", "in.txt")
    one_line_error(lambda: read_labelled_file(lines, FileColumns(text_pair_column="p"), labelled=False),
                   "in.txt", "pair column 'p'")


def test_one_class_and_unseen_eval_labels(tmp_path):
    path = write_csv(tmp_path / "one.csv", ["text", "label"], [("a", "météo"), ("b", "météo")])
    one_line_error(lambda: collect_labels(read_labelled_file(path, FileColumns()), where=str(path)),
                   "one.csv", "only the class 'météo'", "at least 2")
    multi = write_csv(tmp_path / "multi.csv", ["text", "label"], [("a", "x"), ("b", "[]")])
    one_line_error(lambda: collect_labels(read_labelled_file(multi, FileColumns(multi_label=True)), multi_label=True),
                   "only the class 'x'")
    evaluation = write_csv(tmp_path / "eval.csv", ["text", "label"], [("a", "météo"), ("b", "meteo")])
    one_line_error(lambda: check_eval_labels(INTENT_LABELS, read_labelled_file(evaluation, FileColumns())),
                   "eval.csv:3", "'meteo' never occurs in the training data", "did you mean 'météo'")
    ml = write_csv(tmp_path / "eval_ml.csv", ["text", "label"], [("a", "Loc|Org"), ("b", "Loc|Misc")])
    one_line_error(lambda: check_eval_labels(("Loc", "Org"), read_labelled_file(ml, FileColumns(multi_label=True)),
                                             multi_label=True), "eval_ml.csv:3", "'Misc'")


def test_column_options_are_checked():
    one_line_error(lambda: FileColumns(text_column=""), "text_column")
    one_line_error(lambda: FileColumns(text_column="label"), "must differ")
    one_line_error(lambda: FileColumns(label_separator=" "), "label_separator")


def test_reading_writes_nothing(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    data = tmp_path / "data"
    data.mkdir()
    paths = [intent_file(data, suffix) for suffix in (".csv", ".tsv", ".jsonl", ".json", ".parquet")]
    before = sorted(p.name for p in data.iterdir())
    for path in paths:
        read_labelled_file(path, INTENT_COLUMNS)
    assert sorted(p.name for p in data.iterdir()) == before
    assert not any(home.iterdir())
