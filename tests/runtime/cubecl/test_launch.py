"""Port of CubeCL's ``launch`` runtime tests.

Source: tracel-ai/cubecl ``crates/cubecl-core/src/runtime_tests/launch.rs`` at commit
4057f39e7fe025323e032bab8fc7600d16414f5e (HEAD; superset of the classic file at 3956d6153).

``test_launch_with_generics`` runs per FloatType (f16, bf16, f32, f64), the others once.
Not ported (see the report): dynamic cube counts, ``address_type = "dynamic"``, the resource-limit
errors and ``test_launch_with_max_shared`` (all need device properties or APIs that cubepy's public API lacks).
"""

import functools

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, Comptime, cube, f32

FLOATS = [cp.f16, cp.bf16, cp.f32, cp.f64]


def as_type(elem, *values):
    """``as_bytes![F: ...]``: each value is an f32 literal converted with ``F::new``."""
    return np.asarray(values, dtype=np.float32).astype(elem.numpy)


@cp.derive(cp.CubeType, cp.CubeLaunch)
class ComptimeTag:
    array: Array[f32]
    tag: Comptime[str]


@cube(launch=True)
def kernel_with_comptime_tag(output: ComptimeTag):
    if UNIT_POS == 0:
        # Rust: `if comptime![&output.tag == "zero"]` - a host comparison at expansion.
        if output.tag == "zero":
            output.array[0] = f32(0.0)
        else:
            output.array[0] = f32(1.0)


@functools.cache
def make_kernel_with_generics(F):
    @cube(launch=True)
    def kernel_with_generics(output: Array[F]):
        if UNIT_POS == 0:
            output[0] = F(5.0)

    return kernel_with_generics


@cube(launch=True)
def kernel_without_generics(output: Array[f32]):
    if UNIT_POS == 0:
        output[0] = 5.0


@cube(launch=True)
def kernel_inplace(input: Array[f32], output: Array[f32]):
    if UNIT_POS == 0:
        output[0] = input[0] + 5.0


def test_launch_with_comptime_tag(client):
    handle = client.create(np.asarray([5.0], dtype=np.float32))

    kernel_with_comptime_tag.launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        ComptimeTag.Launch(cp.ArrayArg(handle), "zero"),
    )

    assert client.read(handle)[0] == 0.0

    handle = client.create(np.asarray([5.0], dtype=np.float32))

    kernel_with_comptime_tag.launch(
        client,
        cp.CubeCount(1, 1, 1),
        cp.CubeDim(1),
        ComptimeTag.Launch(cp.ArrayArg(handle), "not_zero"),
    )

    assert client.read(handle)[0] == 1.0


@pytest.mark.parametrize("F", FLOATS, ids=lambda t: t.name)
def test_launch_with_generics(client, F):
    handle = client.create(as_type(F, 0.0, 1.0))

    make_kernel_with_generics(F).launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    assert client.read(handle).astype(np.float64)[0] == 5.0


def test_launch_without_generics(client):
    handle = client.create(np.asarray([0.0, 1.0], dtype=np.float32))

    kernel_without_generics.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    assert client.read(handle)[0] == 5.0


def test_launch_inplace(client):
    # Rust: the output is `BufferArg::alias(0, 2)`, an alias of the first binding. cubepy's public API has no
    # alias argument; the equivalent is the same handle given to both parameters.
    handle = client.create(np.asarray([0.0, 1.0], dtype=np.float32))

    kernel_inplace.launch(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle), cp.ArrayArg(handle))

    assert client.read(handle)[0] == 5.0


def test_launch_zero_cube_count(client):
    # A zero-element fill resolves to `Static(0, 0, 0)`. Launching it is a no-op.
    handle = client.create(np.asarray([7.0, 8.0], dtype=np.float32))

    kernel_without_generics.launch(client, cp.CubeCount(0, 0, 0), cp.CubeDim(1), cp.ArrayArg(handle))

    np.testing.assert_array_equal(client.read(handle), [7.0, 8.0])


@cube(launch=True, launch_unchecked=True)
def kernel_without_generics_both(output: Array[f32]):
    if UNIT_POS == 0:
        output[0] = 5.0


@pytest.mark.parametrize("mode", ["launch", "launch_unchecked"])
def test_launch_checked_and_unchecked(client, mode):
    # `kernel_without_generics` compiled in both execution modes: CubeCL's `launch`
    # (ExecutionMode::Checked) and `launch_unchecked` (ExecutionMode::Unchecked) entry points
    # give the same result on in-bounds code (the Rust suite uses both entry points throughout).
    handle = client.create(np.asarray([0.0, 1.0], dtype=np.float32))

    getattr(kernel_without_generics_both, mode)(client, cp.CubeCount(1, 1, 1), cp.CubeDim(1), cp.ArrayArg(handle))

    assert client.read(handle)[0] == 5.0
