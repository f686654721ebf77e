"""cubepy.testing.expand / expand_method: the inspection surface of docs/reference/cubepy.md."""

import pytest

from cubepy.errors import CubeError
from cubepy.frontend import Array, Line, cube, f32, testing, u32
from tests.frontend.test_derive import Strided


@cube
def body(a: Array[f32], pair, n: u32):
    x, y = pair
    if n > 2:
        a[0] = x * y
    return x + y, 3


def test_expansion_surface():
    expansion = testing.expand(body, Array[f32], (f32, f32), u32)
    assert expansion.ops == ["gt", "if", "mul", "index_assign", "add"]
    for inst in expansion.instructions:
        assert inst.op == inst.operation.name
        assert inst.outputs == (() if inst.out is None else (inst.out,))
    total, three = expansion.outputs
    assert str(total.type) == "f32" and three == 3
    assert "if %" in expansion.ir and str(expansion) == expansion.ir
    assert expansion.text.startswith("kernel body")
    assert [p.name for p in expansion.definition.params] == ["arg0", "arg1.0", "arg1.1", "arg2"]


def test_line_specs_and_comptime_keywords():
    @cube
    def scale(line, k):
        return line * k

    expansion = testing.expand(scale, Line[f32, 4], k=2.0)
    assert str(expansion.outputs[0].type) == "f32x4"


def test_methods_through_the_class_attribute_and_the_twin():
    through_attribute = testing.expand(Strided.offset, Strided, u32, u32)
    through_twin = testing.expand_method(Strided, "offset", Strided, u32, u32)
    assert through_attribute.ops == through_twin.ops == ["mul", "add"]


def test_expand_rejects_plain_functions():
    with pytest.raises(CubeError, match="expects a @cube function"):
        testing.expand(lambda: None)
    with pytest.raises(CubeError, match="no cube method"):
        testing.expand_method(Strided, "describe", Strided)
