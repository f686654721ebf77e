"""``cp.cbrt`` end to end (IR, interp, frontend, PTX): an op declared by one line.

Its record in ``cubepy/ir/ops/arith.py`` names its semantics (the correctly rounded f32 ``numerics.cbrt``)
and its library function (``__nv_cbrtf`` on the GPU, ``cbrtf`` on the host); the frontend function comes from
the record.  Expected values are numpy's f64 ``cbrt`` (rounded once for f32) and hand-checked cubes.
"""

import numpy as np
import pytest

import cubepy as cp
from cubepy import ABSOLUTE_POS, Array, cube


def _kernel(elem):
    @cube(launch=True)
    def cube_root(x: Array[elem], out: Array[elem]):
        if ABSOLUTE_POS < out.len():
            out[ABSOLUTE_POS] = cp.cbrt(x[ABSOLUTE_POS])

    return cube_root


@pytest.mark.parametrize("elem", [cp.f32, cp.f64, cp.f16], ids=lambda e: e.name)
def test_cbrt_matches_numpy(client, elem):
    values = np.array([27.0, -8.0, 0.0, -0.0, 1e-6, 2.0, 1000.0, np.inf, -np.inf, np.nan, 0.125, 3.5], dtype=elem.numpy)
    out = client.empty(values.shape, elem.numpy)
    _kernel(elem).launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.create(values)), cp.ArrayArg(out))
    got = client.read(out)
    # f32 is correctly rounded on the interp: numpy's f64 root rounded once is, for these values (numpy's own f32
    # cbrt is not: 2.9999998 for 27).  f16 computes in f32 and rounds once, as the GPU does.
    expected = np.cbrt(values.astype(np.float64)).astype(np.float32).astype(values.dtype)
    if elem is cp.f64:
        expected = np.cbrt(values)
    if client.name == "cpu":  # the C library's cbrtf / cbrt: within 2 / 3 ulp (docs/semantics/math-accuracy.md)
        np.testing.assert_array_max_ulp(got, expected, maxulp=3 if elem is cp.f64 else 2)
    else:
        np.testing.assert_array_equal(got, expected)
    # Exact cubes, by hand: within one ulp (numpy's f64 cbrt gives 3.0000000000000004 for 27).
    for index, root in ((0, 3.0), (1, -2.0), (6, 10.0)):
        assert abs(float(got[index]) - root) <= abs(float(np.spacing(elem.numpy.type(root))))
    assert np.signbit(got[3])


def test_cbrt_is_one_instruction_lowered_to_libdevice():
    kernel = _kernel(cp.f32)
    compiled = kernel.compile(cp.CubeDim(32), cp.BufferCompilationArg(cp.f32, 1), cp.BufferCompilationArg(cp.f32, 1))
    assert "= cbrt " in compiled.ir
    assert "__nv_cbrtf" in compiled.llvm


def test_cbrt_of_an_integer_computes_in_f32():
    @cube
    def root(x):
        return cp.cbrt(x)

    expansion = cp.testing.expand(root, cp.i32)
    ops_seen = [inst.op for inst in expansion.instructions]
    assert ops_seen == ["cast", "cbrt"]
