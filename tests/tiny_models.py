"""Tiny random BERT / RoBERTa / MPNet encoders with a small WordPiece tokenizer, saved to disk for tests."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import AutoModel, BertConfig, MPNetConfig, PreTrainedTokenizerFast, RobertaConfig

WORDS = (  # noqa: SIM905
    "the a movie film story actor plot scene great terrible good bad yes no correct wrong is was it this that "
    "and or but not very so quite funny boring dull brilliant awful lovely hate love man woman dog cat ran sat "
    "on in of to with for he she they we said says had has have will would equivalent meaning same different "
    "positive negative sentence word words long short end start city company works for lives kill killed born"
).split()

SPECIALS = {
    "bert": {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]"},
    "roberta": {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
                "bos_token": "<s>", "eos_token": "</s>"},
}
SPECIALS["mpnet"] = SPECIALS["roberta"]


def build_tokenizer(arch: str) -> PreTrainedTokenizerFast:
    specials = SPECIALS[arch]
    ordered = list(dict.fromkeys([specials["pad_token"], specials["unk_token"], specials["cls_token"],
                                  specials["sep_token"], specials["mask_token"]]))
    # A fixed vocabulary (the specials, the letters, ##letters, the words), not a trained one: the WordPiece
    # trainer orders tied pieces differently from one process to the next, and the vocabulary size and every
    # weight drawn after the embeddings moved with it, so a committed adapter could not be checked again.
    letters = sorted({letter for word in WORDS for letter in word})
    vocab = list(dict.fromkeys([*ordered, *letters, *(f"##{letter}" for letter in letters), *WORDS]))
    tokenizer = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocab)}, unk_token=specials["unk_token"]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=64, **specials)


def build_tiny_model(arch: str, directory: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a tiny random ``arch`` encoder plus tokenizer to ``directory`` and return it."""
    tokenizer = build_tokenizer(arch)
    common = dict(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                  intermediate_size=2 * hidden, pad_token_id=tokenizer.pad_token_id)
    if arch == "bert":
        config = BertConfig(max_position_embeddings=64, **common)
    elif arch == "roberta":
        config = RobertaConfig(max_position_embeddings=66, bos_token_id=tokenizer.cls_token_id,
                               eos_token_id=tokenizer.sep_token_id, **common)
    elif arch == "mpnet":
        config = MPNetConfig(max_position_embeddings=66, bos_token_id=tokenizer.cls_token_id,
                             eos_token_id=tokenizer.sep_token_id, **common)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
