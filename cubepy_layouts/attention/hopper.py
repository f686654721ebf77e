"""FlashAttention forward for Hopper (sm_90a): TMA producer, consumer warpgroups on ``wgmma`` (FlashAttention-3's plan).

A cube computes ``block_m`` query rows of one (batch, head): the grid is ``ceil(seq_q / block_m) x (batch * heads)``.
The cube is ``consumers + 1`` warpgroups (``block_m = 64 consumers``):

- the last warpgroup produces: it gives registers back (``setmaxnreg.dec``), and its first plane loads the
  query tile once and the K and V tiles of every key block through a ring of ``stages`` shared-memory stages
  (TMA, 128-byte swizzle, a *k_full* and a *v_full* mbarrier per stage, so S = Q K^T may start before V has
  landed; K and V are released apart, on *k_empty* once every consumer's S has completed and on *v_empty*
  once its P V has);
- consumer warpgroup ``w`` owns query rows ``64 w ..`` of the block.  Trip ``j`` converts P_{j-1} (still in
  the S accumulator) to A fragments (``wgmma_a_from_accumulator``), starts ``S_j = Q K_j^T`` (both operands
  K-major in shared memory) and ``O += P_{j-1} V_{j-1}`` (P from registers, V MN-major) as two wgmma groups,
  waits for S_j alone (``wgmma_wait_group(1)``), masks it if the block needs it and runs the online softmax
  in registers on ``exp2`` with the scale folded in (running max ``m`` and sum ``l`` per row; the 4 units of
  a quad share a row) while P V still runs, then waits for P V and rescales O.  The first trip has no P V and
  the one after the last block no S: both are peeled off the loop.
- with two consumer warpgroups they take turns issuing their wgmmas (ping-pong): each waits at named barrier
  ``TURN_BARRIER + w`` and, once its wgmmas are issued, arrives at the other's, so one warpgroup's softmax
  overlaps the other's products.

The tensor maps are 3-D, ``(batch * heads, seq, head_dim)`` with boxes ``(1, rows, 64)``: rows past a head's
sequence are outside the map, so TMA fills them with zeros instead of loading the next head's rows.  Keys past
``seq_k`` still score 0, so they are masked to ``-inf``; query rows past ``seq_q`` are computed on zeros and not
stored.  A head_dim of 128 is two boxes of 64 columns (a 128-byte swizzle row holds 64 f16/bf16).  The key
blocks that need no mask run in a loop without it, the others (the ragged last block, those crossing the
causal diagonal) in a second loop with it (``split_masked_loop``).

Causal (top-left aligned): a cube stops at the last key block that holds a key ``<= its last query row``, so
blocks wholly above the diagonal are never loaded.  Every row's first key block holds key 0, which no mask
removes, so the running max is finite after the first block and ``exp2(m_old - m_new)`` never sees
``-inf - -inf``.

Epilogue: each consumer warpgroup writes O / l into its own 64 rows of the query tile (free once its last wgmma
has completed) in the 128-byte swizzled layout (``wgmma_store_accumulator``: one ``stmatrix.x4`` per 16
columns), and one of its units stores them with TMA (a 3-D map of O, boxes
``(1, 64, 64)``, so rows past ``seq_q`` are dropped); the natural-log ``lse = (m + log2 l) ln 2`` is stored by
the first unit of each quad.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

import cubepy as cp
from cubepy import (
    CUBE_POS_X,
    CUBE_POS_Y,
    PLANE_POS,
    UNIT_POS,
    Array,
    Comptime,
    LocalArray,
    SharedMemory,
    TensorMap,
    cube,
    f32,
    u32,
    u64,
)
from cubepy_layouts.attention.config import FASTMATH, AttentionConfig, AttentionProblem

WARPGROUP = 128
WGMMA_M = 64  # the query rows of one consumer warpgroup
BOX_D = 64  # head_dim columns per TMA box: 64 x 2 bytes is the 128-byte swizzle's row
K_STEP = 16  # the K of one f16/bf16 wgmma
LN2 = math.log(2.0)
TURN_BARRIER = 3  # named barriers 3 and 4: the consumer warpgroups' turns (1 and 2 are their epilogues')
PRODUCER_REGISTERS = 24  # setmaxnreg: what the producer warpgroup keeps ...
CONSUMER_REGISTERS = {1: 240, 2: 240}  # ... and what each consumer warpgroup gets (24*128 + 240*256 <= 64 Ki)


@attrs.frozen
class HopperTiles:
    """The resolved tile shape of one launch."""

    block_m: int
    block_n: int
    stages: int

    @property
    def consumers(self) -> int:
        """Consumer warpgroups: one per 64 query rows."""
        return self.block_m // WGMMA_M


def hopper_tiles(problem: AttentionProblem, config: AttentionConfig) -> HopperTiles:
    """The config's tiles with the defaults filled in (128 x 128, 2 stages), checked."""
    block_m = 128 if config.block_m is None else config.block_m
    block_n = 128 if config.block_n is None else config.block_n
    stages = 2 if config.stages is None else config.stages
    if block_m not in (64, 128):
        raise cp.LaunchError(f"attention (wgmma): block_m must be 64 or 128 (one or two warpgroups), got {block_m}")
    if block_n % K_STEP or not K_STEP <= block_n <= 256:
        raise cp.LaunchError(f"attention (wgmma): block_n must be a multiple of 16 in [16, 256], got {block_n}")
    if stages > 4:
        raise cp.LaunchError(f"attention (wgmma): stages must be at most 4, got {stages}")
    tiles = HopperTiles(block_m, block_n, stages)
    if shared_bytes(problem.head_dim, tiles) > 227 * 1024:
        raise cp.LaunchError(
            f"attention (wgmma): {shared_bytes(problem.head_dim, tiles)} bytes of shared memory for {tiles}, "
            "more than sm_90's 227 KiB: fewer stages or a smaller block_n"
        )
    return tiles


def shared_bytes(head_dim: int, tiles: HopperTiles) -> int:
    """The bytes of the query tile and the K/V ring (2-byte elements)."""
    return (tiles.block_m + 2 * tiles.stages * tiles.block_n) * head_dim * 2


SPLIT_LOOP_REGISTERS = 136  # the accumulator registers up to which a second, masked loop costs no spills


def split_masked_loop(head_dim: int, block_n: int) -> bool:
    """Whether the masked key blocks get a loop of their own.  A consumer holds S (``block_n / 2`` f32 per
    unit), O (``head_dim / 2``) and P's fragments (``block_n / 4``) at once; with the trip emitted twice,
    ptxas 13.0 spills on the larger tiles (causal 128 x 128 at head_dim 128: 16 / 28 bytes stored / loaded;
    128 x 192 at 64: 20 / 28) and not with one loop, so past 136 accumulator registers the kernel keeps one
    loop with the mask behind a branch (the largest tiles within 136: 128 x 96 at head_dim 128, 128 x 128 at
    64)."""
    return block_n // 2 + head_dim // 2 + block_n // 4 <= SPLIT_LOOP_REGISTERS


@cube
def _mask_scores(s_acc, unit, n0, row0, seq_k, block_n, causal):
    """Set the scores of keys past ``seq_k`` (and, causal, of keys after the query) to ``-inf``: one compare per
    score, against the first dead key of its row (a unit's scores lie in two rows, elements ``4c + 2h + e``
    in row half ``h``)."""
    row_a, _ = cp.wgmma_accumulator_position(unit, 0)
    row_b, _ = cp.wgmma_accumulator_position(unit, 2)
    end_a = seq_k
    end_b = seq_k
    if causal:
        end_a = cp.min(seq_k, row0 + row_a + 1)
        end_b = cp.min(seq_k, row0 + row_b + 1)
    for i in cp.unroll(range(block_n // 2)):
        _, col = cp.wgmma_accumulator_position(unit, i)
        if n0 + col >= (end_b if (i // 2) % 2 else end_a):
            s_acc[i] = f32(-math.inf)


@attrs.frozen
class ConsumerTile:
    """A consumer warpgroup's steps on its 64 query rows: the wgmmas it issues and its register math (expanded
    inline into the kernel; nothing here branches at run time)."""

    elem: Any
    head_dim: Any  # head_dim, block_m and block_n are the kernel's Comptime[int] parameters
    block_m: Any
    block_n: Any
    group: Any  # the warpgroup index (a runtime value)
    consumers: Any  # 1, or 2 taking turns (ping-pong)

    @property
    def pingpong(self) -> bool:
        """Whether two consumer warpgroups take turns issuing their wgmmas."""
        return self.consumers == 2

    def wait_turn(self) -> None:
        """Ping-pong: wait until it is this warpgroup's turn to issue wgmmas (named barrier TURN_BARRIER + group,
        completed by the other warpgroup's hand-over); nothing with one consumer warpgroup."""
        if self.pingpong:
            cp.named_barrier_sync(TURN_BARRIER + self.group, 2 * WARPGROUP)

    def hand_turn(self) -> None:
        """Ping-pong: give the turn to the other consumer warpgroup, without waiting."""
        if self.pingpong:
            cp.named_barrier_arrive(TURN_BARRIER + 1 - self.group, 2 * WARPGROUP)

    def issue_scores(self, s_acc, q_tile, k_ring, stage) -> None:
        """Start S = Q K^T for the key block in ``stage``: head_dim / 16 steps on K-major descriptors."""
        kv_items = self.block_n * self.head_dim
        for kk in range(self.head_dim // K_STEP):
            b, within = kk // 4, u64(kk % 4 * K_STEP * 2 // 16)  # box, 16-byte units into it
            q_at = b * self.block_m * BOX_D + self.group * WGMMA_M * BOX_D
            k_at = stage * kv_items + b * self.block_n * BOX_D
            q_desc = cp.wgmma_descriptor(q_tile.slice(q_at, q_at + WGMMA_M * BOX_D), 16, 1024, "128B")
            k_desc = cp.wgmma_descriptor(k_ring.slice(k_at, k_at + self.block_n * BOX_D), 16, 1024, "128B")
            cp.wgmma_mma_async(
                s_acc,
                q_desc + within,
                k_desc + within,
                shape=(WGMMA_M, self.block_n, K_STEP),
                elem=self.elem,
                scale_d=kk > 0,
            )

    def issue_values(self, o_acc, p_frags, v_ring, stage) -> None:
        """Start O += P V for the value block in ``stage``: P from registers, V MN-major (its rows are the keys)."""
        kv_items = self.block_n * self.head_dim
        v_desc = cp.wgmma_descriptor(
            v_ring.slice(stage * kv_items, stage * kv_items + kv_items), self.block_n * BOX_D * 2, 1024, "128B"
        )
        for step in range(self.block_n // K_STEP):
            cp.wgmma_mma_async(
                o_acc,
                p_frags[step],
                v_desc + u64(step * K_STEP * BOX_D * 2 // 16),  # 16 rows of 128 bytes
                shape=(WGMMA_M, self.head_dim, K_STEP),
                elem=self.elem,
                major_b="MN",
            )

    def scale(self, s_acc, factor) -> None:
        """Multiply the scores by ``factor`` (before the mask when the scale is not positive)."""
        for i in range(self.block_n // 2):
            s_acc[i] = s_acc[i] * factor

    def online_softmax(self, s_acc, peak, total, alpha, scale) -> None:
        """Turn scores into probabilities ``exp2(s scale - max)``, raising the running max ``peak`` and sum
        ``total``; ``alpha`` gets ``exp2(old max - new max)``, the factor O and the sum are rescaled by."""
        for h in range(2):
            best = s_acc[2 * h]
            for c in range(self.block_n // 8):
                for e in range(2):
                    if c + e > 0:
                        best = cp.max(best, s_acc[4 * c + 2 * h + e])
            best = cp.max(best, cp.plane_shuffle_xor(best, 1))  # the 4 units of a quad share a row
            best = cp.max(best, cp.plane_shuffle_xor(best, 2))
            new_peak = cp.max(peak[h], best * scale)
            alpha[h] = cp.exp2(peak[h] - new_peak)
            peak[h] = new_peak
        for h in range(2):
            row_sum = f32(0.0)
            for c in range(self.block_n // 8):
                for e in range(2):
                    i = 4 * c + 2 * h + e
                    p = cp.exp2(cp.fma(s_acc[i], scale, -peak[h]))
                    s_acc[i] = p
                    row_sum += p
            total[h] = total[h] * alpha[h] + row_sum

    def rescale(self, o_acc, alpha) -> None:
        """O *= alpha of its row (accumulator elements 2 and 3 of every 4 are the second row half)."""
        for i in range(self.head_dim // 2):
            o_acc[i] = o_acc[i] * alpha[(i // 2) % 2]

    def fragments(self, s_acc) -> list:
        """The probabilities rounded to 16 bits: the A fragments (16 keys each) of their P V."""
        return [cp.wgmma_a_from_accumulator(s_acc, step, self.elem) for step in range(self.block_n // K_STEP)]


_KERNELS: dict = {}


def attention_kernel(elem: cp.ScalarType, lse_elem: cp.ScalarType):
    """The forward kernel for ``elem`` (f16, bf16); ``lse_elem`` is f32, or ``elem`` when no lse is written."""
    key = (elem, lse_elem)
    if key not in _KERNELS:
        _KERNELS[key] = _attention_kernel(elem, lse_elem)
    return _KERNELS[key]


def _attention_kernel(elem: cp.ScalarType, lse_elem: cp.ScalarType):  # noqa: C901 - one kernel, read top-down
    @cube(launch=True, fastmath=FASTMATH)
    def flash_attention_wgmma(
        q_map: TensorMap[elem],
        k_map: TensorMap[elem],
        v_map: TensorMap[elem],
        o_map: TensorMap[elem],
        lse: Array[lse_elem],
        seq_q: u32,
        seq_k: u32,
        scale_log2: f32,
        head_dim: Comptime[int],
        block_n: Comptime[int],
        consumers: Comptime[int],
        stages: Comptime[int],
        causal: Comptime[bool],
        prescale: Comptime[bool],
        write_lse: Comptime[bool],
        split_loops: Comptime[bool],
    ):
        """Rows ``CUBE_POS_X * 64 consumers ..`` of head ``CUBE_POS_Y`` (batch * heads + head)."""
        block_m = consumers * WGMMA_M
        boxes = head_dim // BOX_D
        q_items = block_m * head_dim
        kv_items = block_n * head_dim
        bh = CUBE_POS_Y
        m0 = CUBE_POS_X * block_m
        q_tile = SharedMemory.aligned(elem, q_items, 1024)
        k_ring = SharedMemory.aligned(elem, stages * kv_items, 1024)
        v_ring = SharedMemory.aligned(elem, stages * kv_items, 1024)
        q_full = cp.Barrier.shared(1, UNIT_POS == 0)
        k_full = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
        v_full = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
        # K and V of a stage are released apart: K once S = Q K^T has completed, V once P V has
        k_empty = cp.Barrier.shared_array(stages, consumers, UNIT_POS == 0)
        v_empty = cp.Barrier.shared_array(stages, consumers, UNIT_POS == 0)
        # the keys this cube needs: causal stops after the key of its last (existing) query row
        key_end = seq_k
        if causal:
            key_end = cp.min(seq_k, cp.min(m0 + block_m, seq_q))
        n_blocks = (key_end + (block_n - 1)) // block_n
        if UNIT_POS >= consumers * WARPGROUP:  # the producer warpgroup
            cp.setmaxnreg(PRODUCER_REGISTERS, False)
            if PLANE_POS == consumers * 4:
                if UNIT_POS == consumers * WARPGROUP:
                    q_full.arrive_and_expect_tx(1, q_items * elem.size)
                    for b in cp.unroll(range(boxes)):
                        part = q_tile.slice(b * block_m * BOX_D, (b + 1) * block_m * BOX_D)
                        q_full.tma_load_3d(q_map, part, bh, m0, b * BOX_D)
                for round_start in range(0, n_blocks, stages):
                    parity = (round_start // stages) % 2
                    for s in cp.unroll(range(stages)):
                        j = round_start + s
                        if j < n_blocks:
                            for full, empty, ring, tmap in (
                                (k_full, k_empty, k_ring, k_map),
                                (v_full, v_empty, v_ring, v_map),
                            ):
                                empty[s].wait_parity(parity ^ 1)  # a fresh barrier passes parity 1 at once
                                if UNIT_POS == consumers * WARPGROUP:
                                    full[s].arrive_and_expect_tx(1, kv_items * elem.size)
                                    for b in cp.unroll(range(boxes)):
                                        at = s * kv_items + b * block_n * BOX_D
                                        part = ring.slice(at, at + block_n * BOX_D)
                                        full[s].tma_load_3d(tmap, part, bh, j * block_n, b * BOX_D)
        else:  # consumer warpgroup `group`: query rows 64 group ..
            cp.setmaxnreg(CONSUMER_REGISTERS[consumers], True)
            group = UNIT_POS // WARPGROUP
            unit = UNIT_POS % WARPGROUP
            row0 = m0 + group * WGMMA_M  # this warpgroup's first query row
            tile = ConsumerTile(elem, head_dim, block_m, block_n, group, consumers)
            s_acc = LocalArray[f32](block_n // 2)
            o_acc = LocalArray[f32](head_dim // 2)
            peak = LocalArray[f32](2)  # the running max of row halves 0 and 1, in exp2 units
            total = LocalArray[f32](2)  # this unit's part of the running sum of each row
            alpha = LocalArray[f32](2)  # exp2(old max - new max): the rescale of O and the sum
            for i in cp.unroll(range(head_dim // 2)):
                o_acc[i] = f32(0.0)
            for h in cp.unroll(range(2)):
                peak[h] = f32(-math.inf)
                total[h] = f32(0.0)
            # Ping-pong (two consumer warpgroups): each issues its wgmmas only on its turn (named barrier
            # TURN_BARRIER + group) and hands the turn on once they are issued, so one warpgroup's softmax
            # runs while the other's wgmmas use the tensor cores.  Warpgroup 0 has the first turn.
            if tile.pingpong:
                if group == 1:
                    cp.named_barrier_arrive(TURN_BARRIER, 2 * WARPGROUP)
            q_full.wait_parity(0)
            # Trip j issues S_j = Q K_j^T and then P_{j-1} V_{j-1} (FlashAttention-3's overlap inside a
            # warpgroup: P V runs on the tensor cores while the softmax of S_j runs).  Trip 0 has no P V and
            # the trip after the last block no S, so both are peeled off the loop.
            k_full[0].wait_parity(0)
            tile.wait_turn()
            cp.wgmma_fence()
            tile.issue_scores(s_acc, q_tile, k_ring, 0)
            cp.wgmma_commit_group()
            tile.hand_turn()
            cp.wgmma_wait_group(0)
            if unit == 0:
                k_empty[0].arrive()
            if prescale:  # sm_scale <= 0: scale first, so the mask's -inf stays -inf
                tile.scale(s_acc, scale_log2)
            _mask_scores(s_acc, unit, u32(0), row0, seq_k, block_n, causal)
            tile.online_softmax(s_acc, peak, total, alpha, f32(1.0) if prescale else scale_log2)
            # The key blocks that need no mask (wholly below seq_k and, causal, at or below the diagonal of this
            # warpgroup's first row) run in a loop without it; the rest (the ragged last block, the blocks
            # crossing the diagonal) in a second loop with it, as Triton splits its causal loop.  Large tiles
            # keep one loop with the mask behind a branch (split_masked_loop says why).
            unmasked_end = cp.min(n_blocks, seq_k // block_n)
            if causal:
                unmasked_end = cp.min(unmasked_end, (row0 + 1) // block_n)
            for masked in cp.unroll((False, True) if split_loops else (True,)):
                lo = cp.max(unmasked_end, u32(1)) if masked and split_loops else u32(1)  # block 0 was trip 0
                hi = n_blocks if masked else unmasked_end
                for round_start in range(lo // stages * stages, hi, stages):
                    parity = (round_start // stages) % 2
                    for s in cp.unroll(range(stages)):
                        j = round_start + s
                        in_loop = j < hi
                        if masked or s == 0:  # a round may start before lo
                            in_loop = in_loop and j >= lo
                        if in_loop:
                            prev = (s + stages - 1) % stages  # the stage of block j - 1 ...
                            prev_parity = parity ^ 1 if s == 0 else parity  # ... and its phase
                            k_full[s].wait_parity(parity)
                            v_full[prev].wait_parity(prev_parity)
                            tile.wait_turn()
                            # P_{j-1} (still in s_acc) to A fragments before S_j overwrites s_acc: here, in the block
                            # that issues P V, the conversions pair into packed f16x2 instructions
                            p_frags = tile.fragments(s_acc)
                            cp.wgmma_fence()
                            tile.issue_scores(s_acc, q_tile, k_ring, s)
                            cp.wgmma_commit_group()
                            tile.issue_values(o_acc, p_frags, v_ring, prev)
                            cp.wgmma_commit_group()
                            tile.hand_turn()
                            cp.wgmma_wait_group(1)  # S_j is complete; P_{j-1} V_{j-1} may still run
                            if unit == 0:
                                k_empty[s].arrive()
                            if prescale:
                                tile.scale(s_acc, scale_log2)
                            if split_loops:
                                if masked:
                                    _mask_scores(s_acc, unit, j * block_n, row0, seq_k, block_n, causal)
                            elif j >= unmasked_end:  # one loop: the mask behind a branch
                                _mask_scores(s_acc, unit, j * block_n, row0, seq_k, block_n, causal)
                            tile.online_softmax(s_acc, peak, total, alpha, f32(1.0) if prescale else scale_log2)
                            cp.wgmma_wait_group(0)  # P_{j-1} V_{j-1} is complete: O and the P fragments are free
                            if unit == 0:
                                v_empty[prev].arrive()
                            tile.rescale(o_acc, alpha)
            # the last trip: P V of the last block, whose stage is known only at run time
            last = n_blocks - 1
            last_stage = last % stages
            for s in cp.unroll(range(stages)):
                if last_stage == s:
                    v_full[s].wait_parity((last // stages) % 2)
            tile.wait_turn()
            p_frags = tile.fragments(s_acc)
            cp.wgmma_fence()
            tile.issue_values(o_acc, p_frags, v_ring, last_stage)
            cp.wgmma_commit_group()
            if tile.pingpong:
                if group == 0:  # warpgroup 1's last turn hands nothing on
                    cp.named_barrier_arrive(TURN_BARRIER + 1, 2 * WARPGROUP)
            cp.wgmma_wait_group(0)
            for h in cp.unroll(range(2)):
                whole = total[h] + cp.plane_shuffle_xor(total[h], 1)
                total[h] = whole + cp.plane_shuffle_xor(whole, 2)
            # The epilogue through shared memory: this warpgroup's 64 rows of the query tile are free (its last
            # wgmma has completed), so O / l goes there in the 128-byte swizzled layout the query was loaded in,
            # and one TMA store per 64-column box writes it; TMA drops the rows past seq_q.
            for i in cp.unroll(range(head_dim // 2)):
                o_acc[i] = o_acc[i] / total[(i // 2) % 2]
            own_rows = q_tile.slice(group * WGMMA_M * BOX_D, q_items)  # box b of them is block_m rows further
            cp.wgmma_store_accumulator(o_acc, own_rows, elem, layout="128B", box_items=block_m * BOX_D)
            cp.fence_proxy_async()  # the stores above are visible to the TMA unit
            cp.named_barrier_sync(1 + group, WARPGROUP)
            if unit == 0:
                for b in cp.unroll(range(boxes)):
                    at = b * block_m * BOX_D + group * WGMMA_M * BOX_D
                    cp.tma_store_3d(q_tile.slice(at, at + WGMMA_M * BOX_D), o_map, bh, row0, b * BOX_D)
                cp.tma_group_commit()
                cp.tma_group_wait(0)  # the shared memory stays valid until TMA has read it
            if write_lse:
                if unit % 4 == 0:
                    for h in cp.unroll(range(2)):
                        row, _ = cp.wgmma_accumulator_position(unit, 2 * h)
                        if row0 + row < seq_q:
                            lse[bh * seq_q + row0 + row] = (peak[h] + cp.log2(total[h])) * f32(LN2)

    return flash_attention_wgmma


@attrs.frozen
class HopperAttentionLaunch:
    """Everything the wgmma attention kernel is launched with."""

    kernel: Any  # the @cube(launch=True) kernel
    args: tuple
    cube_count: cp.CubeCount
    cube_dim: cp.CubeDim
    tiles: HopperTiles

    def launch(self, client) -> None:
        """Run the kernel."""
        self.kernel.launch(client, self.cube_count, self.cube_dim, *self.args)

    def compile(self, target: str = "sm_90a", **options):
        """The compiled kernel (PTX and, with ptxas, its resources); ``options`` as for ``kernel.compile``."""
        return self.kernel.compile(self.cube_dim, *self.args, target=target, **options)


def _head_map(handle, rows: int) -> cp.TensorMapArg:
    """A 3-D map ``(batch * heads, seq, head_dim)`` of a contiguous (B, H, S, D) handle, boxes ``(1, rows, 64)``."""
    batch, heads, seq, dim = handle.shape
    view = cp.TensorArg.from_raw_parts(handle, (seq * dim, dim, 1), (batch * heads, seq, dim))
    return cp.TensorMapArg.tiled(view, (1, rows, BOX_D), swizzle="128B")


def attention_launch(problem: AttentionProblem, config: AttentionConfig, q, k, v, o, lse) -> HopperAttentionLaunch:
    """The launch writing ``o`` (and ``lse`` when it is not None) for the handles q, k, v (B, H, S, D)."""
    tiles = hopper_tiles(problem, config)
    if not math.isfinite(problem.sm_scale):
        raise cp.LaunchError(f"attention (wgmma): sm_scale must be finite, got {problem.sm_scale}")
    write_lse = lse is not None
    elem = problem.elem
    # no lse: the parameter takes o's type and o itself, and the kernel never touches it
    kernel = attention_kernel(elem, f32 if write_lse else elem)
    args = (
        _head_map(q, tiles.block_m),
        _head_map(k, tiles.block_n),
        _head_map(v, tiles.block_n),
        _head_map(o, WGMMA_M),
        cp.ArrayArg(lse if write_lse else o),
        cp.ScalarArg(problem.seq_q, u32),
        cp.ScalarArg(problem.seq_k, u32),
        cp.ScalarArg(problem.scale_log2, f32),
        problem.head_dim,
        tiles.block_n,
        tiles.consumers,
        tiles.stages,
        problem.causal,
        problem.sm_scale <= 0,
        write_lse,
        split_masked_loop(problem.head_dim, tiles.block_n),
    )
    count = cp.CubeCount(-(-problem.seq_q // tiles.block_m), problem.batch * problem.heads)
    return HopperAttentionLaunch(kernel, args, count, cp.CubeDim((tiles.consumers + 1) * WARPGROUP), tiles)
