"""What one IR operation is, declared once: its ``OpRecord``.

Every operation class carries a record: its name (the one name used by ``inst.op``, the printer, the
back ends and error messages), the element kind its operands need, how its result type follows from
its operands, its effects (pure or not, which memory operands it reads or writes) and the verifier
rules that only it has.  The verifier, the frontend's typing, the passes and the printer read the
records; back ends register implementations per operation class (:class:`OpTable`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, TypeVar

import attrs

from cubepy.errors import CompileError

if TYPE_CHECKING:
    from cubepy.ir.kernel import KernelDefinition
    from cubepy.ir.ops.base import Operation
    from cubepy.ir.ops.lanewise import Semantics
    from cubepy.ir.scope import Instruction
    from cubepy.ir.types import Type
    from cubepy.ir.variable import Variable

ElemKind = Literal["float", "int", "bool", "number", "any"]


class Checker(Protocol):
    """What an op-specific verifier rule may use (implemented by the verifier)."""

    kernel: KernelDefinition | None

    def fail(self, rule: str, inst: Instruction | None, detail: str) -> NoReturn:
        """Raise ``VerifyError`` for ``rule`` at ``inst``."""

    def need_out(self, inst: Instruction) -> Variable:
        """The instruction's result variable (a ``missing-out`` failure when absent)."""

    def same_type(self, inst: Instruction, what: str, got: Type, expected: Type) -> None:
        """A ``type-mismatch`` failure unless ``got == expected``."""

    def int_scalar(self, inst: Instruction, what: str, var: Variable) -> None:
        """A ``bad-index`` failure unless ``var`` is a scalar integer."""


# An op-specific rule receives its own operation class (hence Any for the operation).
Check = Callable[[Checker, "Instruction", Any], None]
# The result type as a function of the operation (its operands); ``GIVEN`` when the instruction's own
# result variable decides it (a cast); ``None`` when the operation has no result.
ResultRule = Callable[["Operation"], "Type"]


class _Given:
    def __repr__(self) -> str:
        return "GIVEN"


GIVEN = _Given()


@attrs.frozen
class OpRecord:
    """The declaration of one IR operation."""

    name: str
    family: str
    result: ResultRule | _Given | None = None
    operand_kind: ElemKind = "any"
    kind_of: tuple[str, ...] = ()  # operand fields whose element kind must be ``operand_kind``
    same_type: tuple[str, ...] = ()  # operand fields that must have the result's type
    pure: bool = False  # no effect but its result: removable when unread
    foldable: bool = False  # exact everywhere: ``fold_constants`` evaluates literal operands by ``semantics``
    reads: tuple[str, ...] = ()  # memory operand fields read
    writes: tuple[str, ...] = ()  # memory operand fields written
    checks: tuple[Check, ...] = ()
    doc: str = ""
    # What the operation computes (``cubepy.ir.ops.lanewise``): the interp and every fold call it.
    semantics: Semantics | None = None
    # Why a pure operation has no ``semantics`` (an operation with effects needs no reason).
    no_semantics: str = ""
    # The math library function it lowers to: libdevice's ``__nv_<libdevice>f`` (f32; f16/bf16 through f32)
    # and ``__nv_<libdevice>`` (f64), the C library's ``<c_library>f`` / ``<c_library>`` on the host; a
    # ``libdevice`` name without ``c_library`` is composed by the host target (``targets/host_math.py``).
    libdevice: str = ""
    c_library: str = ""

    @property
    def has_result(self) -> bool:
        """Whether the operation produces a value."""
        return self.result is not None


_REGISTRY: dict[str, type[Operation]] = {}
OpClass = TypeVar("OpClass", bound="type[Operation]")


def declare(record: OpRecord) -> Callable[[OpClass], OpClass]:
    """Class decorator: attach ``record`` to an operation class and register it by name."""

    def attach(cls: OpClass) -> OpClass:
        if record.name in _REGISTRY:
            raise ValueError(f"IR operation {record.name!r} is declared twice")
        cls.RECORD = record if record.doc else attrs.evolve(record, doc=(cls.__doc__ or "").strip())
        _REGISTRY[record.name] = cls
        return cls

    return attach


def derive(base: type[Operation], class_name: str, record: OpRecord, module: str) -> type[Operation]:
    """A member of an operation family: a subclass of ``base`` with no fields of its own."""
    cls = type(
        class_name,
        (base,),
        {"__slots__": (), "__module__": module, "__qualname__": class_name, "__doc__": record.doc or base.__doc__},
    )
    return declare(record)(cls)


def lookup(name: str) -> type[Any]:
    """The operation class named ``name`` (KeyError with the known names otherwise)."""
    _load_families()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no IR operation named {name!r}") from None


def all_operations() -> tuple[type[Operation], ...]:
    """Every declared operation class, in declaration order."""
    _load_families()
    return tuple(_REGISTRY.values())


# Modules of this package that hold no operations; every other module is the family of its name (an
# operation's ``RECORD.family``), so a new family module is found without being listed anywhere.
_SHARED_MODULES = frozenset({"__init__", "base", "lanewise", "record"})
FAMILIES = tuple(
    sorted(info.name for info in pkgutil.iter_modules([os.path.dirname(__file__)]) if info.name not in _SHARED_MODULES)
)


def _load_families() -> None:
    for family in FAMILIES:
        importlib.import_module(f"cubepy.ir.ops.{family}")


# -- back-end registration ---------------------------------------------------------------------------
Impl = TypeVar("Impl", bound=Callable[..., object])


_TABLES: weakref.WeakSet[OpTable] = weakref.WeakSet()


def _reset_locks_after_fork() -> None:
    # A fork copies a lock another thread held; that thread does not exist in the child.
    for table in list(_TABLES):
        table._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_after_fork)


class OpTable:
    """A back end's implementations, keyed by operation class.

    ``modules`` are imported on first lookup, so a back end's table is complete however its modules
    were imported before.  ``by_family`` (op family -> the modules holding it) lets a lookup import only
    its operation's family first, so a kernel's first launch imports what it uses; a lookup that still
    misses imports every module.  An operation may instead be declared unsupported, with the reason its
    error gives.
    """

    def __init__(
        self, backend: str, modules: Iterable[str] = (), by_family: Mapping[str, tuple[str, ...]] | None = None
    ) -> None:
        self.backend = backend
        self.modules = tuple(modules)
        self._loaded = not self.modules
        self._families_loaded: set[str] = set()
        self.by_family = dict(by_family or {})
        self.implementations: dict[type[Operation], Callable[..., object]] = {}
        self.unsupported_reasons: dict[type[Operation], str] = {}
        # Reentrant: a module imported while loading may itself look an operation up.
        self._lock = threading.RLock()
        self._filling = False
        _TABLES.add(self)

    def implements(self, *op_classes: type[Operation]) -> Callable[[Impl], Impl]:
        """Decorator: register the function as the implementation of every class in ``op_classes``."""

        def register(function: Impl) -> Impl:
            for cls in op_classes:
                if cls in self.implementations:
                    raise ValueError(f"back end {self.backend}: {cls.RECORD.name} is implemented twice")
                self.implementations[cls] = function
            return function

        return register

    def unsupported(self, *op_classes: type[Operation], reason: str) -> None:
        """Declare that this back end does not run ``op_classes``, and why."""
        for cls in op_classes:
            self.unsupported_reasons[cls] = reason

    def load(self) -> OpTable:
        """Import the modules that fill this table (once; thread-safe)."""
        if not self._loaded:
            with self._lock:
                # Marked loaded only once filled: another thread seeing ``_loaded`` must find every entry.
                if not self._loaded and not self._filling:
                    self._filling = True  # a nested load from an importing module must not start over
                    try:
                        self._fill()
                    finally:
                        self._filling = False
                    self._loaded = True
        return self

    def _fill(self) -> None:
        """Register every implementation (subclasses fill the table their own way)."""
        for module in self.modules:
            importlib.import_module(module)

    def get(self, cls: type[Operation]) -> Callable[..., object] | None:
        """The implementation of ``cls``, or None."""
        found = self.implementations.get(cls)
        if found is not None or self._loaded:
            return found
        family = cls.RECORD.family
        if family in self.by_family and family not in self._families_loaded:
            with self._lock:
                if family not in self._families_loaded:
                    for module in self.by_family[family]:
                        importlib.import_module(module)
                    self._families_loaded.add(family)  # only after its modules registered
            found = self.implementations.get(cls)
            if found is not None:
                return found
        return self.load().implementations.get(cls)

    def require(self, cls: type[Operation], error: type[Exception] = CompileError) -> Callable[..., object]:
        """The implementation of ``cls``; ``error`` naming the reason when there is none."""
        found = self.get(cls)
        if found is None:
            raise error(self.missing_message(cls))
        return found

    def missing_message(self, cls: type[Operation]) -> str:
        """``op X is not supported by back end Y: reason``."""
        reason = self.unsupported_reasons.get(cls, "no implementation is registered")
        return f"op {cls.RECORD.name} is not supported by back end {self.backend}: {reason}"

    def coverage(self) -> Iterator[tuple[type[Operation], str | None]]:
        """Each declared operation with None (implemented) or the reason it is not."""
        self.load()
        for cls in all_operations():
            if cls in self.implementations:
                yield cls, None
            else:
                yield cls, self.unsupported_reasons.get(cls, "")
