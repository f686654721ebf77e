"""Property tests: every pair of element types combines by `ir.promote`, stores follow `ir.is_lossless`."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cubepy import ir
from cubepy.errors import ExpandError
from cubepy.frontend import Array, cube, testing
from cubepy.frontend.elem import SCALAR_TYPES

# fp8 takes no arithmetic (it asks for a conversion: tests/frontend/test_fp8.py).
NUMERIC = [t for t in SCALAR_TYPES.values() if not t.ir.is_bool and not t.ir.is_fp8]
types = st.sampled_from(NUMERIC)


@cube
def combine(a, b):
    return a + b, a < b, a * 2


@cube
def store(memory, value):
    memory[0] = value


@settings(max_examples=60, deadline=None)
@given(types, types)
def test_binary_operations_promote(left, right):
    expansion = testing.expand(combine, left, right)  # the verifier type-checks every instruction
    total, less, doubled = expansion.outputs
    assert total.type.elem == ir.promote(left.ir, right.ir)
    assert less.type.elem is ir.BOOL
    assert doubled.type.elem == left.ir


@settings(max_examples=60, deadline=None)
@given(types, types)
def test_stores_convert_exactly_when_lossless(value_type, memory_type):
    if ir.is_lossless(value_type.ir, memory_type.ir):
        testing.expand(store, Array[memory_type], value_type)
    else:
        with pytest.raises(ExpandError, match=f"storing {value_type.name} into {memory_type.name}"):
            testing.expand(store, Array[memory_type], value_type)
