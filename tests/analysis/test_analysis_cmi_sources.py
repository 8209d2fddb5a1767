"""Prompt sources of the CMI analysis: templates, per-example states, swapped states, adapter checks."""

from __future__ import annotations

import pytest
import torch

from infoprompt.analysis.sources import SourceSpec, StateCollector, parse_adapter_arg, text_template
from infoprompt.errors import UserError
from infoprompt.kinds.config import ClassifierConfig
from infoprompt.kinds.prompt.model import PromptClassifier
from infoprompt.tasks import get_task

# Small tensors: a second intra-op thread only adds contention on the shared CPU.
pytestmark = pytest.mark.usefixtures("one_thread")


def save_tiny_adapter(backbone, directory, method: str = "infoprompt", task: str = "sst2"):
    config = ClassifierConfig.create(
        task=task, method=method, backbone="tiny-bert", n_prompts=2, rank=4, max_length=48
    )
    model = PromptClassifier(backbone, config)
    if model.prompt is not None:
        with torch.no_grad():
            for parameter in model.prompt.parameters():
                parameter.add_(0.1 * torch.randn_like(parameter))  # make the generated part input-dependent
    model.save_pretrained(directory)
    return model


def test_handcrafted_template_keeps_the_phrase_before_the_mask():
    assert text_template(get_task("sst2")) == "<cls> {sentence} <p> <mask> <sep>"
    assert text_template(get_task("mrpc")) == "<cls> {sentence1} <p> <mask> {sentence2} <sep>"


def test_adapter_argument_parsing(tmp_path):
    assert parse_adapter_arg(f"mine={tmp_path}") == SourceSpec(kind="adapter", label="mine", adapter=tmp_path)
    assert parse_adapter_arg(str(tmp_path)).label == ""


def test_states_of_every_source_kind(bert_backbone, toy_examples, tmp_path):
    save_tiny_adapter(bert_backbone, tmp_path / "ip")
    collector = StateCollector(
        bert_backbone, get_task("sst2"), toy_examples[:10], batch_size=4, progress=False
    )
    partners = torch.stack([torch.tensor([(i + 1) % 10, (i + 2) % 10]) for i in range(10)])
    d = bert_backbone.hidden_size
    text = collector.collect(SourceSpec(kind="text", label="t", text="great movie"), partners)
    rand = collector.collect(SourceSpec(kind="random", label="r", n_prompts=3), partners)
    adapter = collector.collect(SourceSpec(kind="adapter", label="", adapter=tmp_path / "ip"), partners)
    for states in (text, rand, adapter):
        assert (
            states.prompt_mean.shape == (10, d)
            and states.z.shape == (10, d)
            and states.z_swapped.shape == (10, 2, d)
        )
        assert not states.prompt_mean.requires_grad
    ids = bert_backbone.tokenizer("great movie", add_special_tokens=False)["input_ids"]
    expected = bert_backbone.input_embeddings.weight.detach()[ids].mean(0)
    torch.testing.assert_close(text.prompt_mean, expected.expand(10, -1))
    assert text.static and not rand.static and not adapter.static
    assert adapter.spec.label == "infoprompt" and adapter.n_prompts == 2
    # One no-prompt pass shared by every source; the prompt moves the readout state.
    torch.testing.assert_close(text.z_plain, rand.z_plain)
    torch.testing.assert_close(text.z_plain, adapter.z_plain)
    assert not torch.allclose(text.z, text.z_plain)
    # A single prompt gives the same states under every partner's prompt; per-input prompts do not.
    torch.testing.assert_close(text.z_swapped[:, 0], text.z)
    assert not torch.allclose(rand.z_swapped[:, 0], rand.z)
    # Swapped state = the input under its partner's prompt: partner (i+1)'s own prompt on input i.
    assert not torch.allclose(adapter.z_swapped[:, 0], adapter.z)


def test_random_prompts_are_seeded(bert_backbone, toy_examples):
    task = get_task("sst2")
    first = StateCollector(bert_backbone, task, toy_examples[:4], seed=3, progress=False)
    again = StateCollector(bert_backbone, task, toy_examples[:4], seed=3, progress=False)
    spec = SourceSpec(kind="random", label="r", n_prompts=2)
    torch.testing.assert_close(first.collect(spec).prompt_mean, again.collect(spec).prompt_mean)


def test_unusable_adapters_are_refused(bert_backbone, toy_examples, tmp_path):
    save_tiny_adapter(bert_backbone, tmp_path / "ft", method="finetune")
    save_tiny_adapter(bert_backbone, tmp_path / "cola", task="cola")
    collector = StateCollector(bert_backbone, get_task("sst2"), toy_examples[:4], progress=False)
    with pytest.raises(UserError, match="no prompt"):
        collector.collect(SourceSpec(kind="adapter", label="ft", adapter=tmp_path / "ft"))
    with pytest.raises(UserError, match="task cola"):
        collector.collect(SourceSpec(kind="adapter", label="c", adapter=tmp_path / "cola"))
    with pytest.raises(UserError, match="no tokens"):
        collector.collect(SourceSpec(kind="text", label="empty", text="  "))
