"""Bad inputs, table-driven: each raises the right error class with a message a user can act on.

Kernel-code errors name the file and line of the offending construct (marked ``# BAD`` in
``bad_kernels``); plain-Python errors that the user's own code raises while expanding (a ``raise``,
an undefined name, a wrong call) pass through unchanged with the kernel line in the traceback and a
note naming the kernel, as Python's own errors would.  A rejected launch writes nothing.
"""

from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import cubepy as cp
from cubepy.errors import ExpandError, LaunchError, SanitizerError, TensorMapError
from cubepy.runtime.client import ComputeClient
from cubepy.runtime.handle import Handle, contiguous_strides
from cubepy.runtime.interp.backend import InterpBackend
from cubepy.runtime.tensormap import TensorMapArg

from . import bad_kernels as bk
from . import workloads

CLIENT = cp.client("interp")


def _out(dtype=np.float32, n: int = 64):
    return CLIENT.create(np.zeros(n, dtype))


def _launch(kernel, *args, cube_dim=(32,), count=(1,)) -> Callable[[], None]:
    """Launch ``kernel`` when called; the cube shapes are built then too (building one can be the error)."""
    return lambda: kernel.launch(CLIENT, cp.CubeCount(*count), cp.CubeDim(*cube_dim), *args)


def _bad_line(kernel) -> int:
    """The line marked ``# BAD`` in the kernel's source."""
    fn = kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if "# BAD" in text)


def _tm_handle(shape, dtype=np.float32, offset=0, strides=None):
    """A CPU handle over zeroed storage just large enough for ``shape``/``strides`` at ``offset``."""
    strides = contiguous_strides(tuple(shape)) if strides is None else tuple(strides)
    span = 1 + sum((d - 1) * abs(s) for d, s in zip(shape, strides))
    return Handle(None, np.zeros(offset + span, dtype), dtype, tuple(shape), strides, offset)


@dataclass
class Bad:
    """One bad input: what triggers it, the error class, key words of the message, the kernel (for its line)."""

    name: str
    trigger: Callable[[], object]
    error: type[BaseException]
    words: tuple[str, ...]
    kernel: object = None  # when set, the message (or traceback) names the file and the ``# BAD`` line


def _syntax(kernel, *words: str, args: tuple = ()) -> Bad:
    return Bad(
        kernel.name, _launch(kernel, cp.ArrayArg(_out()), *args), ExpandError, ("not supported",) + words, kernel
    )


SCALES_OK = (cp.ArrayArg(_out()), 2.0, cp.ArrayArg(_out()), 1)

TABLE: list[Bad] = [
    # -- unsupported syntax (ExpandError with file:line) ----------------------------------------
    _syntax(bk.uses_try, "try"),
    _syntax(bk.uses_with, "with"),
    _syntax(bk.uses_lambda, "lambda"),
    _syntax(bk.uses_global, "global"),
    _syntax(bk.uses_nonlocal, "nonlocal"),
    _syntax(bk.uses_yield, "yield"),
    _syntax(bk.uses_async, "async"),
    _syntax(bk.uses_del, "del"),
    _syntax(bk.uses_match, "match"),
    _syntax(bk.uses_class, "class"),
    Bad(
        "generator_over_runtime_range",
        _launch(bk.uses_generator, cp.ArrayArg(_out())),
        ExpandError,
        ("runtime value", "plain int"),
        bk.uses_generator,
    ),
    Bad(
        "list_comprehension_over_runtime_range",
        _launch(bk.uses_list_comprehension, cp.ArrayArg(_out())),
        ExpandError,
        ("runtime value",),
        bk.uses_list_comprehension,
    ),
    # -- types and comptime (ExpandError with file:line) ------------------------------------------
    Bad(
        "float_into_int_array",
        _launch(bk.stores_float_into_int_array, cp.ArrayArg(_out(np.uint32))),
        ExpandError,
        ("f32", "u32", "convert"),
        bk.stores_float_into_int_array,
    ),
    Bad(
        "unroll_of_runtime_range",
        _launch(bk.unrolls_a_runtime_range, cp.ArrayArg(_out()), 4),
        ExpandError,
        ("runtime value", "unroll"),
        bk.unrolls_a_runtime_range,
    ),
    Bad(
        "shared_memory_of_runtime_length",
        _launch(bk.shared_memory_of_runtime_length, cp.ArrayArg(_out()), 4),
        ExpandError,
        ("comptime", "length"),
        bk.shared_memory_of_runtime_length,
    ),
    Bad(
        "comptime_of_runtime_value",
        _launch(bk.comptime_of_a_runtime_value, cp.ArrayArg(_out()), 4),
        ExpandError,
        ("comptime", "runtime"),
        bk.comptime_of_a_runtime_value,
    ),
    # -- the user's own Python errors pass through, with the kernel line in the traceback ----------
    Bad("raise_in_kernel", _launch(bk.uses_raise, cp.ArrayArg(_out())), ValueError, ("no",), bk.uses_raise),
    Bad(
        "undefined_name",
        _launch(bk.uses_undefined_name, cp.ArrayArg(_out())),
        NameError,
        ("undefined_value",),
        bk.uses_undefined_name,
    ),
    Bad(
        "cube_function_wrong_arity",
        _launch(bk.calls_with_wrong_arity, cp.ArrayArg(_out())),
        TypeError,
        ("missing", "b"),
        bk.calls_with_wrong_arity,
    ),
    # -- launch arguments (LaunchError) ------------------------------------------------------------
    Bad("too_few_arguments", _launch(bk.scales, cp.ArrayArg(_out())), LaunchError, ("takes 4 arguments", "got 1")),
    Bad("too_many_arguments", _launch(bk.scales, *SCALES_OK, 5), LaunchError, ("takes 4 arguments", "got 5")),
    Bad(
        "wrong_dtype",
        _launch(bk.scales, cp.ArrayArg(_out(np.float64)), 2.0, cp.ArrayArg(_out()), 1),
        LaunchError,
        ("float64", "f32"),
    ),
    Bad("wrong_line_size_for_length", _launch(bk.writes_one, cp.ArrayArg(_out(n=10), 4)), LaunchError, ("line", "4")),
    Bad("unsupported_line_size", _launch(bk.writes_one, cp.ArrayArg(_out(), 3)), LaunchError, ("line", "3")),
    Bad(
        "line_size_does_not_divide_the_buffer",
        _launch(bk.doubles_lines, cp.ArrayArg(_out(n=1002), 4)),
        LaunchError,
        ("parameter 'out'", "a buffer of 1002 elements", "line_size=4", "does not divide", "last 2 element"),
    ),
    Bad(  # a view that starts one f32 into a 16-byte line: a vector access there faults (crashed the cpu runtime)
        "line_view_starts_mid_line",
        _launch(bk.doubles_lines, cp.ArrayArg(_out(n=68)[1:65], 4)),
        LaunchError,
        ("parameter 'out'", "lines of 4 (16 bytes, aligned to 16)", "4 bytes past", "multiple of 4 elements"),
    ),
    Bad(  # rows 6 elements apart: every other row would start mid-line
        "line_rows_start_mid_line",
        _launch(bk.doubles_row_lines, cp.TensorArg.from_raw_parts(_out(n=24), (6, 1), (4, 4), 4)),
        LaunchError,
        ("parameter 't'", "lines of 4", "stride of axis 0 is 6 elements", "multiple of 4"),
    ),
    Bad(
        "line_size_does_not_divide_the_tensor_view",
        _launch(bk.doubles_lines, cp.TensorArg.from_raw_parts(_out(n=18), (6, 1), (3, 5), 2)),
        LaunchError,
        ("parameter 'out'", "shape 3x5", "15 elements", "line_size=2"),
    ),
    Bad("numpy_array_instead_of_arg", _launch(bk.writes_one, np.zeros(4, np.float32)), LaunchError, ("ArrayArg",)),
    Bad("handle_instead_of_arg", _launch(bk.writes_one, _out()), LaunchError, ("ArrayArg",)),
    Bad(
        "array_arg_for_scalar",
        _launch(bk.scales, cp.ArrayArg(_out()), cp.ArrayArg(_out()), cp.ArrayArg(_out()), 1),
        LaunchError,
        ("factor",),
    ),
    Bad(
        "string_for_scalar",
        _launch(bk.scales, cp.ArrayArg(_out()), "two", cp.ArrayArg(_out()), 1),
        LaunchError,
        ("factor",),
    ),
    Bad(
        "unhashable_comptime",
        _launch(bk.scales, cp.ArrayArg(_out()), 2.0, cp.ArrayArg(_out()), [1]),
        LaunchError,
        ("mode", "hashable"),
    ),
    Bad(
        "cube_dim_over_1024_units",
        _launch(bk.writes_one, cp.ArrayArg(_out()), cube_dim=(1025,)),
        LaunchError,
        ("1024",),
    ),
    Bad(
        "cube_dim_over_1024_in_3d",
        _launch(bk.writes_one, cp.ArrayArg(_out()), cube_dim=(32, 32, 2)),
        LaunchError,
        ("1024",),
    ),
    Bad(
        "cube_dim_zero",
        _launch(bk.writes_one, cp.ArrayArg(_out()), cube_dim=(0,)),
        LaunchError,
        ("CubeDim", "positive"),
    ),
    Bad(
        "negative_cube_count",
        _launch(bk.writes_one, cp.ArrayArg(_out()), count=(-1,)),
        LaunchError,
        ("CubeCount", "non-negative"),
    ),
    Bad(
        "four_axis_cube_count",
        lambda: bk.writes_one.launch(CLIENT, (1, 2, 3, 4), (5, 6), cp.ArrayArg(_out())),
        LaunchError,
        ("cube_count", "1 to 3 axes", "got 4"),
    ),
    Bad(
        "four_axis_cube_dim",
        lambda: bk.writes_one.launch(CLIENT, (1,), (1, 1, 1, 1), cp.ArrayArg(_out())),
        LaunchError,
        ("cube_dim", "1 to 3 axes"),
    ),
    Bad(
        "cube_dim_z_over_64",
        _launch(bk.writes_one, cp.ArrayArg(_out()), cube_dim=(1, 1, 128)),
        LaunchError,
        ("CubeDim.z = 128", "limit of 64"),
    ),
    Bad(
        "cube_dim_y_over_1024",
        lambda: bk.writes_one.launch(CLIENT, (1,), (1, 2048), cp.ArrayArg(_out())),
        LaunchError,
        ("cube_dim.y = 2048", "limit of 1024"),
    ),
    Bad(
        "cube_count_y_over_65535",
        _launch(bk.writes_one, cp.ArrayArg(_out()), count=(1, 65536)),
        LaunchError,
        ("CubeCount.y = 65536", "limit of 65535"),
    ),
    Bad(
        "cube_count_z_over_65535",
        lambda: bk.writes_one.launch(CLIENT, (1, 1, 70000), (32,), cp.ArrayArg(_out())),
        LaunchError,
        ("cube_count.z = 70000", "65535"),
    ),
    Bad(
        "cube_count_x_over_2_31",
        _launch(bk.writes_one, cp.ArrayArg(_out()), count=(2**31,)),
        LaunchError,
        ("CubeCount.x", "2147483647"),
    ),
    Bad(
        "compile_with_cube_dim_z_over_64",
        lambda: bk.writes_one.compile((1, 1, 65), cp.ArrayArg(_out())),
        LaunchError,
        ("cube_dim.z = 65", "64"),
    ),
    Bad(
        "negative_tensor_stride",
        lambda: cp.TensorArg.from_raw_parts(_out(), (-1,), (64,)),
        LaunchError,
        ("stride -1", "negative"),
    ),
    Bad(
        "shared_memory_over_limit",
        _launch(bk.too_much_shared, cp.ArrayArg(_out())),
        LaunchError,
        ("240000", "shared memory"),
    ),
    Bad(
        "handle_of_another_client",
        _launch(bk.writes_one, cp.ArrayArg(cp.client("interp", sanitize=True).create(np.zeros(64, np.float32)))),
        LaunchError,
        ("another client",),
    ),
    Bad(
        "non_contiguous_tensor_for_a_tensor_map",
        lambda: TensorMapArg.tiled(_tm_handle((4, 4), strides=(8, 2)), (4, 4)),
        TensorMapError,
        ("rule 5", "innermost"),
    ),
    # -- tensor maps: a handful of the encoder's rules (all 22 are in tests/runtime/test_tensormap.py) --
    Bad(
        "tensormap_rank_over_5",
        lambda: TensorMapArg.tiled(_tm_handle((1,) * 6), (1,) * 6),
        TensorMapError,
        ("rule 2", "rank"),
    ),
    Bad(
        "tensormap_misaligned_address",
        lambda: TensorMapArg.tiled(_tm_handle((4, 8), offset=1), (4, 8)),
        TensorMapError,
        ("rule 3",),
    ),
    Bad(
        "tensormap_bad_swizzle",
        lambda: TensorMapArg.tiled(_tm_handle((4, 8)), (4, 8), swizzle="7B"),
        TensorMapError,
        ("rule 8", "swizzle"),
    ),
    Bad(
        "tensormap_box_too_big",
        lambda: TensorMapArg.tiled(_tm_handle((4, 512)), (4, 512)),
        TensorMapError,
        ("rule 12",),
    ),
    Bad(
        "tensormap_inner_row_not_16_bytes",
        lambda: TensorMapArg.tiled(_tm_handle((4, 8)), (4, 3)),
        TensorMapError,
        ("rule 13", "16"),
    ),
    # -- compile-time options --------------------------------------------------------------------
    Bad(
        "unknown_target",
        lambda: bk.writes_one.compile(cp.CubeDim(32), cp.ArrayArg(_out()), target="sm_1"),
        cp.CubeError,
        ("sm_1",),
    ),
    Bad("unknown_runtime", lambda: cp.client("opencl"), cp.CubeError, ("opencl", "interp")),
]


def _mentions_line(error: BaseException, kernel) -> bool:
    """Whether the message, or else the traceback, names the kernel's file and ``# BAD`` line."""
    fn = kernel.fn if hasattr(kernel, "fn") else kernel.__wrapped__
    path, line = inspect.getsourcefile(fn), _bad_line(kernel)
    if f"{os.path.basename(path)}:{line}" in str(error):
        return True
    return any(frame.filename == path and frame.lineno == line for frame in traceback.extract_tb(error.__traceback__))


@pytest.mark.parametrize("bad", TABLE, ids=[bad.name for bad in TABLE])
def test_bad_input_gets_an_actionable_error(bad: Bad):
    with pytest.raises(bad.error) as info:
        bad.trigger()
    message = str(info.value)
    for word in bad.words:
        assert word.lower() in message.lower(), f"{word!r} missing from: {message}"
    if bad.kernel is not None:
        assert _mentions_line(info.value, bad.kernel), message
        if isinstance(info.value, ExpandError):
            assert info.value.filename and info.value.lineno == _bad_line(bad.kernel)


def test_table_is_large():
    assert len(TABLE) >= 40


@pytest.mark.parametrize("trigger", ["sanitizer", "dtype", "arity"])
def test_rejected_launch_leaves_every_output_untouched(trigger):
    before = np.arange(64, dtype=np.float32)
    out, other = CLIENT.create(before.copy()), CLIENT.create(before[::-1].copy())
    if trigger == "sanitizer":  # fails after the first store has run: the runtime must roll it back

        def run():
            bk.writes_past_the_end.launch_unchecked(CLIENT, cp.CubeCount(2), cp.CubeDim(32), cp.ArrayArg(out))

        error: type[BaseException] = SanitizerError
    elif trigger == "dtype":
        run = _launch(bk.scales, cp.ArrayArg(out), 2.0, cp.ArrayArg(CLIENT.create(np.zeros(4, np.float64))), 1)
        error = LaunchError
    else:
        run = _launch(bk.scales, cp.ArrayArg(out), 2.0, cp.ArrayArg(other))
        error = LaunchError
    with pytest.raises(error):
        run()
    assert CLIENT.read(out).tobytes() == before.tobytes()
    assert CLIENT.read(other).tobytes() == before[::-1].tobytes()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "wrong_key"])
def test_corrupt_cache_entry_is_ignored_and_rebuilt(tmp_path, damage):
    with cp.config.override(CUBEPY_CACHE_DIR=str(tmp_path)):
        assert workloads.run_saxpy(ComputeClient("interp", InterpBackend()), 64, 2.0, seed=1)
        (entry,) = sorted(tmp_path.rglob("*.pkl"))
        good = entry.read_bytes()
        if damage == "garbage":
            entry.write_bytes(os.urandom(len(good)))
        elif damage == "truncated":
            entry.write_bytes(good[: len(good) // 2])
        elif damage == "empty":
            entry.write_bytes(b"")
        else:  # a whole entry, but copied under another key's name
            entry.rename(entry.with_name("0" * 64 + ".pkl"))
            entry.parent.mkdir(exist_ok=True)
            entry.write_bytes(entry.with_name("0" * 64 + ".pkl").read_bytes().replace(entry.stem.encode(), b"f" * 64))
        client = ComputeClient("interp", InterpBackend())
        assert workloads.run_saxpy(client, 64, 2.0, seed=2)
        assert client.stats["misses"] == 1
        rebuilt = entry.read_bytes()
        assert rebuilt[:12] == good[:12] and len(rebuilt) == len(good)  # rewritten whole
        assert np.frombuffer(rebuilt[-8:], np.uint8).size == 8
