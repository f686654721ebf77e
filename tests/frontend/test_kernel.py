"""The Kernel object: parameters, compilation arguments, registration, definition, launch plumbing, identity."""

import functools

import numpy as np
import pytest

import cubepy.frontend as cp
from cubepy import ir
from cubepy.errors import CubeError, LaunchError
from cubepy.frontend import ABSOLUTE_POS, Array, Comptime, Line, Tensor, cube, f32, hooks, u32
from cubepy.runtime.args import ArrayArg, ScalarArg, TensorArg
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.handle import Handle


def handle(dtype=np.float32, shape=(8,)):
    return Handle(None, np.zeros(int(np.prod(shape)), dtype), dtype, shape)


@cube
def axpy_one(a, x, y):
    return a * x + y


@cube(launch=True)
def axpy(a: f32, x: Array[f32], y: Array[f32], out: Array[f32]):
    if ABSOLUTE_POS < out.len():
        out[ABSOLUTE_POS] = axpy_one(a, x[ABSOLUTE_POS], y[ABSOLUTE_POS])


@cube(launch=True, launch_unchecked=True)
def scaled(out: Tensor[Line[f32]], factor: f32, repeat: Comptime[int]):
    for _ in cp.unroll(range(repeat)):
        out[ABSOLUTE_POS] = out[ABSOLUTE_POS] * factor


@cube(launch_unchecked=True)
def unchecked_only(out: Array[u32]):
    out[0] = 1


def args():
    return (2.0, ArrayArg(handle()), ArrayArg(handle()), ArrayArg(handle()))


def test_params_in_declaration_order():
    assert axpy.name == "axpy"
    assert [(p.name, p.index, p.is_comptime) for p in scaled.params] == [
        ("out", 0, False),
        ("factor", 1, False),
        ("repeat", 2, True),
    ]


def test_compilation_args_are_hashable_and_value_equal():
    first = axpy.compilation_args(args())
    second = axpy.compilation_args(args())
    assert first == second and hash(first) == hash(second)
    lined = scaled.compilation_args((TensorArg(handle(shape=(2, 4)), line_size=4), 1.0, 3))
    assert lined[0].line_size == 4 and lined[2] == 3


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            (2.0, ArrayArg(handle(np.float64)), ArrayArg(handle()), ArrayArg(handle())),
            r"parameter 'x' \(argument index 1\): expected f32 elements .* dtype float64",
        ),
        (("two", ArrayArg(handle()), ArrayArg(handle()), ArrayArg(handle())), "parameter 'a' .* got str"),
        ((2.0, ArrayArg(handle(), 4), ArrayArg(handle()), ArrayArg(handle())), "takes line_size=1"),
        ((2.0, handle(), ArrayArg(handle()), ArrayArg(handle())), "expected cp.ArrayArg"),
        ((2.0, ArrayArg(handle())), "takes 4 arguments"),
    ],
)
def test_compilation_args_name_the_bad_parameter(bad, match):
    with pytest.raises(LaunchError, match=match):
        axpy.compilation_args(bad)


def test_scalar_values_must_be_representable():
    @cube(launch=True)
    def takes_u32(n: u32, out: Array[u32]):
        out[0] = n

    buffer = ArrayArg(handle(np.uint32))
    with pytest.raises(LaunchError, match="out of range for u32"):
        takes_u32.compilation_args((-1, buffer))
    with pytest.raises(LaunchError, match="expected an integer"):
        takes_u32.compilation_args((1.5, buffer))
    with pytest.raises(LaunchError, match="ScalarArg of f32"):
        takes_u32.compilation_args((ScalarArg(1, cp.f32), buffer))
    assert takes_u32.compilation_args((ScalarArg(3, cp.u32), buffer))[0] == cp.ScalarCompilationArg("u32")


def test_comptime_values_must_be_hashable():
    with pytest.raises(LaunchError, match="parameter 'repeat' .* hashable"):
        scaled.compilation_args((TensorArg(handle()), 1.0, [1]))


def test_register_binds_in_parameter_order():
    bindings = Bindings()
    scaled.register((TensorArg(handle(shape=(2, 4))), 1.5, 2), bindings)
    assert len(bindings.buffers) == 1 and bindings.buffers[0].shape == (2, 4)
    assert bindings.scalars == [np.float32(1.5)] and isinstance(bindings.scalars[0], np.float32)


def test_define_builds_a_verified_definition():
    definition = axpy.define(axpy.compilation_args(args()), (32, 1, 1), True)
    assert isinstance(definition, ir.KernelDefinition)
    assert [(p.name, p.role, p.slot) for p in definition.params] == [
        ("a", "scalar", 0),
        ("x", "array", 0),
        ("y", "array", 1),
        ("out", "array", 2),
    ]
    assert definition.checked and definition.cube_dim == (32, 1, 1)
    assert definition.source_file == __file__
    assert all(inst.loc is not None and inst.loc.file == __file__ for inst in ir.walk(definition.body))


def test_comptime_parameters_specialize():
    comp = scaled.compilation_args((TensorArg(handle(shape=(2, 4)), line_size=4), 1.0, 3))
    definition = scaled.define(comp, (16, 1, 1), False)
    assert [inst.op for inst in ir.walk(definition.body)].count("mul") == 3
    assert str(definition.params[0].var.type) == "f32x4"


class FakeClient:
    def __init__(self):
        self.calls = []

    def launch(self, kernel, cube_count, cube_dim, args, checked):
        self.calls.append((kernel, cube_count, cube_dim, args, checked))
        return "launched"


def test_launch_entry_points_call_the_client():
    client = FakeClient()
    assert axpy.launch(client, (1, 1, 1), (32, 1, 1), *args()) == "launched"
    scaled.launch_unchecked(client, (1, 1, 1), (32, 1, 1), "a", "b", 2)
    assert [call[4] for call in client.calls] == [True, False]
    assert client.calls[1][3] == ("a", "b", 2)


def test_launch_entry_points_follow_the_decorator_flags():
    assert not hasattr(axpy, "launch_unchecked")
    assert hasattr(scaled, "launch_unchecked")
    with pytest.raises(CubeError, match="launch_unchecked=True only"):
        unchecked_only.launch(FakeClient(), (1, 1, 1), (1, 1, 1), None)


def test_compile_calls_the_hook_with_a_definition(monkeypatch):
    monkeypatch.setenv("CUBEPY_CACHE_DIR", "off")  # an on-disk hit would skip the hook (and must not store "ok")
    seen = []
    monkeypatch.setattr(hooks, "COMPILE", lambda definition, target: seen.append((definition, target)) or "ok")
    comp = axpy.compilation_args(args())
    assert axpy.compile((64, 1, 1), *comp, target="sm_80") == "ok"
    assert axpy.compile((64, 1, 1), *args(), unchecked=True) == "ok"
    assert [(d.cube_dim, d.checked, t) for d, t in seen] == [((64, 1, 1), True, "sm_80"), ((64, 1, 1), False, "sm_90a")]


def test_compile_without_a_compiler(monkeypatch):
    monkeypatch.setattr(hooks, "COMPILE", None)
    with pytest.raises(CubeError, match="compiler not available"):
        axpy.compile((32, 1, 1), *args())


# -- identity -------------------------------------------------------------------------------------
@functools.cache
def make_fill(F, value):
    @cube(launch=True)
    def fill(out: Array[F]):
        out[ABSOLUTE_POS] = value

    return fill


def test_identity_distinguishes_closure_values():
    assert make_fill(cp.f32, 1).identity == make_fill(cp.f32, 1).identity
    assert make_fill(cp.f32, 1).identity != make_fill(cp.f64, 1).identity
    assert make_fill(cp.f32, 1).identity != make_fill(cp.f32, 2).identity
    assert make_fill(cp.f32, 1).identity.startswith(f"{__name__}.make_fill.<locals>.fill:")


def make_caller(helper):
    @cube(launch=True)
    def caller(out: Array[f32]):
        out[0] = helper(1.0)

    return caller


@cube
def helper_one(x):
    return x + 1.0


@cube
def helper_two(x):
    return x + 2.0


def test_identity_follows_called_cube_functions():
    assert make_caller(helper_one).identity != make_caller(helper_two).identity
    assert make_caller(helper_one).identity == make_caller(helper_one).identity


def test_identity_includes_module_constants(monkeypatch):
    first = make_scale_kernel().identity
    monkeypatch.setitem(globals(), "SCALE", 3.0)
    assert make_scale_kernel().identity != first


SCALE = 2.0


def make_scale_kernel():
    @cube(launch=True)
    def scale(out: Array[f32]):
        out[0] = out[0] * SCALE

    return scale


# -- tensor maps and derived parameters --------------------------------------------------------------
@cube(launch=True)
def with_tensor_map(tmap: cp.TensorMap[f32], out: Array[f32], n: Comptime):
    out[0] = n


class FakeTensorMapArg:
    def __init__(self, dtype_name):
        self.dtype_name = dtype_name

    def compilation_arg(self):
        return _Key(self.dtype_name)


class _Key:
    def __init__(self, dtype_name):
        self.dtype_name, self.rank, self.mode = dtype_name, 2, "tiled"

    def __eq__(self, other):
        return isinstance(other, _Key) and other.dtype_name == self.dtype_name

    def __hash__(self):
        return hash(self.dtype_name)


def test_tensor_map_parameters():
    comp = with_tensor_map.compilation_args((FakeTensorMapArg("f32"), ArrayArg(handle()), 7))
    definition = with_tensor_map.define(comp, (1, 1, 1), True)
    tmap, out = definition.params
    assert (tmap.role, tmap.var.kind, tmap.slot) == ("tensor_map", ir.VarKind.TENSOR_MAP, 0)
    assert (out.role, out.slot) == ("array", 0)
    with pytest.raises(LaunchError, match="tensor map of f32"):
        with_tensor_map.compilation_args((FakeTensorMapArg("f16"), ArrayArg(handle()), 7))
    bindings = Bindings()
    arg = FakeTensorMapArg("f32")
    with_tensor_map.register((arg, ArrayArg(handle()), 7), bindings)
    assert bindings.tensor_maps == [arg] and len(bindings.buffers) == 1


@cp.derive(cp.CubeType, cp.CubeLaunch)
class Window:
    start: u32
    data: Array[f32]
    width: Comptime[int]


@cube(launch=True)
def windowed(window: Window, out: Array[f32]):
    for k in cp.unroll(range(window.width)):
        out[k] = window.data[window.start + k]


def test_derived_parameters_register_and_expand_field_by_field():
    launch = Window.Launch(3, ArrayArg(handle()), 2)
    comp = windowed.compilation_args((launch, ArrayArg(handle())))
    assert comp[0] == Window.CompilationArg(
        cp.ScalarCompilationArg("u32"), cp.BufferCompilationArg("f32", 1, address_multiple_of=16), 2
    )
    definition = windowed.define(comp, (1, 1, 1), False)
    assert [(p.name, p.role, p.slot) for p in definition.params] == [
        ("window.start", "scalar", 0),
        ("window.data", "array", 0),
        ("out", "array", 1),
    ]
    bindings = Bindings()
    windowed.register((launch, ArrayArg(handle())), bindings)
    assert [int(s) for s in bindings.scalars] == [3] and len(bindings.buffers) == 2
    assert [inst.op for inst in ir.walk(definition.body)].count("index_assign") == 2


@cube(launch=True)
def _calls_helper_with_one_argument(out: Array[f32]):
    out[0] = _two_argument_helper(f32(1.0))  # the bad call


@cube
def _two_argument_helper(a, b):
    return a + b


def test_python_error_in_kernel_names_the_user_line():
    import traceback

    with pytest.raises(TypeError) as info:
        _calls_helper_with_one_argument.define(
            (_calls_helper_with_one_argument.params[0].launch.default_compilation_arg(),), (1, 1, 1), True
        )
    line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# the bad call" in text)
    assert any(f"{__file__}:{line}" in note for note in info.value.__notes__)
    assert traceback.extract_tb(info.value.__traceback__)[-1].lineno == line
