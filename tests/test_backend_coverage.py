"""Every IR operation x every back end: implemented, or declared unsupported with the reason its error gives."""

from __future__ import annotations

import pytest

from cubepy.compiler.lower import LLVM
from cubepy.compiler.targets.host import CPU
from cubepy.ir.ops import OpRecord, OpTable, all_operations
from cubepy.runtime.interp.registry import INTERP

BACKENDS = {"interp": INTERP, "llvm": LLVM, "cpu": CPU}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("cls", all_operations(), ids=lambda cls: cls.RECORD.name)
def test_operation_is_covered(backend, cls):
    table = BACKENDS[backend].load()
    if table.get(cls) is None:
        reason = table.unsupported_reasons.get(cls)
        assert reason, f"op {cls.RECORD.name} is neither implemented nor declared unsupported by back end {backend}"


def test_an_unsupported_op_names_the_back_end_and_the_reason():
    class Strange:
        RECORD = OpRecord("strange", "test")

    table = OpTable("toy")
    table.unsupported(Strange, reason="toys have no strange ops")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="^op strange is not supported by back end toy: toys have no strange ops$"):
        table.require(Strange, RuntimeError)  # type: ignore[arg-type]


def test_a_missing_implementation_is_named_too():
    class Other:
        RECORD = OpRecord("other", "test")

    assert OpTable("toy").missing_message(Other) == (  # type: ignore[arg-type]
        "op other is not supported by back end toy: no implementation is registered"
    )


def test_implementing_an_op_twice_is_refused():
    table = OpTable("toy")
    cls = all_operations()[0]
    table.implements(cls)(lambda *args: None)
    with pytest.raises(ValueError, match="implemented twice"):
        table.implements(cls)(lambda *args: None)


@pytest.mark.parametrize("backend", sorted(name for name, table in BACKENDS.items() if table.by_family))
def test_every_handler_sits_in_a_module_listed_for_its_family(backend):
    """A lookup imports only its family's modules first: a handler elsewhere would cost the full import."""
    table = BACKENDS[backend].load()
    for cls, handler in table.implementations.items():
        listed = table.by_family.get(cls.RECORD.family, ())
        assert handler.__module__ in listed, f"{cls.RECORD.name} is handled in {handler.__module__}, not in {listed}"


def test_a_lookup_imports_its_family_first_and_everything_when_it_misses(monkeypatch):
    import importlib

    imported: list[str] = []
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name))

    class Known:
        RECORD = OpRecord("known", "alpha")

    class Unknown:
        RECORD = OpRecord("unknown", "beta")

    table = OpTable("toy", modules=("m.alpha", "m.beta"), by_family={"alpha": ("m.alpha",), "beta": ("m.beta",)})
    table.implementations[Known] = print  # type: ignore[index]
    assert table.get(Known) is print  # type: ignore[arg-type]
    assert imported == []
    assert table.get(Unknown) is None  # type: ignore[arg-type]
    assert imported == ["m.beta", "m.alpha", "m.beta"]
