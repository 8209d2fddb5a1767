"""GLUE readers: counts equal the data README's, and malformed files fail with file and line."""

from __future__ import annotations

from collections import Counter

import pytest

from infoprompt.errors import UserError
from infoprompt.tasks import get_task, load_split, resolve_data_dir

# (train rows, dev rows, train label counts) from ../shared/data/README.md
EXPECTED = {
    "sst2": (67349, 872, {"positive": 37569, "negative": 29780}),
    "mrpc": (3668, 408, {"equivalent": 2474, "not_equivalent": 1194}),
    "rte": (2490, 277, {"entailment": 1249, "not_entailment": 1241}),
    "cola": (8551, 1043, {"acceptable": 6023, "unacceptable": 2528}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_match_readme(data_dir, name):
    task = get_task(name)
    train = load_split(task, "train", data_dir)
    dev = load_split(task, "dev", data_dir)
    n_train, n_dev, counts = EXPECTED[name]
    assert (len(train), len(dev)) == (n_train, n_dev)
    assert Counter(e.label for e in train) == counts
    assert all(set(e.fields) == set(task.fields) and all(e.fields.values()) for e in dev)


def test_quotes_and_bom_survive(data_dir):
    mrpc = load_split(get_task("mrpc"), "train", data_dir)
    assert mrpc[0].fields["sentence1"].startswith("Amrozi accused his brother")
    assert '"the witness"' in mrpc[0].fields["sentence1"]


def test_malformed_row_names_file_and_line(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("sentence\tlabel\ngood film \t1\nno tab here\n")
    with pytest.raises(UserError, match=r"train.tsv:3: expected 2 tab-separated columns, found 1"):
        load_split(get_task("sst2"), "train", tmp_path)


def test_unknown_label_names_file_and_line(tmp_path):
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("sentence\tlabel\ngood film \t1\nbad film \t7\n")
    with pytest.raises(UserError, match=r"train.tsv:3: unknown label '7'"):
        load_split(get_task("sst2"), "train", tmp_path)


def test_missing_directory_file_and_task(tmp_path, monkeypatch):
    monkeypatch.delenv("INFOPROMPT_DATA_DIR", raising=False)
    with pytest.raises(UserError, match="pass --data-dir or set INFOPROMPT_DATA_DIR"):
        resolve_data_dir(None)
    with pytest.raises(UserError, match="does not exist"):
        resolve_data_dir(tmp_path / "nope")
    with pytest.raises(UserError, match=r"SST-2/dev.tsv for task sst2 \(dev\) not found"):
        load_split(get_task("sst2"), "dev", tmp_path)
    with pytest.raises(UserError, match="unknown task 'sst3'; did you mean 'sst2'\\? valid tasks: .*sst2"):
        get_task("sst3")
