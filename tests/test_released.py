"""The released kind (infoprompt-released): its layout, losses, schedule, first-row prompt option and files."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_feature_store import ROWS, write_split

import infoprompt
from infoprompt.cli import main
from infoprompt.errors import UserError
from infoprompt.io_utils import adapter_config_file
from infoprompt.kinds.released.model import KL_WEIGHT, LATENT, released_template
from infoprompt.kinds.released.objectives import bottleneck_term, clamped_nce, head_term, mean_kl
from infoprompt.tasks import get_task
from infoprompt.training import TrainConfig, encode_examples, predict_encoded
from infoprompt.training.data import features_for, prompted_batch

FAST = dict(epochs=2, batch_size=4, seed=1, progress=False, device="cpu", feature_store=False)


def released(backbone, method: str = "infoprompt-released", **options):
    return infoprompt.make_classifier(backbone, task="sst2", method=method, n_prompts=2, seed=1, max_length=32,
                                      **options)


def test_the_released_layout_on_the_glue_templates():
    assert released_template(get_task("sst2")) == "<cls> <p> {sentence} <p> <mask> <p> <p> <sep>"
    assert released_template(get_task("rte")) == "<cls> <p> {sentence1} <p> <mask> <p> <sep> {sentence2} <p> <sep>"
    assert released_template(get_task("semeval")) == get_task("semeval").template  # not GLUE: kept as it is


def test_it_builds_with_the_released_settings(tiny_backbone):
    model = released(tiny_backbone)
    options = model.config.options
    assert (options.beta, options.gamma, options.kl_weight, options.rank) == (0.2, 0.1, KL_WEIGHT, LATENT)
    assert model.plain_pass_identity()["pooling"] == "cls"  # the generator reads the no-prompt pass's CLS state
    assert model.prompt.net[0].out_features == LATENT and model.prompt.net[2].out_features == 2 * tiny_backbone.hidden_size
    assert model.head.mean.out_features == LATENT and model.head.label_rows.shape == (2, tiny_backbone.hidden_size)
    # Each of the four places holds the two generated prompts.
    assert model.template_encoder.per_place == [2, 2, 2, 2]
    # The label rows start at the label words' embeddings, in this encoder's own vocabulary.
    tokenizer, embeddings = tiny_backbone.tokenizer, tiny_backbone.input_embeddings.weight
    great = tokenizer("great", add_special_tokens=False)["input_ids"]
    assert torch.allclose(model.head.label_rows[model.config.labels.index("positive")], embeddings[great].mean(0))
    assert not any(p.requires_grad for p in model.encoder.parameters())


def test_a_few_steps_give_finite_loss_terms_and_a_saved_adapter_predicts_the_same(tiny_backbone, toy_examples, tmp_path):
    model = released(tiny_backbone)
    before = {k: v.clone() for k, v in model.trainable_state().items()}
    result = infoprompt.train(model, toy_examples, toy_examples[:6], TrainConfig(max_steps=3, **FAST))
    assert result.steps == 3 and set(result.last_losses) == {"total", "pred", "rep", "head", "kl"}
    assert all(math.isfinite(v) for v in result.last_losses.values())
    assert all(not torch.equal(before[k], v) for k, v in model.trainable_state().items())  # every part trains
    model.save_pretrained(tmp_path / "a")
    loaded = infoprompt.load_adapter(tmp_path / "a", backbone=tiny_backbone)
    assert type(loaded).__name__ == "ReleasedClassifier" and loaded.config == model.config
    encoded = encode_examples(model, toy_examples[:6])
    assert torch.equal(predict_encoded(model, encoded), predict_encoded(loaded, encode_examples(loaded, toy_examples[:6])))


def test_the_total_is_ce_plus_the_weighted_terms(bert_backbone, toy_examples):
    model = released(bert_backbone).train()
    encoded = encode_examples(model, toy_examples[:4])
    pooled, z_plain = features_for(model, encoded, [0, 1, 2, 3])
    terms = model.losses(prompted_batch(model, encoded, [0, 1, 2, 3]), encoded.labels, pooled, z_plain,
                         torch.Generator().manual_seed(0))
    expected = terms.pred + 0.1 * terms.head + 0.2 * terms.rep + 0.1 * terms.kl
    assert torch.allclose(terms.total, expected)
    mean, log_std = model.head.gaussian(z_plain)
    assert terms.kl > mean_kl(mean, log_std)  # the prompted pass's Gaussian adds its own KL


def mask_state_of_row(model, examples, cls_states: torch.Tensor, row: int) -> torch.Tensor:
    model.eval()
    encoded = encode_examples(model, examples)
    with torch.no_grad():
        _, z, _ = model(prompted_batch(model, encoded, list(range(len(examples)))), cls_states)
    return z[row]


def test_the_first_row_option_gives_every_row_the_first_examples_prompt(bert_backbone, toy_examples):
    own = released(bert_backbone)
    first_row = released(bert_backbone, released_batch_prompt=True)
    assert first_row.config.options.released_batch_prompt and not own.config.options.released_batch_prompt
    # Two rows whose generator inputs (the no-prompt CLS states) differ clearly, so their prompts do too.
    pair, cls_states = [toy_examples[0], toy_examples[1]], torch.randn(2, bert_backbone.hidden_size,
                                                                      generator=torch.Generator().manual_seed(0)) * 10
    alone = mask_state_of_row(own, [toy_examples[1]], cls_states[1:], 0)
    assert torch.allclose(alone, mask_state_of_row(first_row, [toy_examples[1]], cls_states[1:], 0))  # a batch of one
    # With its own prompt a row's [MASK] state does not depend on the other rows of the batch ...
    assert torch.allclose(mask_state_of_row(own, pair, cls_states, 1), alone, atol=1e-5)
    # ... with the released code's prompt the second row reads the first example's prompt.
    assert not torch.allclose(mask_state_of_row(first_row, pair, cls_states, 1), alone, atol=1e-3)
    prompts = first_row.prompt(torch.randn(3, bert_backbone.hidden_size))
    slots = first_row.slot_prompts(prompts)
    assert slots.shape == (3, 8, bert_backbone.hidden_size)
    assert all(torch.equal(slots[row], prompts[0].repeat(4, 1)) for row in range(3))
    assert all(torch.equal(own.slot_prompts(prompts)[row], prompts[row].repeat(4, 1)) for row in range(3))


def test_the_first_row_method_row_and_the_flag_agree(bert_backbone):
    assert released(bert_backbone, "infoprompt-released-first-row").config.options.released_batch_prompt
    assert not released(bert_backbone, "infoprompt-released-first-row", released_batch_prompt=False).config.options.released_batch_prompt
    with pytest.raises(UserError, match=r"method infoprompt \(kind prompt\) has no option released_batch_prompt"):
        infoprompt.make_classifier(bert_backbone, "sst2", "infoprompt", released_batch_prompt=True)


def test_the_flag_is_on_the_command_line(capsys):
    assert main(["train", "--help"]) == 0
    assert "--released-batch-prompt" in capsys.readouterr().out


def test_the_cli_trains_with_the_flag_and_the_adapter_keeps_it(tiny_model_dirs, tmp_path, capsys):
    write_split(tmp_path / "data", ROWS)
    common = ["--data-dir", str(tmp_path / "data"), "--quiet"]
    assert main(["train", "--task", "sst2", "--method", "infoprompt-released", "--released-batch-prompt",
                 "--shots", "8", "--n-prompts", "1", "--epochs", "1", "--backbone", str(tiny_model_dirs["bert"]),
                 "--max-length", "48", "--out", str(tmp_path / "run"), *common]) == 0
    saved = json.loads(adapter_config_file(tmp_path / "run").read_text())
    assert saved["method"] == "infoprompt-released" and saved["options"]["released_batch_prompt"] is True
    capsys.readouterr()
    assert main(["eval", "--adapter", str(tmp_path / "run"), *common]) == 0
    trained = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert json.loads(capsys.readouterr().out)["metrics"] == trained["metrics"]


def test_the_kl_is_the_mean_kl_to_a_standard_normal():
    assert mean_kl(torch.zeros(4, 3), torch.zeros(4, 3)).item() == 0.0
    mean, log_std = torch.randn(4, 3), torch.randn(4, 3) * 0.5
    reference = torch.distributions.kl_divergence(torch.distributions.Normal(mean, log_std.exp()),
                                                  torch.distributions.Normal(0.0, 1.0)).mean()
    assert torch.allclose(mean_kl(mean, log_std), reference, atol=1e-6)


def test_the_log_std_is_clamped(bert_backbone):
    model = released(bert_backbone)
    with torch.no_grad():
        model.head.log_std.bias.fill_(-50.0)
    _, log_std = model.head.gaussian(torch.zeros(2, bert_backbone.hidden_size))
    assert torch.all(log_std == -2.0)


def test_the_infonce_terms_clamp_the_positive_log_probability_at_minus_two():
    hopeless = torch.tensor([[-30.0, 0.0, 0.0]], requires_grad=True)
    term = clamped_nce(hopeless)
    assert term.item() == 2.0  # capped at 2: −log p of the positive is about 31 here
    term.sum().backward()
    assert torch.all(hopeless.grad == 0)  # ... and such an example gives no gradient
    easy = torch.tensor([[3.0, 0.0, 1.0]])
    assert torch.allclose(clamped_nce(easy), -torch.log_softmax(easy, -1)[:, 0])


def test_the_head_term_ignores_masked_tokens():
    prompt, rows = torch.randn(2, 8), torch.randn(2, 8)
    tokens, mask = torch.randn(2, 5, 8), torch.tensor([[True, True, True, False, False], [True] * 5])
    changed = tokens.clone()
    changed[0, 3:] = 100.0  # padding that would win every score if it were counted
    assert torch.allclose(head_term(prompt, rows, tokens, mask), head_term(prompt, rows, changed, mask))
    assert not torch.allclose(head_term(prompt, rows, tokens, mask[:, :1].expand(2, 5)), head_term(prompt, rows, changed, mask[:, :1].expand(2, 5)))


def test_the_bottleneck_term_draws_four_batch_sizes_of_negatives(bert_backbone):
    head = released(bert_backbone).head
    drawn = []
    original = head.output.forward
    head.output.forward = lambda x: (drawn.append(x.shape), original(x))[1]
    hidden, latent = bert_backbone.hidden_size, head.mean.out_features
    gaussian = (torch.zeros(3, latent), torch.zeros(3, latent))
    term = bottleneck_term(head, torch.randn(3, 1, hidden), gaussian, gaussian, torch.Generator().manual_seed(0))
    assert drawn == [torch.Size([3, 1 + 4 * 3, latent])] and term.shape == (3,) and torch.all(term <= 2.0)


def test_the_learning_rate_warms_up_and_decays(bert_backbone, toy_examples, tmp_path):
    model = released(bert_backbone)
    log = tmp_path / "log.jsonl"
    infoprompt.train(model, toy_examples, None, TrainConfig(**{**FAST, "epochs": 5}), log_path=log)
    rates = [r["lr"] for r in map(json.loads, log.read_text().splitlines()) if r.get("type") == "step"]
    assert len(rates) == 20  # 16 examples, batch 4, 5 epochs
    peak = rates.index(max(rates))
    assert rates[0] == 0.0 and max(rates) == pytest.approx(1e-3) and peak == int(20 * 0.06)
    assert all(a >= b for a, b in zip(rates[peak:], rates[peak + 1:], strict=False)) and rates[-1] < 1e-4


def test_the_prompt_kind_keeps_a_constant_rate(bert_backbone, toy_examples, tmp_path):
    model = infoprompt.make_classifier(bert_backbone, task="sst2", method="infoprompt", n_prompts=1, seed=1, max_length=32)
    log = tmp_path / "log.jsonl"
    infoprompt.train(model, toy_examples, None, TrainConfig(**FAST), log_path=log)
    rates = [r["lr"] for r in map(json.loads, log.read_text().splitlines()) if r.get("type") == "step"]
    assert len(rates) == 8 and set(rates) == {1e-3}
