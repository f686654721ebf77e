"""Memory operations: indexing, lanes of lines, buffer metadata and atomics."""

from __future__ import annotations

import attrs

from cubepy.ir.ops.base import NamedOperation, Operation
from cubepy.ir.variable import Variable

METADATA_KINDS = frozenset({"len", "buffer_len", "shape", "stride", "rank"})
ATOMIC_OPS = frozenset({"add", "sub", "max", "min", "and", "or", "xor", "exchange", "load", "store"})


@attrs.frozen
class Index(Operation):
    """out = memory[index]; ``checked`` reads give 0 out of bounds (launch), unchecked ones are raw.

    ``speculative``: the frontend hoisted this checked read out of a short-circuit (``i < n and a[i] > 0``),
    so it also runs on lanes Python would not have evaluated it on; out of bounds there is not a bug (the
    interp's sanitizer does not report it).  Code generation ignores it.
    """

    NAME = "index"
    memory: Variable
    index: Variable
    checked: bool = False
    speculative: bool = False


@attrs.frozen
class IndexAssign(Operation):
    """memory[index] = value; ``checked`` writes out of bounds are dropped."""

    NAME = "index_assign"
    memory: Variable
    index: Variable
    value: Variable
    checked: bool = False


@attrs.frozen
class ExtractLane(Operation):
    """out = line[lane]."""

    NAME = "extract_lane"
    line: Variable
    lane: Variable


@attrs.frozen
class InsertLane(Operation):
    """target[lane] = value, where target is a mutable line local (no result)."""

    NAME = "insert_lane"
    target: Variable
    lane: Variable
    value: Variable


@attrs.frozen
class Metadata(NamedOperation):
    """out = a buffer's len, buffer_len, rank, or shape/stride of dimension ``dim`` (u32)."""

    memory: Variable
    dim: Variable | None = None


@attrs.frozen
class AtomicOp(NamedOperation):
    """out = old memory[index]; memory[index] = old op value (load/store/exchange as named)."""

    memory: Variable
    index: Variable
    value: Variable | None = None

    @property
    def name(self) -> str:
        """``atomic_<op>``."""
        return f"atomic_{self.op}"


@attrs.frozen
class AtomicCompareExchange(Operation):
    """out = old memory[index]; if old == cmp: memory[index] = new."""

    NAME = "atomic_compare_exchange"
    memory: Variable
    index: Variable
    cmp: Variable
    new: Variable
