"""Cube methods (``__expand_<name>`` twins) and ``@derive(CubeType, CubeLaunch)``."""

import attrs
import numpy as np
import pytest

import cubepy.frontend as cp
from cubepy.errors import LaunchError
from cubepy.frontend import Array, Comptime, CubeLaunch, CubeType, cube, derive, f32, testing, u32
from cubepy.ir import VarKind
from cubepy.runtime.args import ArrayArg
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.handle import Handle


@derive(CubeType, CubeLaunch)
@attrs.frozen
class Strided:
    """A 2-D strided layout: runtime stride, comptime transpose flag."""

    rows: u32
    stride: u32
    transposed: Comptime[bool] = False

    @cube
    def offset(self, row, col):
        if self.transposed:
            return col * self.stride + row
        return row * self.stride + col

    @cube
    def bump(self, amount):
        total = self.stride
        if amount > 0:
            total = total + amount
        return total

    def describe(self) -> str:
        return "T" if self.transposed else "N"


@derive(CubeType, CubeLaunch)
class Pair:
    data: Array[f32]
    layout: Strided


def test_derive_generates_expand_launch_and_compilation_arg():
    assert Strided.ExpandType.__name__ == "StridedExpand"
    assert Strided.Launch.__name__ == "StridedLaunch"
    assert Strided.CompilationArg.__name__ == "StridedCompilationArg"
    assert issubclass(Strided.ExpandType, Strided)
    assert isinstance(Strided, type) and issubclass(Strided, CubeType) and issubclass(Strided, cp.LaunchArg)


def test_compilation_args_compare_by_value():
    one = Strided.compilation_arg(Strided.Launch(4, 16, True))
    two = Strided.compilation_arg(Strided.Launch(8, 32, transposed=True))
    three = Strided.compilation_arg(Strided.Launch(8, 32))
    assert one == two and hash(one) == hash(two)
    assert one != three
    assert {one, two, three} == {one, three}


def test_launch_validates_each_field():
    with pytest.raises(LaunchError, match="field 'stride'"):
        Strided.compilation_arg(Strided.Launch(4, 2.5))
    with pytest.raises(TypeError, match="missing field 'stride'"):
        Strided.Launch(4)


def test_register_walks_runtime_fields_in_declaration_order():
    handle = Handle(None, np.zeros(8, np.float32), np.float32, (8,))
    bindings = Bindings()
    launch = Pair.Launch(ArrayArg(handle), Strided.Launch(3, 5, True))
    Pair.register(launch, bindings)
    assert len(bindings.buffers) == 1
    assert [int(v) for v in bindings.scalars] == [3, 5]
    assert all(isinstance(v, np.uint32) for v in bindings.scalars)


def test_method_twins_are_set_under_both_names():
    twin = getattr(Strided, "__expand_offset")
    assert twin is getattr(Strided, "_Strided__expand_offset")
    assert callable(twin)


def test_expand_method():
    plain = testing.expand_method(Strided, "offset", Strided, u32, u32)
    assert plain.ops == ["mul", "add"]
    transposed = testing.expand_method(Strided, "offset", Strided.CompilationArg(u32_arg(), u32_arg(), True), u32, u32)
    assert transposed.ops == ["mul", "add"]
    assert [p.name for p in plain.definition.params] == ["self.rows", "self.stride", "arg0", "arg1"]


def u32_arg():
    return cp.ScalarCompilationArg("u32")


def test_method_with_runtime_branch():
    expansion = testing.expand_method(Strided, "bump", Strided, u32)
    assert expansion.ops == ["gt", "assign", "if", "add", "assign"]


@cube
def uses_layout(pair: Pair, row: u32):
    layout = pair.layout
    pair.data[layout.offset(row, 1)] = 1.0
    return layout.describe()


def test_methods_dispatch_on_expand_values_and_plain_helpers_work():
    expansion = testing.expand(uses_layout, Pair, u32)
    assert expansion.ops == ["mul", "add", "index_assign"]
    assert expansion.outputs == ("N",)


@cube
def builds_inside(n: u32):
    layout = Strided(n, 4, transposed=True)
    return layout.offset(1, 2), layout.stride


def test_constructing_a_derived_type_inside_a_kernel():
    expansion = testing.expand(builds_inside, u32)
    offset, stride = expansion.outputs
    assert str(stride.type) == "u32" and stride.kind is VarKind.CONSTANT  # the field's type converts literals
    assert expansion.ops == ["mul", "add"]


def test_constructing_outside_a_kernel_is_the_plain_class():
    value = Strided(1, 2)
    assert type(value) is Strided and value.stride == 2


@cube
def mutable_struct(n: u32):
    layout = Strided(n, 4)
    for i in range(n):
        layout.stride += i
    return layout.stride


def test_derived_values_become_mutable_field_by_field():
    expansion = testing.expand(mutable_struct, u32)
    (stride,) = expansion.outputs
    assert stride.kind is VarKind.MUT
    assert "range_loop" in expansion.ops


class Plain:
    def __init__(self, scale):
        self.scale = scale

    @cube
    def scaled(self, x):
        return x * self.scale

    @cube
    def __private_helper(self, x):
        return x + 1

    @cube
    def public(self, x):
        return self.__private_helper(x) + Plain.__expand_scaled(None, self, x)


def test_methods_on_plain_classes_and_name_mangling():
    @cube
    def run(x: f32):
        return Plain(2.0).public(x)

    # contract=False: this is about which methods run, not about fusing their mul and add
    assert testing.expand(run, f32, contract=False).ops == ["add", "mul", "add"]
    assert testing.expand(run, f32).ops == ["add", "fma"]


class WithStatic:
    @cube
    @staticmethod
    def make(x):
        return x * 2

    @cube
    def use(self, x):
        return WithStatic.make(x) + self.make(x)


def test_static_cube_functions():
    assert callable(getattr(WithStatic, "__expand_make"))  # no receiver: __expand_make(scope, *args)

    @cube
    def run(x: u32):
        return WithStatic().use(x)

    assert testing.expand(run, u32).ops == ["mul", "mul", "add"]


@cube
def mutate_nested_field(pair: Pair, n: u32):
    for i in range(n):
        pair.layout.stride += i
    pair.data[0] = f32(pair.layout.stride)


def test_structs_with_buffers_promote_their_numeric_fields():
    expansion = testing.expand(mutate_nested_field, Pair, u32)
    cast = [inst for inst in expansion.instructions if inst.op == "cast"][-1]
    assert cast.operation.input.kind is VarKind.MUT
    assert expansion.ops[-1] == "index_assign"
