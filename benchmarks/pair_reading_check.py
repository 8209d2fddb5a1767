"""Design check for pair tasks, on training splits only: a pair read as one joined text or as two texts through
the same encoder (sentence-transformers' way), with the frozen encoder (a probe) and with LoRA in the top blocks.

    python benchmarks/pair_reading_check.py --task mrpc --backbone minilm --seeds 11 12 --score-rows 400

Draws ``--shots`` rows of the task's training split with each seed and scores on ``--score-rows`` other training
rows (disjoint), so no choice made from it has seen dev or test data (as benchmarks/design_check.py). Prints the
primary metric, the share of the most-predicted class beside the majority share of the scoring rows, and seconds.

Variants:
    probe-joined    frozen encoder, mean-pooled joined pair, logistic regression (the probe today)
    probe-pair      frozen encoder, each text pooled alone; features [u, v, |u - v|, u * v, cos(u, v)]
    probe-pair-balanced  the same, the head's classes weighted inversely to their counts in the draw
    lora-joined     top-lora as it is (the joined pair)
    lora-pair-ce    LoRA in the top blocks trained through a linear softmax on [u, v, |u - v|, u * v]
                    (sentence-transformers' SoftmaxLoss), then the logistic head on the pair features
    lora-pair-supcon  LoRA trained with supervised contrastive loss on the normalised [|u - v|, u * v]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import numpy as np
import torch
from design_check import training_split_draw
from sklearn.linear_model import LogisticRegression
from torch.nn import functional

from infoprompt.backbones import load_backbone
from infoprompt.kinds import make_classifier
from infoprompt.kinds.top_lora.blocks import SplitEncoder
from infoprompt.kinds.top_lora.losses import SupervisedContrastive
from infoprompt.metrics import compute_metrics
from infoprompt.tasks import get_task, load_split


def pair_features(u: torch.Tensor, v: torch.Tensor, with_cosine: bool = True) -> torch.Tensor:
    u, v = functional.normalize(u, dim=-1), functional.normalize(v, dim=-1)
    parts = [u, v, (u - v).abs(), u * v]
    if with_cosine:
        parts.append((u * v).sum(-1, keepdim=True))
    return torch.cat(parts, dim=-1)


def token_ids(tokenizer, texts, max_length=128):
    return [tokenizer(t, truncation=True, max_length=max_length)["input_ids"] for t in texts]


def joined_ids(tokenizer, firsts, seconds, max_length=128):
    return [tokenizer(a, b, truncation=True, max_length=max_length)["input_ids"] for a, b in zip(firsts, seconds, strict=True)]


def head_scores(train_x, train_y, test_x, test_y, seed, task, balanced=False):
    head = LogisticRegression(C=1.0, max_iter=200, random_state=seed,
                              class_weight="balanced" if balanced else None).fit(train_x, train_y)
    predicted = head.predict_proba(test_x)
    probabilities = np.zeros((len(test_x), len(task.labels)))
    probabilities[:, head.classes_] = predicted
    decisions = probabilities.argmax(1)
    metric = task.primary_metric
    value = compute_metrics((metric,), list(test_y), decisions.tolist(), task.labels,
                            getattr(task, "positive_label", None))[metric]
    top_share = Counter(decisions.tolist()).most_common(1)[0][1] / len(decisions)
    return value, top_share


class PairTrainer:
    """LoRA in the top blocks of a top-lora model's encoder, the two texts of a pair read separately."""

    def __init__(self, model, ids_a, ids_b):
        self.model = model
        settings = model.settings
        self.split = SplitEncoder(model.lora_encoder, settings.top_layers, model.backbone.tokenizer.pad_token_id)
        self.states_a = self.split.lower_states(ids_a)
        self.states_b = self.split.lower_states(ids_b)
        self.settings = settings

    def lora_parameters(self):
        return [p for name, p in self.model.lora_model.named_parameters() if "lora_" in name]

    def encode(self, rows, train: bool):
        self.split.upper.train(train)
        u = self.split.pooled([self.states_a[i] for i in rows], 16)
        v = self.split.pooled([self.states_b[i] for i in rows], 16)
        return u, v

    def train(self, labels, n_classes, objective: str, epochs: int, seed: int, batch: int = 32):
        from transformers import get_linear_schedule_with_warmup

        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        dimension = self.model.backbone.hidden_size
        softmax = torch.nn.Linear(4 * dimension, n_classes)
        groups = [{"params": self.lora_parameters(), "lr": self.settings.body_learning_rate}]
        if objective == "ce":
            groups.append({"params": softmax.parameters(), "lr": 1e-2})
        optimizer = torch.optim.AdamW(groups)
        steps_per_epoch = -(-len(labels) // batch)
        total = epochs * steps_per_epoch
        schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * total), total)
        supcon = SupervisedContrastive(0.07)
        target = torch.tensor(labels)
        for _ in range(epochs):
            order = torch.randperm(len(labels), generator=generator).tolist()
            for start in range(0, len(order), batch):
                rows = order[start : start + batch]
                u, v = self.encode(rows, True)
                if objective == "ce":
                    loss = functional.cross_entropy(softmax(pair_features(u, v, with_cosine=False)), target[rows])
                else:
                    un, vn = functional.normalize(u, dim=-1), functional.normalize(v, dim=-1)
                    loss = supcon(torch.cat([(un - vn).abs(), un * vn], dim=-1), target[rows])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.lora_parameters(), 1.0)
                optimizer.step()
                schedule.step()
        self.split.upper.eval()

    @torch.no_grad()
    def features(self, rows):
        u, v = self.encode(rows, False)
        return pair_features(u, v).double().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--shots", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[11, 12])
    parser.add_argument("--score-rows", type=int, default=400)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--variants", nargs="+",
                        default=["probe-joined", "probe-pair", "lora-joined", "lora-pair-ce", "lora-pair-supcon"],
                        choices=["probe-joined", "probe-pair", "probe-pair-balanced", "lora-joined", "lora-pair-ce",
                                 "lora-pair-supcon"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=128, help="token budget of a text (tiny test models: 32)")
    parser.add_argument("--out", help="append one JSON line per run here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    first, second = task.fields
    metric = task.primary_metric
    train_split = load_split(task, task.train_split, args.data_dir)
    backbone = load_backbone(args.backbone)
    tokenizer = backbone.tokenizer
    index = {label: i for i, label in enumerate(task.labels)}
    table: dict[str, list[float]] = {}
    for seed in args.seeds:
        sample, scoring = training_split_draw(train_split, args.shots, seed, task.labels, args.score_rows)
        rows = sample + scoring
        y = [index[e.label] for e in rows]
        train_rows, test_rows = list(range(len(sample))), list(range(len(sample), len(rows)))
        ytr, yte = [y[i] for i in train_rows], [y[i] for i in test_rows]
        majority = Counter(yte).most_common(1)[0][1] / len(yte)
        ids_a = token_ids(tokenizer, [e.fields[first] for e in rows], args.max_length)
        ids_b = token_ids(tokenizer, [e.fields[second] for e in rows], args.max_length)
        for variant in args.variants:
            started = time.perf_counter()
            model = make_classifier(backbone, args.task, "top-lora", 4, seed, max_length=args.max_length)
            if variant == "lora-joined":
                from infoprompt.kinds import kind_of
                from infoprompt.training import TrainConfig

                result = kind_of("top-lora").trainer()(model, sample, scoring, TrainConfig(seed=seed, progress=False,
                                                                                          eval_every_epochs=0))
                value = result.metrics[metric]
                from infoprompt.training import encode_examples, predict_encoded

                decisions = predict_encoded(model, encode_examples(model, scoring)).argmax(1).tolist()
                top_share = Counter(decisions).most_common(1)[0][1] / len(decisions)
            else:
                if variant == "probe-joined":
                    joined = joined_ids(tokenizer, [e.fields[first] for e in rows], [e.fields[second] for e in rows],
                                        args.max_length)
                    trainer = PairTrainer(model, joined, ids_b[:1] * len(rows))
                    with torch.no_grad():
                        pooled = trainer.split.pooled(trainer.states_a, 16)
                    x = functional.normalize(pooled, dim=-1).double().numpy()
                else:
                    trainer = PairTrainer(model, ids_a, ids_b)
                    if variant.startswith("lora-pair"):
                        trainer.train(ytr, len(task.labels), variant.rsplit("-", 1)[1], args.epochs, seed)
                    x = trainer.features(range(len(rows)))
                value, top_share = head_scores(x[train_rows], ytr, x[test_rows], yte, seed, task,
                                               balanced=variant.endswith("-balanced"))
            seconds = time.perf_counter() - started
            table.setdefault(variant, []).append(value)
            print(f"{variant:18s} seed {seed}: {metric} {value:.4f}  top-class share {top_share:.3f} "
                  f"(majority {majority:.3f})  {seconds:.0f} s", flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"task": args.task, "backbone": args.backbone, "seed": seed,
                                             "variant": variant, "value": value, "top_share": top_share,
                                             "majority": majority, "seconds": seconds}) + "\n")
    print(f"\n| variant | mean {metric} | per seed |\n|---|---|---|")
    for variant, values in table.items():
        print(f"| {variant} | {np.mean(values):.4f} | {' '.join(f'{v:.3f}' for v in values)} |")


if __name__ == "__main__":
    main()
