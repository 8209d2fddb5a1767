"""InfoNCE estimator of the conditional mutual information I(P; Z | X) with a critic fitted afresh per source.

The critic is the paper's representation critic (:class:`~infoprompt.kinds.prompt.objectives.RepresentationMI`: a
variational Gaussian ``N(f_μ(z), σ(z))`` applied to every state, then the bilinear score ``P̄ᵀ W z / √D``).
It is fitted on one set of examples and then frozen; the per-example value ``log(K+1) − nce`` is computed
on other examples only, so a critic that memorised its fit set cannot inflate the number.

Conditioning on X is carried by the negatives: for example ``i`` every one of the K negatives is built from
the *same* input ``X_i`` (callers pass them per example), so the only thing that tells the positive apart
is what the prompt did to the representation. With negatives drawn from ``p(z | X)`` (the states of ``X``
under other draws of the prompt) the held-out value is a lower bound on ``I(P; T(Z) | X) ≤ I(P; Z | X)``,
``T`` being the frozen variational kernel; with the no-prompt state ``Z' = Φ(X)`` as the reference (the
paper's choice) it is a lower bound on ``E KL(p(T(z) | P, X) ‖ T(Z'))``. Either way it never exceeds
``log(K + 1)``. See docs/analysis.md for the derivation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from infoprompt.errors import UserError
from infoprompt.kinds.prompt.objectives import RepresentationMI, info_nce
from infoprompt.progress import bar_disabled


@dataclass
class EstimatorConfig:
    """Budget of the estimator; one config for every prompt source, so their numbers compare.

    Attributes:
        n_negatives: K, negatives per example (the bound is capped at ``log(K + 1)``).
        steps: Adam steps of the critic on the fit examples.
        batch_size: fit examples per step.
        lr: Adam learning rate of the critic.
        weight_decay: decoupled weight decay of the critic (AdamW).
        score_draws: the held-out value of an example is the mean over this many draws of the
            variational noise and of the negatives, which lowers its variance, not its expectation.
        standardise: scale inputs before the critic sees them (an invertible map, so the information is
            unchanged): states by the per-dimension mean / std of the fit split's reference states,
            prompt summaries by their root-mean-square norm over the fit split (divided by ``√D``).
        seed: seeds the critic initialisation, minibatches and noise (the same for every source).
        progress: show a progress bar while fitting.
    """

    n_negatives: int = 32
    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    score_draws: int = 16
    standardise: bool = True
    seed: int = 0
    progress: bool = False

    def check(self) -> None:
        for name in ("n_negatives", "steps", "batch_size", "score_draws"):
            if getattr(self, name) < 1:
                raise UserError(f"estimator {name} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise UserError(f"estimator lr must be positive, got {self.lr}")


@dataclass
class Estimate:
    """Held-out per-example values ``log(K+1) − nce`` and the fit-split bound after each critic step."""

    values: np.ndarray  # (N_score,)
    fit_curve: np.ndarray  # (steps,)
    n_negatives: int
    n_fit: int

    @property
    def cap(self) -> float:
        return math.log(self.n_negatives + 1)


@dataclass
class Inputs:
    """What the estimator sees for a set of examples.

    ``prompt`` (N, D) is the prompt summary ``P̄``; ``z`` (N, D) the state read out with the prompt;
    ``negatives`` is either (N, D) (one reference state per example, e.g. ``Z' = Φ(X)``: the K negatives
    are K draws of the variational kernel around it) or (N, M, D) with M ≥ K candidate states of the same
    input (e.g. the input under other prompts of the source), K of which are used per evaluation.
    """

    prompt: torch.Tensor
    z: torch.Tensor
    negatives: torch.Tensor

    def __post_init__(self) -> None:
        n, d = self.z.shape
        if self.prompt.shape != (n, d):
            raise ValueError(f"prompt summaries {tuple(self.prompt.shape)} do not match states {(n, d)}")
        if self.negatives.dim() == 2:
            self.negatives = self.negatives.unsqueeze(1)
        if self.negatives.dim() != 3 or self.negatives.shape[0] != n or self.negatives.shape[2] != d:
            raise ValueError(
                f"negatives must be (N, D) or (N, M, D) with N={n}, D={d}; got {tuple(self.negatives.shape)}"
            )

    def __len__(self) -> int:
        return self.z.shape[0]

    def subset(self, index: torch.Tensor) -> Inputs:
        return Inputs(self.prompt[index], self.z[index], self.negatives[index])


class Standardiser:
    """The invertible input scaling of :class:`EstimatorConfig` ``standardise``, fitted on the fit split."""

    def __init__(self, fit: Inputs, enabled: bool = True):
        d = fit.z.shape[1]
        if enabled:
            reference = fit.negatives.reshape(-1, d)
            self.mean = reference.mean(0)
            self.std = reference.std(0, unbiased=False).clamp_min(1e-6)
            rms = fit.prompt.pow(2).sum(-1).mean().sqrt() / math.sqrt(d)
            self.prompt_scale = rms.clamp_min(1e-12)
        else:
            self.mean, self.std, self.prompt_scale = torch.zeros(d), torch.ones(d), torch.tensor(1.0)

    def __call__(self, inputs: Inputs) -> Inputs:
        return Inputs(
            inputs.prompt / self.prompt_scale,
            (inputs.z - self.mean) / self.std,
            (inputs.negatives - self.mean) / self.std,
        )


def _nce(critic: RepresentationMI, batch: Inputs, k: int, generator: torch.Generator) -> torch.Tensor:
    """Per-example InfoNCE loss: one kernel sample of ``z`` against K kernel samples of same-input negatives.

    With one reference state the K negatives are K independent kernel draws around it; with exactly K
    candidate states each is used once; with more, K of them are drawn without replacement. Negatives are
    never duplicated, which the bound needs (the positive must be exchangeable with them under the null).
    """
    n, m, d = batch.negatives.shape
    mu_all, sigma_all = critic.gaussian(batch.negatives)  # (N, M, D): the kernel once per distinct state
    if m == 1:
        mu_neg, sigma_neg = mu_all.expand(n, k, d), sigma_all.expand(n, k, d)
    elif m == k:
        mu_neg, sigma_neg = mu_all, sigma_all
    elif m > k:
        picks = torch.rand((n, m), generator=generator).argsort(dim=1)[:, :k].unsqueeze(-1).expand(-1, -1, d)
        mu_neg, sigma_neg = mu_all.gather(1, picks), sigma_all.gather(1, picks)
    else:
        raise UserError(f"{m} candidate negatives per example cannot supply K={k} distinct ones")
    mu, sigma = critic.gaussian(batch.z)
    positive = mu + sigma * torch.randn(mu.shape, generator=generator)
    negatives = mu_neg + sigma_neg * torch.randn(mu_neg.shape, generator=generator)
    return info_nce(
        critic.critic(batch.prompt, positive), critic.critic(batch.prompt.unsqueeze(1), negatives)
    )


def fresh_critic(hidden: int, seed: int, initial_sigma: float = 0.05) -> RepresentationMI:
    """The paper's critic, seeded, its kernel noise starting small (σ ≈ ``initial_sigma``, input-independent).

    Starting from the default init (σ ≈ 0.7 in standardised units) the critic first spends its budget
    learning to remove noise it added itself, which lowers the bound for a reason that has nothing to do
    with the prompt; the fit can still grow σ where noise helps it generalise.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        critic = RepresentationMI(hidden)
    with torch.no_grad():
        critic.f_sigma.weight.zero_()
        critic.f_sigma.bias.fill_(math.log(math.expm1(initial_sigma)))  # softplus⁻¹
    return critic


def estimate(
    fit: Inputs, score: Inputs, config: EstimatorConfig | None = None, desc: str = "critic"
) -> Estimate:
    """Fit a fresh critic on ``fit`` and return the per-example bound on ``score`` (which it never saw)."""
    config = config or EstimatorConfig()
    config.check()
    if len(fit) < 2 or len(score) < 1:
        raise UserError(
            f"the estimator needs at least 2 fit and 1 scored example, got {len(fit)} and {len(score)}"
        )
    scale = Standardiser(fit, config.standardise)
    fit, score = scale(fit), scale(score)
    generator = torch.Generator().manual_seed(config.seed)
    critic = fresh_critic(fit.z.shape[1], config.seed)
    optimizer = torch.optim.AdamW(critic.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    k = config.n_negatives
    cap = math.log(k + 1)
    curve = np.empty(config.steps)
    critic.train()
    for step in tqdm(range(config.steps), desc=desc, disable=bar_disabled(config.progress), leave=False):
        index = torch.randperm(len(fit), generator=generator)[: config.batch_size]
        loss = _nce(critic, fit.subset(index), k, generator).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        curve[step] = cap - float(loss.detach())
    critic.eval()
    with torch.no_grad():
        total = torch.zeros(len(score))
        for _ in range(config.score_draws):
            total += cap - _nce(critic, score, k, generator)
    return Estimate(
        values=(total / config.score_draws).numpy(), fit_curve=curve, n_negatives=k, n_fit=len(fit)
    )


@dataclass
class Summary:
    """Mean with a 95% percentile-bootstrap interval, plus spread, of per-example values."""

    n: int
    mean: float
    ci_low: float
    ci_high: float
    median: float
    std: float

    def as_dict(self) -> dict[str, float | int]:
        return dict(vars(self))


def summarise(values: np.ndarray, seed: int = 0, resamples: int = 2000) -> Summary:
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no values to summarise")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(1)
    low, high = np.quantile(means, [0.025, 0.975])
    return Summary(
        n=int(values.size),
        mean=float(values.mean()),
        ci_low=float(low),
        ci_high=float(high),
        median=float(np.median(values)),
        std=float(values.std(ddof=1)) if values.size > 1 else 0.0,
    )


def gaussian_mi(rho: float, dim: int) -> float:
    """I(A; B) in nats for ``B = ρ A + √(1−ρ²) ε``, ``A, ε`` independent standard normal in ``dim`` dims."""
    return -0.5 * dim * math.log(1.0 - rho**2)
