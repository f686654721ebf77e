"""Arrays, tensors, shared memory, local arrays, slices, atomics and sequences inside kernels."""

import pytest

import cubepy.frontend as cp
from cubepy.errors import ExpandError
from cubepy.frontend import Array, Atomic, Line, SharedMemory, Tensor, cube, f32, i32, testing, u32, usize
from cubepy.ir import VarKind


def insts(expansion, op):
    return [inst for inst in expansion.instructions if inst.op == op]


@cube
def copy(src: Array[f32], dst: Array[f32], i: u32):
    dst[i] = src[i]


def test_global_indexing_follows_the_checked_mode():
    checked = testing.expand(copy, Array[f32], Array[f32], u32, checked=True)
    unchecked = testing.expand(copy, Array[f32], Array[f32], u32, checked=False)
    assert [i.operation.checked for i in checked.instructions] == [True, True]
    assert [i.operation.checked for i in unchecked.instructions] == [False, False]


@cube
def index_types(a: Array[f32], i: i32, j: usize):
    return a[i], a[j], a[3]


def test_indices_are_cast_to_u32():
    expansion = testing.expand(index_types, Array[f32], i32, usize)
    assert expansion.ops == ["cast", "index", "cast", "index", "index"]
    assert all(str(inst.operation.index.type) == "u32" for inst in insts(expansion, "index"))


@cube
def metadata(t: Tensor[f32]):
    return t.len(), t.buffer_len(), t.shape(1), t.stride(0), t.rank()


def test_tensor_metadata_is_u32():
    expansion = testing.expand(metadata, Tensor[f32])
    assert expansion.ops == ["len", "buffer_len", "shape", "stride", "rank"]
    assert {str(v.type) for v in expansion.outputs} == {"u32"}
    assert expansion.definition.params[0].role == "tensor"


@cube
def shared(a: Array[f32]):
    smem = SharedMemory[f32](64)
    lined = SharedMemory[Line[f32]](16, 4)
    aligned = SharedMemory.aligned(f32, 32, 128)
    smem[cp.UNIT_POS] = a[cp.UNIT_POS]
    cp.sync_cube()
    a[0] = smem[3]
    return len(smem), lined.line_size, aligned


def test_shared_memory_is_declared_and_never_checked():
    expansion = testing.expand(shared, Array[f32], checked=True)
    memories = expansion.definition.shared_memories
    assert [(m.length, str(m.type), m.alignment) for m in memories] == [
        (64, "f32", None),
        (16, "f32x4", None),
        (32, "f32", 128),
    ]
    shared_ops = [
        i
        for i in expansion.instructions
        if i.op in ("index", "index_assign") and i.operation.memory.kind is VarKind.SHARED
    ]
    assert shared_ops and not any(i.operation.checked for i in shared_ops)
    assert expansion.outputs[:2] == (64, 4)


@cube
def local_array():
    values = cp.LocalArray[u32](4)
    for i in cp.unroll(range(4)):
        values[i] = i
    return values[2]


def test_local_arrays():
    expansion = testing.expand(local_array)
    assert [(v.kind, v.length) for v in expansion.definition.local_arrays] == [(VarKind.LOCAL_ARRAY, 4)]
    assert expansion.ops == ["index_assign"] * 4 + ["index"]


@cube
def slices(a: Array[f32], start: u32):
    view = a.slice(start, start + 8)
    inner = view.slice(2, 4)
    view[1] = 0.0
    return inner[0], view.len()


def test_slices_add_their_offset():
    expansion = testing.expand(slices, Array[f32], u32)
    # end - start, the inner view's offset, then one add per access (index 0 reuses the offset)
    assert expansion.ops == ["add", "sub", "add", "add", "index_assign", "index"]
    assert expansion.outputs[1] == expansion.instructions[1].out


@cube
def atomics(counts: Array[Atomic[u32]], i: u32):
    old = counts[i].fetch_add(1)
    counts[i].fetch_max(old)
    counts[i].compare_exchange(3, 4)
    counts[i].store(5)
    return counts[i].load()


def test_atomic_operations():
    expansion = testing.expand(atomics, Array[Atomic[u32]], u32)
    assert expansion.ops == ["atomic_add", "atomic_max", "atomic_compare_exchange", "atomic_store", "atomic_load"]


@cube
def atomic_plain_store(counts: Array[Atomic[i32]]):
    counts[0] = 1


def test_assigning_an_atomic_element_is_an_atomic_store():
    assert testing.expand(atomic_plain_store, Array[Atomic[i32]]).ops == ["atomic_store"]


@cube
def sequence_use(a: Array[f32]):
    seq = cp.Sequence()
    for i in cp.unroll(range(3)):
        seq.push(a[i])
    total = seq[0]
    for value in seq:
        total = total + value
    return len(seq), total


def test_sequences_have_comptime_length_and_unroll():
    expansion = testing.expand(sequence_use, Array[f32])
    assert expansion.outputs[0] == 3
    assert expansion.ops == ["index"] * 3 + ["add"] * 3


@cube
def sequence_runtime_index(a: Array[f32], i: u32):
    seq = cp.Sequence([a[0]])
    return seq[i]


def test_sequence_index_must_be_comptime():
    with pytest.raises(ExpandError, match="expected a comptime value"):
        testing.expand(sequence_runtime_index, Array[f32], u32)


@cube
def array_len_python(a: Array[f32]):
    return len(a)


def test_python_len_of_a_buffer_is_an_error():
    with pytest.raises(ExpandError, match="use `.len\\(\\)`"):
        testing.expand(array_len_python, Array[f32])
