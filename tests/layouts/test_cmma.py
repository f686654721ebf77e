"""``cp.cmma``: tensor-core fragments in the frontend, the verifier, the interp and the PTX back end."""

import numpy as np
import pytest

import cubepy as cp
from cubepy import UNIT_POS, Array, SharedMemory, bf16, cube, f16, f32, ir
from cubepy.errors import VerifyError
from cubepy.ir import Variable, VarKind, constant, verify
from cubepy.ir import ops as o
from tests.irbuild import inst, kernel

Matrix, Ident, Layout = cp.cmma.Matrix, cp.cmma.MatrixIdent, cp.cmma.MatrixLayout
KERNELS: dict = {}


def matmul_kernel(elem, a_layout: str, b_layout: str, out_layout: str):
    """out = a @ b + c on one plane: a, b staged in shared memory, c loaded from and out stored to global."""
    key = (elem, a_layout, b_layout, out_layout)
    if key in KERNELS:
        return KERNELS[key]

    @cube(launch=True)
    def cmma_matmul(a: Array[elem], b: Array[elem], c: Array[f32], out: Array[f32]):
        a_tile = SharedMemory[elem](256)
        b_tile = SharedMemory[elem](256)
        for i in range(UNIT_POS, 256, 32):
            a_tile[i] = a[i]
            b_tile[i] = b[i]
        cp.sync_cube()
        lhs = Matrix[elem].from_slice(Ident.A, 16, 16, 16, a_layout, a_tile, 16)
        rhs = Matrix[elem].uninitialized(Ident.B, 16, 16, 16, b_layout)
        cp.cmma.load(rhs, b_tile.slice(0, 256), 16)
        acc = Matrix[f32].uninitialized(Ident.ACCUMULATOR, 16, 16, 16)
        cp.cmma.load_with_layout(acc, c, 16, Layout.ROW_MAJOR)
        cp.cmma.execute(lhs, rhs, acc, acc)
        cp.cmma.store(out, acc, 16, out_layout)

    KERNELS[key] = cmma_matmul
    return cmma_matmul


def in_memory(matrix: np.ndarray, layout: str) -> np.ndarray:
    """How ``layout`` lays a 16 x 16 matrix out with stride 16."""
    return (matrix if layout == "row" else matrix.T).ravel()


@pytest.mark.parametrize("elem", [f16, bf16])
@pytest.mark.parametrize("layouts", [("row", "row", "row"), ("col", "row", "col"), ("row", "col", "row")])
def test_matmul_on_one_plane(client, elem, layouts):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 16)).astype(elem.numpy)
    b = rng.standard_normal((16, 16)).astype(elem.numpy)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    out = client.zeros((256,), np.float32)
    matmul_kernel(elem, *layouts).launch(
        client,
        cp.CubeCount(1),
        cp.CubeDim(32),
        cp.ArrayArg(client.create(in_memory(a, layouts[0]))),
        cp.ArrayArg(client.create(in_memory(b, layouts[1]))),
        cp.ArrayArg(client.create(c.ravel())),
        cp.ArrayArg(out),
    )
    expected = a.astype(np.float64) @ b.astype(np.float64) + c
    got = client.read(out).reshape(16, 16)
    np.testing.assert_allclose(got if layouts[2] == "row" else got.T, expected, atol=1e-4)


@cube(launch=True)
def fill_and_cast(out: Array[f16], value: f32):
    """Two planes each fill an accumulator, cast it to f16 and store it side by side."""
    acc = Matrix[f32].from_value(Ident.ACCUMULATOR, 16, 16, 16, None, value + cp.f32(cp.PLANE_POS))
    half = cp.cmma.cast(acc, f16)
    cp.cmma.store(out.slice(cp.PLANE_POS * 256, cp.PLANE_POS * 256 + 256), half, 16, Layout.ROW_MAJOR)


def test_fill_cast_and_planes(client):
    out = client.zeros((512,), np.float16)
    fill_and_cast.launch(client, cp.CubeCount(1), cp.CubeDim(64), cp.ArrayArg(out), 1.5)
    assert client.read(out).tolist() == [1.5] * 256 + [2.5] * 256


@cube(launch=True)
def diverged(out: Array[f32]):
    acc = Matrix[f32].uninitialized(Ident.ACCUMULATOR, 16, 16, 16)
    if UNIT_POS < 16:
        cp.cmma.fill(acc, 1.0)
    cp.cmma.store(out, acc, 16, Layout.ROW_MAJOR)


def test_every_unit_of_the_plane_must_take_part(client):
    with pytest.raises(cp.SanitizerError, match="cooperative"):
        diverged.launch(client, cp.CubeCount(1), cp.CubeDim(32), cp.ArrayArg(client.zeros((256,), np.float32)))


def test_expansion_and_frontend_errors():
    @cube
    def product(a_mem, b_mem):
        a = Matrix[f16].from_slice(Ident.A, 16, 16, 16, Layout.ROW_MAJOR, a_mem, 16)
        b = Matrix[f16].from_slice(Ident.B, 16, 16, 16, Layout.COL_MAJOR, b_mem, 16)
        acc = Matrix[f32].from_value(Ident.ACCUMULATOR, 16, 16, 16, None, 0.0)
        cp.cmma.execute(a, b, acc, acc)

    ops = cp.testing.expand(product, Array[f16], Array[f16]).ops
    assert ops == ["cmma_load", "cmma_load", "cmma_fill", "cmma_execute"]

    @cube
    def wrong_shape():
        Matrix[f16].uninitialized(Ident.A, 16, 8, 16, Layout.ROW_MAJOR)

    with pytest.raises(cp.ExpandError, match="supports"):
        cp.testing.expand(wrong_shape)

    @cube
    def f32_inputs():
        Matrix[f32].uninitialized(Ident.A, 16, 16, 16, Layout.ROW_MAJOR)

    with pytest.raises(cp.ExpandError, match="f16, bf16"):
        cp.testing.expand(f32_inputs)

    @cube
    def mixed(mem):
        a = Matrix[f16].from_slice(Ident.A, 16, 16, 16, Layout.ROW_MAJOR, mem, 16)
        acc = Matrix[f32].uninitialized(Ident.ACCUMULATOR, 16, 16, 16)
        cp.cmma.execute(a, a, acc, acc)

    with pytest.raises(cp.ExpandError, match="accumulator"):
        cp.testing.expand(mixed, Array[f16])


F16_FRAG = Variable(VarKind.LOCAL_ARRAY, 0, ir.Type(ir.F16), length=16)
ACC = Variable(VarKind.LOCAL_ARRAY, 1, ir.Type(ir.F32), length=8)
SMEM = Variable(VarKind.SHARED, 0, ir.Type(ir.F16), length=256)
U32_ONE = constant(16, ir.Type(ir.U32))


def _expect(rule: str, operation) -> None:
    definition = kernel([inst(None, operation)], local_arrays=(F16_FRAG, ACC), shared_memories=(SMEM,))
    with pytest.raises(VerifyError, match=rf"\[{rule}\]"):
        verify(definition)


def test_verifier_rules():
    assert set(o.CMMA_RULES) == {"not-fragment", "cmma-type", "cmma-layout"}
    verify(
        kernel(
            [inst(None, o.CmmaLoad(F16_FRAG, SMEM, U32_ONE, U32_ONE, "a", "row"))],
            local_arrays=(F16_FRAG, ACC),
            shared_memories=(SMEM,),
        )
    )
    _expect("not-fragment", o.CmmaLoad(SMEM, SMEM, U32_ONE, U32_ONE, "a", "row"))
    _expect("cmma-layout", o.CmmaLoad(F16_FRAG, SMEM, U32_ONE, U32_ONE, "a", "diagonal"))
    _expect("cmma-type", o.CmmaFill(ACC, constant(1.0, ir.Type(ir.F16)), "accumulator"))
    _expect("not-fragment", o.CmmaExecute(F16_FRAG, F16_FRAG, ACC, F16_FRAG))  # d is no accumulator


def test_ptx_uses_wmma():
    client = cp.client("interp")
    arrays = [cp.ArrayArg(client.zeros((256,), dtype)) for dtype in (np.float16, np.float16, np.float32, np.float32)]
    compiled = matmul_kernel(f16, "row", "col", "row").compile(cp.CubeDim(32), *arrays)
    assert "wmma.load.a.sync.aligned.row.m16n16k16.shared.f16" in compiled.ptx
    assert "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32" in compiled.ptx
    assert "wmma.store.d.sync.aligned.row.m16n16k16.global.f32" in compiled.ptx
    if compiled.resources is not None:
        assert compiled.resources.stack_bytes == 0  # fragments live in registers
