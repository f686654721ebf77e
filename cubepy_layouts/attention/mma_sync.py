# mypy: disable-error-code="attr-defined, index, misc, operator, type-arg, valid-type"
# (kernel code: ``Array[f16]``, ``LocalArray[f32](n)`` are values of the kernel language, not Python types)
"""FlashAttention-2 forward on sm_80: ``mma.sync.m16n8k16`` with K and V staged by a ``cp.async`` pipeline.

One cube of 4 planes takes ``BLOCK_M = 64`` queries of one (batch, head); the grid is query blocks x
``batch * heads``.  Each plane owns 16 query rows:

    Q (64 x D) is copied once into shared memory by cp.async and held as m16n8k16 ``a`` fragments (ldmatrix.x4)
    prologue: the Q stage, then K/V tiles 0 .. stages-2, one commit group each
    for each key tile t (block_n keys):
        consumer_wait (tile t has landed for this unit); sync_cube (for every unit; and every unit is done
        with the slot of tile t-1), then refill that slot with tile t + stages - 1
        S = Q K^T (K row-major [key][d] is the ``b`` operand transposed: plain ldmatrix.x4)
        masked tiles only: S = -inf past seq_k and, causal, where key > query
        online softmax in registers: m = max(m, rowmax(S) * scale_log2); P = exp2(S * scale_log2 - m);
        O *= exp2(m_old - m); l = l * exp2(m_old - m) + rowsum(P)  (rowmax over the quad: shuffle_xor 1, 2)
        O += P V: the f32 C fragments of n8 tiles 2j, 2j+1 of S are the ``a`` fragment of k-step j once
        converted to f16/bf16 (P never touches shared memory); V by ldmatrix.x4.trans
    O / l is written row by row (rows past seq_q are not), and lse = ln(2) * m + ln(l) when asked.

The key tiles split into two runtime loops that share the pipeline: the unmasked ones (no compare at all)
and the few masked ones (the causal diagonal and the ragged end of seq_k), the same ``@cube`` tile step with
a ``Comptime[bool]``.  Rows and keys past the end are zero-filled by the copies (``src-size`` 0), so a ragged
tile reads no other head's data and multiplies masked probabilities by zeros, never by garbage.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import attrs

import cubepy as cp
from cubepy import (
    CUBE_POS_X,
    CUBE_POS_Y,
    PLANE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    Array,
    Comptime,
    LocalArray,
    SharedMemory,
    cube,
    f32,
    u32,
)
from cubepy_layouts.attention.config import FASTMATH, AttentionConfig, AttentionProblem

SHAPE = "m16n8k16"
TARGET = "sm_80"
PLANES = 4
UNITS = 32 * PLANES
BLOCK_M = 16 * PLANES  # each plane owns 16 query rows
CHUNK = 8  # 16-bit items per 16-byte cp.async
PAD = 8  # items added to each shared row: 16-byte aligned rows, and the 8 rows of an ldmatrix in different banks
LN2 = math.log(2.0)
DEFAULT_BLOCK_N = 64
DEFAULT_STAGES = {64: 3, 128: 2}  # shared memory: Q and 2 x stages tiles of 64 x (D + 8) items
SHARED_LIMIT = 232_448  # bytes per cube: sm_90's opt-in maximum (sm_80 allows 166,912, sm_86 101,376)


@attrs.frozen
class MmaSyncAttentionLaunch:
    """The launch of the kernel: ``.launch(client)`` runs it, ``.compile(target)`` compiles it."""

    kernel: Any  # the @cube(launch=True) kernel
    args: tuple
    cube_count: cp.CubeCount
    cube_dim: cp.CubeDim

    def launch(self, client) -> None:
        """Run the kernel (one launch does everything)."""
        self.kernel.launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = TARGET, **options):
        """The compiled kernel (PTX and, with ptxas, its resources); ``options`` as for ``kernel.compile``."""
        return self.kernel.compile(self.cube_dim, *self.args, target=target, **options)


def resolve_config(problem: AttentionProblem, config: AttentionConfig) -> tuple[int, int]:
    """``(block_n, stages)`` of ``config`` for ``problem``, the defaults filled in; a LaunchError where unsupported."""
    if config.block_m not in (None, BLOCK_M):
        raise cp.LaunchError(
            f"mma_sync attention: block_m must be {BLOCK_M} (4 planes of 16 rows), got {config.block_m}"
        )
    block_n = DEFAULT_BLOCK_N if config.block_n is None else config.block_n
    if block_n not in (16, 32, 64, 128):
        raise cp.LaunchError(f"mma_sync attention: block_n must be 16, 32, 64 or 128, got {block_n}")
    stages = DEFAULT_STAGES[problem.head_dim] if config.stages is None else config.stages
    if not 2 <= stages <= 7:
        raise cp.LaunchError(f"mma_sync attention: stages must be 2 to 7 (one more group holds Q), got {stages}")
    shared = (BLOCK_M + 2 * stages * block_n) * (problem.head_dim + PAD) * 2
    if shared > SHARED_LIMIT:
        raise cp.LaunchError(
            f"mma_sync attention: block_n={block_n} with {stages} stages needs {shared} bytes of shared memory "
            f"for head_dim {problem.head_dim}, over {SHARED_LIMIT}; use fewer stages or a smaller block_n"
        )
    return block_n, stages


@functools.cache
def attention_kernel(elem, head_dim: int, causal: bool, with_lse: bool, scale_first: bool, block_n: int, stages: int):
    """The kernel for one element type, head_dim, masking and tiling (``scale_first``: sm_scale < 0)."""
    d, bm, bn = head_dim, BLOCK_M, block_n
    stride = d + PAD
    q_size, kv_size = bm * stride, bn * stride
    row_chunks = d // CHUNK
    d_steps = d // 16  # k-steps of S = Q K^T
    s_tiles = bn // 8  # n8 tiles of S (keys)
    o_tiles = d // 8  # n8 tiles of O
    p_steps = bn // 16  # k-steps of O += P V

    @cube
    def copy_rows(src, dst, pipe, base: u32, row0: u32, rows: u32, count: Comptime[int], offset: u32):
        """This unit's 16-byte chunks of rows ``row0 .. row0 + count`` (zeros from ``rows`` on) into ``dst``."""
        for i in cp.unroll(range(count * row_chunks // UNITS)):
            c = UNIT_POS + i * UNITS
            r = c // row_chunks
            col = (c % row_chunks) * CHUNK
            valid = row0 + r < rows
            start = cp.select(valid, base + (row0 + r) * d + col, base)  # nothing is read for a row past the end
            end = cp.select(valid, start + CHUNK, start)
            at = offset + r * stride + col
            pipe.memcpy_async(src.slice(start, end), dst[at : at + CHUNK])

    @cube
    def stage_kv(k, v, k_smem, v_smem, pipe, kv_base: u32, seq_k: u32, tile: u32):
        """Open, fill and commit the stage of key tile ``tile`` (its slot ``tile % stages``)."""
        pipe.producer_acquire()
        slot = (tile % stages) * kv_size
        copy_rows(k, k_smem, pipe, kv_base, tile * bn, seq_k, bn, slot)
        copy_rows(v, v_smem, pipe, kv_base, tile * bn, seq_k, bn, slot)
        pipe.producer_commit()

    @cube
    def tile_step(
        k, v, k_smem, v_smem, pipe, q_frags, acc, stats, kv_base: u32, seq_k: u32, tiles: u32, t: u32, scale: f32,
        masked: Comptime[bool],
    ):  # fmt: skip
        """One key tile: wait for it, refill the freed slot, then S, the online softmax and O += P V."""
        pipe.consumer_wait()
        cp.sync_cube()  # tile t is visible to all; all are done with tile t - 1's slot
        ahead = t + (stages - 1)
        if ahead < tiles:
            stage_kv(k, v, k_smem, v_smem, pipe, kv_base, seq_k, ahead)
        lane = UNIT_POS_PLANE
        slot = (t % stages) * kv_size
        s = []
        for _nt in cp.unroll(range(s_tiles)):
            fragment = cp.mma_fragment(SHAPE, "c", f32)
            for i in cp.unroll(range(4)):
                fragment[i] = 0.0
            s.append(fragment)
        # ldmatrix.x4 of K rows: matrix j is 8 keys x d columns 8j.. of two k-steps: b of k-step 2kk, then 2kk + 1
        k_row = slot + (lane & 7) * stride + (lane >> 3) * 8
        for kk in cp.unroll(range(d_steps // 2)):
            for nt in cp.unroll(range(s_tiles)):
                pair = cp.ldmatrix(k_smem, k_row + nt * 8 * stride + kk * 32, 4)
                b0 = cp.mma_fragment(SHAPE, "b", elem)
                b1 = cp.mma_fragment(SHAPE, "b", elem)
                for i in cp.unroll(range(4)):
                    b0[i] = pair[i]
                    b1[i] = pair[4 + i]
                cp.mma_sync(SHAPE, q_frags[2 * kk], b0, s[nt], out=s[nt])
                cp.mma_sync(SHAPE, q_frags[2 * kk + 1], b1, s[nt], out=s[nt])
        group = lane >> 2
        quad = lane & 3
        if scale_first:  # a negative scale turns the max around: scale every score first (and mask after)
            for nt in cp.unroll(range(s_tiles)):
                for i in cp.unroll(range(4)):
                    s[nt][i] = s[nt][i] * scale
        if masked:
            row0 = CUBE_POS_X * bm + PLANE_POS * 16 + group
            for nt in cp.unroll(range(s_tiles)):
                for i in cp.unroll(range(4)):
                    key = t * bn + nt * 8 + quad * 2 + (i & 1)
                    dead = key >= seq_k
                    if causal:
                        dead = dead or key > row0 + (i >> 1) * 8
                    s[nt][i] = cp.select(dead, f32(-math.inf), s[nt][i])
        for h in cp.unroll(range(2)):  # row group (c0, c1) and row group + 8 (c2, c3)
            peak = s[0][2 * h]
            for nt in cp.unroll(range(s_tiles)):
                for i in cp.unroll(range(2)):
                    if nt + i > 0:
                        peak = cp.max(peak, s[nt][2 * h + i])
            peak = cp.max(peak, cp.plane_shuffle_xor(peak, 1))
            peak = cp.max(peak, cp.plane_shuffle_xor(peak, 2))
            old = stats[h]
            new = cp.max(old, peak) if scale_first else cp.max(old, peak * scale)
            alpha = cp.exp2(old - new)
            stats[h] = new
            total = f32(0.0)
            for nt in cp.unroll(range(s_tiles)):
                for i in cp.unroll(range(2)):
                    if scale_first:
                        p = cp.exp2(s[nt][2 * h + i] - new)
                    else:
                        p = cp.exp2(cp.fma(s[nt][2 * h + i], scale, -new))
                    s[nt][2 * h + i] = p
                    total += p
            stats[2 + h] = stats[2 + h] * alpha + total  # this unit's part of the row sum (the quad adds at the end)
            for ot in cp.unroll(range(o_tiles)):
                for i in cp.unroll(range(2)):
                    acc[ot][2 * h + i] = acc[ot][2 * h + i] * alpha
        # ldmatrix.x4.trans of V rows: matrices (keys 0-7 | 8-15) x (d 0-7 | 8-15): b of n8 tiles 2dp, 2dp + 1
        v_row = slot + ((lane & 7) + ((lane >> 3) & 1) * 8) * stride + (lane >> 4) * 8
        for j in cp.unroll(range(p_steps)):
            a = cp.mma_fragment(SHAPE, "a", elem)
            for i in cp.unroll(range(4)):  # C of n8 tiles 2j, 2j + 1 = a0..a3, a4..a7 of k-step j
                a[i] = elem(s[2 * j][i])
                a[4 + i] = elem(s[2 * j + 1][i])
            for dp in cp.unroll(range(o_tiles // 2)):
                pair = cp.ldmatrix(v_smem, v_row + j * 16 * stride + dp * 16, 4, True)
                b0 = cp.mma_fragment(SHAPE, "b", elem)
                b1 = cp.mma_fragment(SHAPE, "b", elem)
                for i in cp.unroll(range(4)):
                    b0[i] = pair[i]
                    b1[i] = pair[4 + i]
                cp.mma_sync(SHAPE, a, b0, acc[2 * dp], out=acc[2 * dp])
                cp.mma_sync(SHAPE, a, b1, acc[2 * dp + 1], out=acc[2 * dp + 1])
        pipe.consumer_release()

    @cube
    def attention_body(q, k, v, o, lse, seq_q: u32, seq_k: u32, scale: f32):
        """The whole kernel; ``lse`` is None (comptime) when it is not asked for."""
        q_smem = SharedMemory.aligned(elem, q_size, 16)
        k_smem = SharedMemory.aligned(elem, stages * kv_size, 16)
        v_smem = SharedMemory.aligned(elem, stages * kv_size, 16)
        pipe = cp.Pipeline(stages)
        m0 = CUBE_POS_X * bm
        bh = CUBE_POS_Y
        q_base = bh * seq_q * d
        kv_base = bh * seq_k * d
        lane = UNIT_POS_PLANE
        tiles = (seq_k + (bn - 1)) // bn
        full = seq_k // bn
        if causal:  # keys up to the block's last query; unmasked tiles end at or before its first
            tiles = cp.min(tiles, (m0 + (bm + bn - 1)) // bn)
            full = cp.min(full, (m0 + 1) // bn)
        pipe.producer_acquire()
        copy_rows(q, q_smem, pipe, q_base, m0, seq_q, bm, u32(0))
        pipe.producer_commit()
        for p in cp.unroll(range(stages - 1)):
            if u32(p) < tiles:
                stage_kv(k, v, k_smem, v_smem, pipe, kv_base, seq_k, u32(p))
        pipe.consumer_wait()
        cp.sync_cube()
        # ldmatrix.x4 a fragments: lane 8j + r points at row r (+ 8 for j odd), column 8 (j >> 1) of the 16x16 tile
        q_row = (PLANE_POS * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * stride + (lane >> 4) * 8
        q_frags = []
        for kk in cp.unroll(range(d_steps)):
            q_frags.append(cp.ldmatrix(q_smem, q_row + kk * 16, 4))
        pipe.consumer_release()
        acc = []
        for _ot in cp.unroll(range(o_tiles)):
            fragment = cp.mma_fragment(SHAPE, "c", f32)
            for i in cp.unroll(range(4)):
                fragment[i] = 0.0
            acc.append(fragment)
        stats = LocalArray[f32](4)  # running max of rows group, group + 8 (log2 domain), then their partial sums
        stats[0] = f32(-math.inf)
        stats[1] = f32(-math.inf)
        stats[2] = f32(0.0)
        stats[3] = f32(0.0)
        for t in range(full):
            tile_step(k, v, k_smem, v_smem, pipe, q_frags, acc, stats, kv_base, seq_k, tiles, t, scale, False)
        if bn % bm == 0:  # a block's diagonal lies in one key tile, and the ragged end is that tile or none
            if full < tiles:
                tile_step(k, v, k_smem, v_smem, pipe, q_frags, acc, stats, kv_base, seq_k, tiles, full, scale, True)
        else:
            for t in range(full, tiles):
                tile_step(k, v, k_smem, v_smem, pipe, q_frags, acc, stats, kv_base, seq_k, tiles, t, scale, True)
        group = lane >> 2
        quad = lane & 3
        for h in cp.unroll(range(2)):
            total = stats[2 + h]
            total += cp.plane_shuffle_xor(total, 1)
            total += cp.plane_shuffle_xor(total, 2)
            inv = f32(1.0) / total
            row = m0 + PLANE_POS * 16 + group + h * 8
            if row < seq_q:
                at = q_base + row * d + quad * 2
                for ot in cp.unroll(range(o_tiles)):
                    for i in cp.unroll(range(2)):
                        o[at + ot * 8 + i] = elem(acc[ot][2 * h + i] * inv)
                if lse is not None:
                    if quad == 0:
                        lse[bh * seq_q + row] = stats[h] * LN2 + cp.log(total)

    if with_lse:

        @cube(launch=True, fastmath=FASTMATH)
        def mma_sync_attention_lse(
            q: Array[elem], k: Array[elem], v: Array[elem], o: Array[elem], lse: Array[f32], seq_q: u32, seq_k: u32,
            scale: f32,
        ):  # fmt: skip
            attention_body(q, k, v, o, lse, seq_q, seq_k, scale)

        return mma_sync_attention_lse

    @cube(launch=True, fastmath=FASTMATH)
    def mma_sync_attention(
        q: Array[elem], k: Array[elem], v: Array[elem], o: Array[elem], seq_q: u32, seq_k: u32, scale: f32
    ):
        attention_body(q, k, v, o, None, seq_q, seq_k, scale)

    return mma_sync_attention


def attention_launch(problem: AttentionProblem, config: AttentionConfig, q, k, v, o, lse) -> MmaSyncAttentionLaunch:
    """The launch writing ``o`` (and ``lse`` when not None) for contiguous (B, H, S, D) handles ``q, k, v``."""
    block_n, stages = resolve_config(problem, config)
    items = problem.batch * problem.heads * max(problem.seq_q, problem.seq_k) * problem.head_dim
    if items >= 2**32:  # the kernel indexes q, k, v and o with u32
        raise cp.LaunchError(f"mma_sync attention: q, k, v and o must hold fewer than 2**32 items, got {items}")
    with_lse = lse is not None
    kernel = attention_kernel(
        problem.elem, problem.head_dim, problem.causal, with_lse, problem.scale_log2 < 0, block_n, stages
    )
    arrays = [cp.ArrayArg(q), cp.ArrayArg(k), cp.ArrayArg(v), cp.ArrayArg(o)]
    if with_lse:
        arrays.append(cp.ArrayArg(lse))
    args = (
        *arrays,
        cp.ScalarArg(problem.seq_q, u32),
        cp.ScalarArg(problem.seq_k, u32),
        cp.ScalarArg(problem.scale_log2, f32),
    )
    cube_count = cp.CubeCount(-(-problem.seq_q // BLOCK_M), problem.batch * problem.heads)
    return MmaSyncAttentionLaunch(kernel, args, cube_count, cp.CubeDim(UNITS))
