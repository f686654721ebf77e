"""Launch facts: a tensor dimension of stride 1 is indexed without its stride (``BufferCompilationArg.unit_strides``)."""

from __future__ import annotations

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS_X, UNIT_POS_Y, Array, Tensor, f32
from cubepy.ir import ops
from cubepy.ir.printer import format_kernel


@cp.cube(launch=True)
def gather(t: Tensor[f32], out: Array[f32]):
    """out[y * 5 + x] = t[y, x] for a 3 x 5 cube."""
    out[UNIT_POS_Y * 5 + UNIT_POS_X] = t[UNIT_POS_Y, UNIT_POS_X]


def _definition(client, arg):
    comp = gather.compilation_args((arg, cp.ArrayArg(client.zeros((15,), np.float32))))
    return comp[0], gather.define(comp, cp.CubeDim(5, 3), checked=True)


def _stride_dims(definition) -> list[int]:
    """The dimensions whose stride the kernel reads."""
    return [inst.operation.dim.value for inst in definition.body.instructions if isinstance(inst.operation, ops.Stride)]


def _shape_dims(definition) -> list[int]:
    """The dimensions whose extent the kernel reads."""
    return [inst.operation.dim.value for inst in definition.body.instructions if isinstance(inst.operation, ops.Shape)]


def test_a_contiguous_tensor_reads_no_stride_and_multiplies_by_its_row_length():
    client = cp.client("interp")
    comp, definition = _definition(client, cp.TensorArg(client.zeros((3, 5), np.float32)))
    assert comp.unit_strides == (False, True) and comp.contiguous
    assert _stride_dims(definition) == [] and _shape_dims(definition) == [1]
    assert "unit stride in dim 1, contiguous" in format_kernel(definition)


def test_padded_rows_read_their_outer_stride():
    client = cp.client("interp")
    padded = client.zeros((3, 7), np.float32)
    comp, definition = _definition(client, cp.TensorArg.from_raw_parts(padded, strides=(7, 1), shape=(3, 5)))
    assert comp.unit_strides == (False, True) and not comp.contiguous
    assert _stride_dims(definition) == [0]


def test_a_transposed_view_reads_the_inner_stride_and_skips_the_outer():
    client = cp.client("interp")
    storage = client.zeros((5, 3), np.float32)
    comp, definition = _definition(client, cp.TensorArg.from_raw_parts(storage, strides=(1, 3), shape=(3, 5)))
    assert comp.unit_strides == (True, False)
    assert _stride_dims(definition) == [1]


@pytest.mark.parametrize("runtime", ["interp", "cpu"])
def test_every_stride_pattern_compiles_its_own_kernel_and_reads_the_right_items(runtime):
    # the same kernel launched with four layouts of one 3 x 5 matrix: each result is the matrix itself
    client = cp.client(runtime)
    matrix = np.arange(15, dtype=np.float32).reshape(3, 5)
    transposed = client.create(np.ascontiguousarray(matrix.T))
    padded = client.create(np.pad(matrix, ((0, 0), (0, 2))))  # rows of 7: strides (7, 1)
    spread = client.create(np.repeat(matrix, 2, axis=1))  # every item twice: strides (10, 2)
    layouts = {
        "contiguous": cp.TensorArg(client.create(matrix)),
        "transposed": cp.TensorArg.from_raw_parts(transposed, strides=(1, 3), shape=(3, 5)),
        "padded rows": cp.TensorArg.from_raw_parts(padded, strides=(7, 1), shape=(3, 5)),
        "every other": cp.TensorArg.from_raw_parts(spread, strides=(10, 2), shape=(3, 5)),
    }
    for name, arg in layouts.items():
        out = client.zeros((15,), np.float32)
        gather.launch(client, cp.CubeCount(1), cp.CubeDim(5, 3), arg, cp.ArrayArg(out))
        np.testing.assert_array_equal(client.read(out).reshape(3, 5), matrix, err_msg=name)
