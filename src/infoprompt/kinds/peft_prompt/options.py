"""The peft kind's options: the number of virtual tokens peft prepends."""

from __future__ import annotations

from dataclasses import dataclass

from infoprompt.kinds.options import KindOptions
from infoprompt.options import POSITIVE, option


@dataclass(frozen=True)
class PeftOptions(KindOptions):
    """``n_prompts``: the virtual tokens of peft's prompt tuning (``num_virtual_tokens``)."""

    n_prompts: int = option(4, "prompt tokens n_p (default 4)", type=POSITIVE)

    def prompt_tokens(self) -> int:
        return self.n_prompts
