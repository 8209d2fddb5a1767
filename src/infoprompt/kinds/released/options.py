"""The released kind's options: the authors' released recipe's prompt count, loss weights and latent width."""

from __future__ import annotations

from dataclasses import dataclass

from infoprompt.kinds.options import KindOptions
from infoprompt.options import NON_NEGATIVE, POSITIVE, option

LATENT = 32  # --n_latent: the generator's bottleneck and the variational head's latent width
KL_WEIGHT = 0.1


@dataclass(frozen=True)
class ReleasedOptions(KindOptions):
    """The released code's settings (its defaults are the class's).

    Attributes:
        n_prompts: prompt tokens ``n_p`` in each of the template's places.
        beta: weight of the bottleneck (representation) term.
        gamma: weight of the head term.
        rank: latent width of the prompt generator's bottleneck and of the variational head.
        kl_weight: weight of the variational head's KL to N(0, I).
        released_batch_prompt: every row of a batch gets the batch's first generated prompt (the released code's
            ``prompts_embeds[0, counter]``).
    """

    n_prompts: int = option(4, "prompt tokens n_p (default 4)", type=POSITIVE)
    beta: float = option(0.2, "weight of the representation MI loss", type=NON_NEGATIVE)
    gamma: float = option(0.1, "weight of the head MI loss", type=NON_NEGATIVE)
    rank: int = option(LATENT, f"latent width of the generator and the variational head (default {LATENT})",
                       type=POSITIVE)
    kl_weight: float = option(KL_WEIGHT, f"weight of the variational head's KL term (default {KL_WEIGHT})",
                              type=NON_NEGATIVE)
    released_batch_prompt: bool = option(False, "every row of a batch gets the first example's generated prompt, as "
                                         "the authors' released code does (default: the method's; off for "
                                         "infoprompt-released)", switch="flag")

    def prompt_tokens(self) -> int:
        return self.n_prompts
