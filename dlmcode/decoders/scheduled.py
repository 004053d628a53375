"""Settings for decoders that run a fixed number of steps per block (LLaDA, Dream)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import BaseDecoder, check, setting


@dataclass(frozen=True)
class Scheduled(BaseDecoder):
    """A decoder with a step budget: `steps` in all, or `tokens_per_step`."""

    steps: int | None = setting(None, "calls in all, split evenly over blocks; none = one per hole")
    tokens_per_step: int | None = setting(None, "instead of steps: holes committed per call")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.steps is None or self.steps > 0, "steps", self.steps, "must be > 0")
        check(
            self.tokens_per_step is None or self.tokens_per_step > 0,
            "tokens_per_step",
            self.tokens_per_step,
            "must be > 0",
        )
        check(
            self.steps is None or self.tokens_per_step is None,
            "steps",
            self.steps,
            "and tokens_per_step are alternatives: set one",
        )

    def steps_for(self, holes: int, number: int, count: int) -> int:
        """Steps of block `number` of `count`: LLaDA gives each block steps // count.

        Where LLaDA asserts divisibility we give the first steps % count blocks one more, and a
        block never gets more steps than holes (LLaDA would spend calls committing nothing).
        """
        if self.tokens_per_step is not None:
            return math.ceil(holes / self.tokens_per_step)
        if self.steps is None:
            return holes
        share = self.steps // count + (number < self.steps % count)
        return max(1, min(holes, share))
