"""Where the fuzzers' random choices come from.

The program generators (``loopgen``, ``tcgen``) and the option sampler ask a ``Draw`` for
every choice, so that the same generator serves the standalone campaign (``RandomDraw``
on a seeded ``random.Random``: reproducible from one integer) and pytest under hypothesis
(``HypothesisDraw`` on ``st.data()``: derandomised in CI, and hypothesis shrinks the
choices of a failing case towards the first entry of each list and towards "no").
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Draw(Protocol):
    def integer(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi]."""

    def choice(self, items: Sequence[T]) -> T:
        """One of ``items``; the first is the simplest (shrinking goes there)."""

    def chance(self, p: float) -> bool:
        """True with probability ``p`` (shrinking goes to False)."""


class RandomDraw:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, items: Sequence[T]) -> T:
        return items[self.rng.randrange(len(items))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class HypothesisDraw:
    """Choices drawn from hypothesis's ``st.data()`` object."""

    def __init__(self, data: object):
        from hypothesis import strategies as st

        self._st = st
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(self._st.integers(lo, hi))  # type: ignore[attr-defined]

    def choice(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]

    def chance(self, p: float) -> bool:
        # 0 is where hypothesis shrinks to: make it mean "no"
        return self.integer(0, 999) >= round((1 - p) * 1000)
