"""The mbarrier state machine: arrival counts, transaction bytes and phases (PTX ``mbarrier``).

One implementation for the interp and cpu runtimes: the lockstep interp (``interp.tma_exec``) keeps one row per
cube of its chunk; the compiled cpu runtime keeps one row in the barrier's slot of the cube's shared block
and calls these functions from the host code (``cubepy.runtime.cpu.emulation``).

* A row holds whether the barrier was initialised, its arrival count, the arrivals still pending in the
  current phase, a signed transaction count (bytes expected minus bytes delivered) and the number of
  completed phases.  A phase completes when no arrival is pending and the transaction count is zero;
  the pending count then resets to the arrival count.  A copy may complete before its bytes are
  expected (CubeCL issues the load before ``arrive_and_expect_tx``), so the count may go negative.
* A token is the index of the phase its arrival belonged to; ``wait(token)`` is done once that phase
  completed, ``wait_parity(p)`` once the current phase's parity differs from ``p`` (the hardware rule).

Checks (PTX ISA, ``mbarrier``), each a ``BarrierFault`` of its ``SanitizerKind``:

* ``TX_COUNT_RANGE``: the transaction count must stay in [-(2^20 - 1), 2^20 - 1] after every expect-tx
  and complete-tx, and one expect-tx operand must lie in [0, 2^20 - 1].  A count that is negative for a
  while (a copy completing before its ``expect_tx``) is legal and not reported.
* ``WRONG_PARITY``: a parity operand that is neither 0 nor 1 (the ISA allows only those); and, through
  ``stuck_parity_wait``, a parity wait that can never complete because it names a phase nothing has
  reached: no arrival and no transaction byte of the current phase, while every unit that could arrive
  waits.  The ISA can only name the current or the immediately preceding phase with one bit; waiting
  for a phase the program never started is the signature of a parity one phase ahead (a producer that
  starts a fresh "empty" barrier's wait with parity 0 instead of 1, a phase bit flipped twice).
  A wait on a phase that did start but lacks arrivals or bytes stays a ``BARRIER_DEADLOCK``.
* ``BARRIER_OVERFLOW``: one arrive operation with more arrivals than the current phase still waits for.
  Arrivals of several units beyond the phase's count are legal: they complete the next phases.

* ``OUT_OF_BOUNDS``: an element index outside an array of barriers (``index_problem``); always checked, since on
  a GPU it names some other shared memory.

An array of n barriers is n rows; messages name its element ``name[i]`` (``element_name``).

Misuse raises ``BarrierFault`` with the index (into the caller's arrays) of the offending unit; each
runtime turns it into its ``SanitizerError`` naming the unit and the source line.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from cubepy.errors import SanitizerKind

MAX_ARRIVAL_COUNT = (1 << 20) - 1  # mbarrier.init's count range is [1, 2^20 - 1]
MAX_TX_COUNT = (1 << 20) - 1  # the tx-count range is [-(2^20 - 1), 2^20 - 1]
FIELDS = 5  # initialized, arrival_count, pending, tx, phase (int64 each)
ROW_BYTES = FIELDS * 8


def element_name(name: str, index: int, indexed: bool) -> str:
    """How messages name element ``index`` of the barrier array ``name`` (just ``name`` for a single barrier)."""
    return f"{name}[{index}]" if indexed else name


def index_problem(name: str, index: int, count: int) -> str:
    """The message of an element index outside the array of ``count`` barriers ``name``."""
    return f"barrier index {index} is outside {name}, an array of {count} barriers"


class BarrierFault(Exception):
    """A barrier bug of ``kind`` by the unit at ``index`` of the arrays passed in."""

    def __init__(self, kind: SanitizerKind, message: str, index: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.index = index


class BarrierState:
    """One barrier's state in a number of cubes: column views of an ``(cubes, FIELDS)`` int64 table."""

    __slots__ = ("table", "initialized", "arrival_count", "pending", "tx", "phase")

    def __init__(self, table: np.ndarray) -> None:
        if table.dtype != np.int64 or table.ndim != 2 or table.shape[1] != FIELDS:
            raise ValueError(f"a barrier table is (cubes, {FIELDS}) int64, not {table.shape} {table.dtype}")
        self.table = table
        self.initialized = table[:, 0]  # 0 or 1
        self.arrival_count = table[:, 1]
        self.pending = table[:, 2]
        self.tx = table[:, 3]  # bytes expected minus bytes delivered
        self.phase = table[:, 4]  # phases completed so far

    @classmethod
    def fresh(cls, cubes: int) -> BarrierState:
        """Uninitialised barriers for ``cubes`` cubes."""
        return cls(np.zeros((cubes, FIELDS), dtype=np.int64))

    def settle(self) -> None:
        """Complete every phase whose arrivals and transaction bytes are all in."""
        done = (self.initialized != 0) & (self.pending == 0) & (self.tx == 0)
        if done.any():
            self.phase[done] += 1
            self.pending[done] = self.arrival_count[done]

    def untouched(self, cube: int) -> bool:
        """Whether the current phase of ``cube`` has seen no arrival and no transaction byte yet."""
        return bool(self.pending[cube] == self.arrival_count[cube] and self.tx[cube] == 0)

    def describe(self, cube: int) -> str:
        """The phase, pending arrivals and outstanding bytes of ``cube``, for messages."""
        return (
            f"phase {self.phase[cube]} has {self.pending[cube]} of {self.arrival_count[cube]} arrivals "
            f"pending and {self.tx[cube]} transaction bytes outstanding"
        )


def initialize(state: BarrierState, name: str, cubes: np.ndarray, counts: np.ndarray) -> None:
    """``mbarrier.init`` by each elected unit: ``counts[k]`` arrivals per phase in cube ``cubes[k]``."""
    for k, (cube, count) in enumerate(zip(cubes.tolist(), counts.tolist())):
        if not 1 <= count <= MAX_ARRIVAL_COUNT:
            raise BarrierFault(
                SanitizerKind.BARRIER_MISUSE, f"barrier arrival count {count} is outside [1, {MAX_ARRIVAL_COUNT}]", k
            )
        if state.initialized[cube] and state.arrival_count[cube] != count and state.phase[cube] == 0:
            raise BarrierFault(
                SanitizerKind.BARRIER_MISUSE,
                f"two units initialise {name} with different arrival counts ({state.arrival_count[cube]} and {count})",
                k,
            )
        state.initialized[cube] = 1
        state.arrival_count[cube] = count
        state.pending[cube] = count
        state.tx[cube] = 0
        state.phase[cube] = 0


def require_initialized(state: BarrierState, name: str, cubes: np.ndarray) -> None:
    """Fault on the first unit whose cube never initialised the barrier."""
    missing = state.initialized[cubes] == 0
    if missing.any():
        raise BarrierFault(
            SanitizerKind.BARRIER_MISUSE,
            f"{name} is used before barrier_init (no unit of this cube was elected to initialise it)",
            int(np.argmax(missing)),
        )


def arrive(state: BarrierState, name: str, cubes: np.ndarray, arrivals: np.ndarray, tx_bytes: np.ndarray) -> np.ndarray:
    """Each unit expects ``tx_bytes[k]`` then arrives ``arrivals[k]`` times; each unit's token (its phase)."""
    require_initialized(state, name, cubes)
    bad = (arrivals < 1) | (arrivals > MAX_ARRIVAL_COUNT)
    if bad.any():
        k = int(np.argmax(bad))
        raise BarrierFault(
            SanitizerKind.BARRIER_MISUSE,
            f"arrival count {arrivals[k]} on {name} is outside [1, {MAX_ARRIVAL_COUNT}]",
            k,
        )
    _check_expect_operand(name, tx_bytes)
    totals = np.zeros_like(state.pending)
    np.add.at(totals, cubes, arrivals)
    if (totals <= state.pending).all():  # no phase can complete before the last of these arrivals
        tokens = state.phase[cubes].copy()
        _add_tx(state, name, cubes, tx_bytes)
        state.pending -= totals
        state.settle()
        return cast(np.ndarray, tokens)
    # Some cube gets more arrivals than its phase still waits for: apply them one unit at a time (in order;
    # the hardware order is unspecified), so phases complete in between as they would on the GPU.
    tokens = np.empty(cubes.size, dtype=np.int64)
    for k, cube in enumerate(cubes.tolist()):
        if arrivals[k] > state.pending[cube]:
            raise BarrierFault(
                SanitizerKind.BARRIER_OVERFLOW,
                f"{arrivals[k]} arrivals on {name} but its phase waits for only "
                f"{state.pending[cube]} more; {state.describe(cube)}",
                k,
            )
        tokens[k] = state.phase[cube]
        _add_tx(state, name, cubes[k : k + 1], tx_bytes[k : k + 1], first=k)
        state.pending[cube] -= arrivals[k]
        state.settle()
    return tokens


def expect_tx(state: BarrierState, name: str, cubes: np.ndarray, tx_bytes: np.ndarray) -> None:
    """``mbarrier.expect_tx``: raise the current phase's expected transaction bytes."""
    require_initialized(state, name, cubes)
    _check_expect_operand(name, tx_bytes)
    _add_tx(state, name, cubes, tx_bytes)
    state.settle()


def complete_tx(state: BarrierState, name: str, cubes: np.ndarray, delivered: np.ndarray, settle: bool = True) -> None:
    """A copy's ``delivered[k]`` bytes land for cube ``cubes[k]`` (PTX complete-tx), then phases settle.

    Copies that land together (the lockstep schedule lands a whole issue at once) pass ``settle=False``
    and settle once after the last of them.
    """
    _add_tx(state, name, cubes, -np.asarray(delivered, dtype=np.int64))
    if settle:
        state.settle()


def _check_expect_operand(name: str, tx_bytes: np.ndarray) -> None:
    bad = (tx_bytes < 0) | (tx_bytes > MAX_TX_COUNT)
    if bad.any():
        k = int(np.argmax(bad))
        raise BarrierFault(
            SanitizerKind.TX_COUNT_RANGE,
            f"expect_tx of {tx_bytes[k]} bytes on {name} is outside the PTX range [0, {MAX_TX_COUNT}]",
            k,
        )


def _add_tx(state: BarrierState, name: str, cubes: np.ndarray, change: np.ndarray, first: int = 0) -> None:
    """Add ``change[k]`` to the transaction count of cube ``cubes[k]``; fault when a count leaves its range.

    Changes are applied in order, so the fault names the operation (``first + k``) that took the count out.
    """
    np.add.at(state.tx, cubes, change)
    if (np.abs(state.tx[cubes]) <= MAX_TX_COUNT).all():
        return
    before = state.tx.copy()
    np.subtract.at(before, cubes, change)
    running = before
    for k, cube in enumerate(cubes.tolist()):
        running[cube] += change[k]
        if abs(running[cube]) > MAX_TX_COUNT:
            raise BarrierFault(
                SanitizerKind.TX_COUNT_RANGE,
                f"the transaction count of {name} becomes {running[cube]} bytes, outside the PTX range "
                f"[-{MAX_TX_COUNT}, {MAX_TX_COUNT}] (expected minus delivered bytes of one phase); {state.describe(cube)}",
                first + k,
            )


def token_done(state: BarrierState, name: str, cubes: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Per unit, whether the phase its token names has completed."""
    require_initialized(state, name, cubes)
    return cast(np.ndarray, state.phase[cubes] > tokens)


def parity_done(state: BarrierState, name: str, cubes: np.ndarray, phases: np.ndarray) -> np.ndarray:
    """Per unit, whether the current phase's parity differs from the parity ``phases`` (each 0 or 1)."""
    require_initialized(state, name, cubes)
    bad = (phases != 0) & (phases != 1)
    if bad.any():
        k = int(np.argmax(bad))
        raise BarrierFault(
            SanitizerKind.WRONG_PARITY,
            f"phase parity {phases[k]} on {name}: a parity is 0 or 1 (pass phase % 2, not the phase count)",
            k,
        )
    return cast(np.ndarray, (state.phase[cubes] & 1) != phases)


def stuck_parity_wait(state: BarrierState, name: str, cube: int) -> str | None:
    """Why a parity wait of ``cube`` that nothing can complete any more has the wrong parity, or None.

    Call it once every unit that could arrive waits: it names the wrong parity when the awaited (current)
    phase has not been reached by any arrival or byte; a phase left short of its arrivals or bytes is a
    plain deadlock (None).  A parity wait that is not done waits for the current phase, so its parity is
    the current phase's.
    """
    if not state.untouched(cube):
        return None
    phase = int(state.phase[cube])
    parity = phase & 1
    if phase == 0:
        hint = (
            "no phase has completed yet; a wait that must pass on a fresh barrier (a producer waiting for an "
            f"empty stage) waits with parity {1 - parity}"
        )
    else:
        hint = f"phase {phase - 1} (parity {1 - parity}) completed; a wait for it passes with parity {1 - parity}"
    return (
        f"wait_parity({parity}) on {name} can never complete (a deadlock): it waits for phase {phase}, which no "
        f"unit has arrived at and no copy has reached; {hint}"
    )
