"""User tasks: built from columns and labels, written to JSON and read back exactly; malformed JSON refused."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks import (
    FileColumns,
    UserTask,
    get_task,
    is_multi_label,
    task_from_file,
    task_from_json,
    task_to_json,
    user_task,
)
from infoprompt.tasks.user_task import USER_PAIR_TEMPLATE, USER_SINGLE_TEMPLATE, label_words

LABELS = ("annuler réservation", "météo", "réserver vol", "中文 标签", "emoji 🙂", 'quote " and \\ slash')


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("columns", [
    FileColumns(),
    FileColumns(text_column="premise", text_pair_column="hypothesis", label_column="gold"),
    FileColumns(multi_label=True, label_separator=";"),
])
def test_labels_and_columns_round_trip_exactly(columns, ensure_ascii):
    task = user_task("intent", columns, LABELS)
    text = json.dumps(task_to_json(task), ensure_ascii=ensure_ascii)
    back = task_from_json(json.loads(text), "adapter/config.json")
    assert isinstance(back, UserTask) and back == task
    assert back.labels == LABELS and back.columns == columns
    assert task_to_json(back) == task_to_json(task)


def test_a_fresh_process_reads_the_task_without_registration(tmp_path):
    task = user_task("intent", FileColumns(text_column="utterance"), LABELS)
    saved = tmp_path / "task.json"
    saved.write_text(json.dumps(task_to_json(task)), encoding="utf-8")
    script = ("import json, sys\nfrom infoprompt.tasks import TASKS, task_from_json\n"
              "task = task_from_json(json.loads(open(sys.argv[1], encoding='utf-8').read()), sys.argv[1])\n"
              "assert 'intent' not in TASKS\nprint(json.dumps([task.labels, task.fields, task.columns.text_column]))")
    out = subprocess.run([sys.executable, "-c", script, str(saved)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [list(LABELS), ["text"], "utterance"]


def test_defaults_follow_the_columns():
    single = user_task("s", FileColumns(), ["a", "b"])
    pair = user_task("p", FileColumns(text_pair_column="second"), ["a", "b"])
    multi = user_task("m", FileColumns(multi_label=True), ["a", "b"])
    assert (single.fields, single.template, single.metrics) == (("text",), USER_SINGLE_TEMPLATE, ("accuracy", "macro_f1"))
    assert (pair.fields, pair.template) == (("text", "text_pair"), USER_PAIR_TEMPLATE)
    assert multi.metrics == ("multilabel_micro_f1", "multilabel_macro_f1") and is_multi_label(multi)
    assert not is_multi_label(single) and not is_multi_label(get_task("sst2"))
    assert label_words("réserver_vol") == ("réserver", "vol")
    assert label_words("Cause-Effect(e1,e2)") == ("Cause", "Effect", "e1", "e2")
    assert single.label_words["a"] == ("a",)


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda: user_task("sst2", FileColumns(), ["a", "b"]), "built-in task"),
    (lambda: user_task("my task/1", FileColumns(), ["a", "b"]), "task name"),
    (lambda: user_task("t", FileColumns(), ["a"]), "at least 2"),
    (lambda: user_task("t", FileColumns(), ["a", "a"]), "'a' twice"),
    (lambda: user_task("t", FileColumns(), ["a", " b"]), "surrounding whitespace"),
    (lambda: user_task("t", FileColumns(), ["a", "b"], template="<cls> {sentence} <mask>"), "'template'"),
    (lambda: user_task("t", FileColumns(), ["a", "b"], metrics=["multilabel_micro_f1"]), "single-label"),
    (lambda: user_task("t", FileColumns(), ["a", "b"], metrics=["bleu"]), "unknown metric 'bleu'"),
])
def test_user_task_refuses_bad_arguments(call, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", r"\(")):
        call()


def base_json() -> dict:
    return task_to_json(user_task("intent", FileColumns(text_pair_column="b"), ["x", "y", "z"]))


def broken(edit) -> dict:
    data = copy.deepcopy(base_json())
    edit(data)
    return data


@pytest.mark.parametrize(("data", "fragments"), [
    ([], ["the task must be a JSON object"]),
    (broken(lambda d: d.pop("labels")), ["lacks key 'labels'"]),
    (broken(lambda d: d.update(extra=1)), ["unknown key 'extra'"]),
    (broken(lambda d: d.update(format=2)), ["'format'", "format 1"]),
    (broken(lambda d: d.update(format=True)), ["'format'"]),
    (broken(lambda d: d.update(name="")), ["'name'"]),
    (broken(lambda d: d.update(labels="x,y")), ["'labels'", "list"]),
    (broken(lambda d: d.update(labels=["x"])), ["'labels'", "at least 2"]),
    (broken(lambda d: d.update(labels=["x", "x"])), ["'labels'", "'x' twice"]),
    (broken(lambda d: d.update(labels=["x", 3])), ["'labels'"]),
    (broken(lambda d: d.update(labels=["x", ""])), ["'labels'"]),
    (broken(lambda d: d["label_words"].update(w=["w"])), ["'label_words'", "'w'"]),
    (broken(lambda d: d["label_words"].update(x="word")), ["label_words['x']"]),
    (broken(lambda d: d.update(fields=["text"])), ["'fields'"]),
    (broken(lambda d: d.update(fields=[])), ["'fields'", "at least 1"]),
    (broken(lambda d: d.update(metrics=["nope"])), ["'metrics'", "unknown metric 'nope'"]),
    (broken(lambda d: d.update(metrics=[])), ["'metrics'"]),
    (broken(lambda d: d.update(template="<cls> {text} <mask>")), ["'template'"]),
    (broken(lambda d: d.update(template="<cls> <bogus> {text} {text_pair}")), ["'template'", "<bogus>"]),
    (broken(lambda d: d.update(positive_label="w")), ["'positive_label'"]),
    (broken(lambda d: d.update(description=None)), ["'description'"]),
    (broken(lambda d: d.update(columns=[])), ["'columns'"]),
    (broken(lambda d: d["columns"].pop("label_column")), ["'columns'", "label_column"]),
    (broken(lambda d: d["columns"].update(sep="|")), ["'columns'", "'sep'"]),
    (broken(lambda d: d["columns"].update(multi_label="yes")), ["columns.multi_label"]),
    (broken(lambda d: d["columns"].update(text_pair_column=None)), ["'fields'", "columns"]),
    (broken(lambda d: d["columns"].update(label_column="b")), ["'columns'", "must differ"]),
    (broken(lambda d: d["columns"].update(multi_label=True)), ["'metrics'", "multi-label"]),
])
def test_task_from_json_is_strict(data, fragments):
    with pytest.raises(UserError) as caught:
        task_from_json(data, "run/adapter/config.json")
    message = str(caught.value)
    assert message.startswith("run/adapter/config.json") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_task_from_file_names_the_task_after_the_file(tmp_path):
    path = tmp_path / "mes intents.csv"
    path.write_text("text,label\nbonjour,salut\nau revoir,adieu\nsalut,salut\n", encoding="utf-8")
    task, examples = task_from_file(path, FileColumns())
    assert (task.name, task.labels, len(examples)) == ("mes-intents", ("adieu", "salut"), 3)
    assert task_from_file(path, FileColumns(), name="greetings")[0].name == "greetings"
    clash = tmp_path / "sst2.csv"
    clash.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    assert task_from_file(clash, FileColumns())[0].name == "user-sst2"
    one = tmp_path / "one.csv"
    one.write_text("text,label\na,x\nb,x\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"one.csv: column 'label': the labels hold only the class 'x'"):
        task_from_file(one, FileColumns())


def test_a_builtin_task_travels_without_its_reader():
    sst2 = get_task("sst2")
    back = task_from_json(json.loads(json.dumps(task_to_json(sst2))), "config.json")
    assert not isinstance(back, UserTask)
    assert (back.labels, back.fields, back.template, back.metrics) == (sst2.labels, sst2.fields, sst2.template,
                                                                       sst2.metrics)
    assert back.splits == {}
    with pytest.raises(UserError, match="no data reader"):
        back.reader("x.tsv")
