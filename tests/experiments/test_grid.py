"""Grid files and flags expand into cells; bad grids fail with the file and key; shards partition the cells."""

from __future__ import annotations

import pytest

from infoprompt.errors import UserError
from infoprompt.experiments.grid import Cell, load_cells, parse_shard, shard


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_yaml_blocks_expand_and_promptless_methods_run_once(tmp_path):
    path = write(tmp_path, "g.yaml", """
tasks: [sst2, rte]
seeds: [1, 2]
training: {epochs: 3, batch_size: 4}
grids:
  - methods: [warp, finetune]
    shots: [64, full]
    n_prompts: [1, 4]
  - methods: [infoprompt]
    shots: [256]
    training: {epochs: 2}
""")
    cells = load_cells(path)
    # warp: 2 tasks × 2 shots × 2 n_p × 2 seeds; finetune has no prompts: n_p collapses to 0.
    assert len(cells) == 16 + 8 + 4
    ids = {c.id for c in cells}
    assert "task=sst2/method=finetune/shots=full/np=0/seed=2" in ids
    assert "task=rte/method=warp/shots=64/np=1/seed=1" in ids
    infoprompt = [c for c in cells if c.method == "infoprompt"]
    assert {c.n_prompts for c in infoprompt} == {4} and {c.shots for c in infoprompt} == {256}
    assert infoprompt[0].training == {"epochs": 2, "batch_size": 4}
    spec = infoprompt[0].run_spec()
    assert spec.training.epochs == 2 and spec.training.seed == infoprompt[0].seed and not spec.training.progress


def test_toml_and_flag_overrides(tmp_path):
    path = write(tmp_path, "g.toml", 'tasks = ["sst2"]\nmethods = ["warp"]\nshots = [64]\nseeds = [1]\n'
                                     '[training]\nepochs = 5\n')
    cells = load_cells(path, {"seeds": [7, 8], "training": {"epochs": 1}})
    assert [c.seed for c in cells] == [7, 8] and cells[0].training == {"epochs": 1}
    assert load_cells(None, {"tasks": ["mrpc"], "methods": ["linear-probe"]})[0].id == \
        "task=mrpc/method=linear-probe/shots=64/np=0/seed=1"


def test_settings_hash_tracks_what_changes_results():
    a = Cell("sst2", "warp", 64, 4, 1, training={"epochs": 3})
    b = Cell("sst2", "warp", 64, 4, 1, training={"epochs": 4})
    c = Cell("sst2", "warp", 64, 4, 1, training={"epochs": 3}, data_dir="/elsewhere")
    assert a == b and a.settings_hash != b.settings_hash
    assert a.settings_hash == c.settings_hash  # where the data lives does not change the result


@pytest.mark.parametrize(("text", "message"), [
    ("tasks: [sst2]\nmethodz: [warp]\n", "g.yaml: unknown key(s) methodz"),
    ("tasks: [sst2]\nmethods: [nope]\n", "g.yaml.methods: unknown method 'nope'"),
    ("tasks: [nope]\n", "g.yaml.tasks: unknown task 'nope'"),
    ("tasks: [sst2]\nshots: [0]\n", "g.yaml.shots: expected a positive number"),
    ("tasks: [sst2]\ntraining: {epochz: 1}\n", "g.yaml.training: unknown key(s) epochz"),
    ("tasks: [sst2]\ngrids: [{shots: [64], colour: red}]\n", "g.yaml.grids[0]: unknown key(s) colour"),
    ("tasks: [sst2\nseeds: [1]\n", "g.yaml:2: not valid YAML"),
    ("methods: [warp]\n", "no tasks given"),
])
def test_bad_grids_name_file_and_key(tmp_path, text, message):
    path = write(tmp_path, "g.yaml", text)
    with pytest.raises(UserError) as caught:
        load_cells(path)
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value).replace(f"{tmp_path}/", "")


def test_conflicting_blocks_are_rejected(tmp_path):
    path = write(tmp_path, "g.yaml", "tasks: [sst2]\nmethods: [warp]\ngrids:\n  - {training: {epochs: 1}}\n"
                                     "  - {training: {epochs: 2}}\n")
    with pytest.raises(UserError, match="also defined by an earlier block"):
        load_cells(path)


def test_a_flag_that_widens_an_inheriting_block_into_a_conflict_says_so(tmp_path):
    # The first block inherits the top-level tasks; --tasks rte replaces them, so both blocks name rte's cells.
    path = write(tmp_path, "g.yaml", "tasks: [sst2]\nmethods: [warp]\ngrids:\n  - {training: {epochs: 1}}\n"
                                     "  - {tasks: [rte], training: {epochs: 2}}\n")
    assert {c.task for c in load_cells(path)} == {"sst2", "rte"}
    with pytest.raises(UserError, match=r"--tasks replaced the top-level list that a block without its own list inherits"):
        load_cells(path, {"tasks": ["rte"]})
    (tmp_path / "g.yaml").write_text("tasks: [sst2]\nmethods: [warp]\ngrids:\n"
                                     "  - {tasks: [sst2], training: {epochs: 1}}\n"
                                     "  - {tasks: [rte], training: {epochs: 2}}\n")
    assert {(c.task, c.run_spec().training.epochs) for c in load_cells(path, {"tasks": ["rte"]})} == {("rte", 2)}


def test_shards_partition_the_grid_deterministically():
    cells = load_cells(None, {"tasks": ["sst2", "rte", "mrpc"], "methods": ["warp", "infoprompt", "finetune"],
                              "shots": [64, None], "seeds": [1, 2, 3]})
    parts = [shard(cells, i, 4) for i in range(1, 5)]
    ids = [c.id for part in parts for c in part]
    assert sorted(ids) == sorted(c.id for c in cells) and len(ids) == len(set(ids))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert [c.id for c in shard(list(reversed(cells)), 2, 4)] == [c.id for c in parts[1]]
    assert parse_shard("3/4") == (3, 4)
    for bad in ("0/4", "5/4", "1-4", "a/b"):
        with pytest.raises(UserError, match="shard"):
            parse_shard(bad)


def test_sampling_setting_reaches_the_run_and_the_hash_only_when_set(tmp_path):
    path = write(tmp_path, "g.yaml", """
methods: [warp]
seeds: [1]
grids:
  - tasks: [sst2]
  - tasks: [conll04-re]
    sampling: balanced
""")
    by_task = {c.task: c for c in load_cells(path)}
    assert by_task["sst2"].run_spec().sampling == "proportional"
    assert by_task["conll04-re"].run_spec().sampling == "balanced"
    # Records written before the setting existed carry the hash of the default; it must not move.
    plain = Cell("sst2", "warp", 64, 4, 1)
    assert "sampling" not in plain.settings()
    assert Cell("sst2", "warp", 64, 4, 1, sampling="balanced").settings_hash != plain.settings_hash
    with pytest.raises(UserError, match=r"g.yaml.*sampling.*stratified"):
        load_cells(write(tmp_path, "g.yaml", "tasks: [sst2]\nsampling: stratified\n"))


BLOCKS = """
tasks: [sst2, mrpc]
seeds: [1, 2]
grids:
  - methods: [warp, infoprompt]
    shots: [64]
  - methods: [linear-probe, setfit]
    shots: [64, 256]
    training: {eval_every_epochs: 0}
"""


def test_axis_flags_select_part_of_a_grid_of_blocks(tmp_path):
    path = write(tmp_path, "g.yaml", BLOCKS)
    setfit = load_cells(path, {"methods": ["setfit"], "shots": [64], "tasks": ["mrpc"]})
    assert [c.id for c in setfit] == [f"task=mrpc/method=setfit/shots=64/np=0/seed={s}" for s in (1, 2)]
    assert setfit[0].training == {"eval_every_epochs": 0}  # the block's own settings, not another block's
    # A flag cuts a block's own list; one the blocks leave to the top level (seeds) replaces it.
    cells = load_cells(path, {"shots": [256], "seeds": [5]})
    assert {(c.method, c.shots, c.seed) for c in cells} == {(m, 256, 5) for m in ("linear-probe", "setfit")}
    assert {c.id for c in load_cells(path, {"shots": ["64"]})} == {
        c.id for c in load_cells(path) if c.shots == 64
    }


@pytest.mark.parametrize(("flags", "message"), [
    ({"methods": ["warp"], "shots": [256]}, "the flags select no cell of this grid (--methods warp --shots 256)"),
    ({"methods": ["warp", "setfit"], "shots": [256]}, "no cell of this grid has --methods warp among"),
    ({"methods": ["finetune"]}, "the flags select no cell of this grid (--methods finetune)"),
])
def test_axis_flags_that_select_nothing_are_named(tmp_path, flags, message):
    path = write(tmp_path, "g.yaml", BLOCKS)
    with pytest.raises(UserError) as caught:
        load_cells(path, flags)
    assert str(caught.value).startswith(f"{path}: {message}")
