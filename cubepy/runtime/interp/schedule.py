"""Schedules: which group of a chunk runs next, for how long, and when asynchronous copies land.

* ``lockstep`` (the default): one group per chunk; it runs until it finishes or blocks, and only a
  wait that some lanes cannot pass splits it (see ``groups``).  Copies land at issue.  This is the
  interp's historical behaviour and speed.
* ``random`` (with a seed): every plane is a group from the start; at each turn a seeded generator
  picks a runnable group and a number of steps (1 to ``MAX_RANDOM_TURN``) for it, or lands one of the
  copies in flight.  The same seed gives the same interleaving, hence the same result.
* ``adversarial``: every plane is a group; the group of the highest plane runs first and as far as
  it can (readers before writers in the usual "plane k reads what plane k-1 wrote" pattern), and a
  copy lands only when no group can run (as late as the barrier and group-wait rules allow).

A copy in flight is a callable; landing it writes its bytes through the one TMA emulation
(``interp.tma``) and credits its barrier.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cubepy import config
from cubepy.errors import CubeError

if TYPE_CHECKING:
    from cubepy.runtime.interp.groups import Group

SCHEDULES = ("lockstep", "random", "adversarial")
MAX_RANDOM_TURN = 24  # the most steps a group runs in one turn under the random schedule
UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class Schedule:
    """A schedule of the interp: its name and (for ``random``) its seed."""

    name: str = "lockstep"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise CubeError(f"schedule {self.name!r}: expected one of {', '.join(SCHEDULES)}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise CubeError(f"schedule seed {self.seed!r}: expected a non-negative int")

    @property
    def independent_planes(self) -> bool:
        """Whether every plane is its own group from the start (random and adversarial)."""
        return self.name != "lockstep"

    def describe(self) -> str:
        """``lockstep``, ``random:SEED`` or ``adversarial``: the text ``CUBEPY_SCHEDULE`` accepts."""
        return f"random:{self.seed}" if self.name == "random" else self.name


def parse(text: str) -> Schedule:
    """``lockstep``, ``random``, ``random:SEED`` or ``adversarial`` as a Schedule (``ValueError`` otherwise)."""
    name, colon, seed = config.schedule_text(text).partition(":")
    return Schedule(name, int(seed)) if colon else Schedule(name)


class InFlight:
    """Copies issued and not landed yet, in issue order; each lands through its callable."""

    __slots__ = ("copies",)

    def __init__(self) -> None:
        # (issuing lane, is a store, land) per copy
        self.copies: list[tuple[int, bool, Callable[[], None]]] = []

    def add(self, lane: int, store: bool, land: Callable[[], None]) -> None:
        """A copy (a store when ``store``) issued by ``lane`` that lands when ``land()`` runs."""
        self.copies.append((lane, store, land))

    def land(self, index: int) -> None:
        """Land the copy at ``index``."""
        _, _, land = self.copies.pop(index)
        land()

    def land_stores_of(self, bits: np.ndarray) -> None:
        """Land, in issue order, every store issued by one of the lanes of ``bits`` (a bulk-group wait)."""
        index = 0
        while index < len(self.copies):
            lane, store, _ = self.copies[index]
            if store and bits[lane]:
                self.land(index)
            else:
                index += 1

    def land_all(self) -> None:
        """Land every copy, in issue order."""
        while self.copies:
            self.land(0)


class Picker:
    """The choices of a schedule: which runnable group goes next and for how many steps."""

    def __init__(self, schedule: Schedule, chunk_seed: int) -> None:
        self.schedule = schedule
        self.rng = np.random.default_rng([schedule.seed, chunk_seed]) if schedule.name == "random" else None

    def land_eagerly(self) -> bool:
        """Whether copies land at issue (lockstep)."""
        return self.schedule.name == "lockstep"

    def choose(self, runnable: list[Group], copies: int) -> tuple[object | None, int]:
        """(group, steps) to run next, or (None, index) to land the copy at ``index`` of those in flight."""
        name = self.schedule.name
        if name == "lockstep":
            if not runnable:
                return None, 0
            # Groups that stopped at a join wait for the others, so that those reach it too and merge.
            pool = [group for group in runnable if not group.parked] or runnable
            chosen = min(pool, key=lambda group: group.order)
            chosen.parked = False
            return chosen, UNBOUNDED
        if name == "adversarial":
            if not runnable:
                return None, copies - 1  # the newest copy lands last of all that could
            return max(runnable, key=lambda group: (group.home, -group.order)), UNBOUNDED
        rng = self.rng
        assert rng is not None
        options = len(runnable) + (1 if copies else 0)
        pick = int(rng.integers(options))
        if pick == len(runnable):
            return None, int(rng.integers(copies))
        return runnable[pick], int(rng.integers(1, MAX_RANDOM_TURN + 1))
