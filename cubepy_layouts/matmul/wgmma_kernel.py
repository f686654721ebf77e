"""The device side of ``wgmma_matmul``: the warp-specialized kernel, built once per element types and epilogue.

The host side (configuration, tensor maps, launch) is ``cubepy_layouts.matmul.wgmma_gemm``, whose docstring
describes the algorithm.  Every shape choice is comptime, so each configuration compiles to its own kernel.
"""

import cubepy as cp
from cubepy import (
    CUBE_COUNT_X,
    CUBE_POS_CLUSTER,
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
from cubepy_layouts.matmul.mma_sync import RowMajorLayout
from cubepy_layouts.view import View

LINE_BYTES = 128  # a stage row is one 128-byte swizzle line: 64 f16/bf16 or 128 fp8 values of K
WGMMA_M = 64  # the rows of one warpgroup's wgmma
WARPGROUP = 128
STAGES_FREE_BARRIER = 3  # named barrier of every consumer unit (1 and 2 are the consumer warpgroups' own)
A_ROW_BYTES = 128  # a stage holds one 128-byte line of K per row of A, whatever the input type


def epilogue_reuses_stages(persistent: bool, tile_m: int, tile_n: int, out_size: int, stages: int) -> bool:
    """Whether the TMA-store epilogue's tile takes the bytes of the A stages instead of shared memory of its own:
    when no next tile is prefetched into them (not persistent) and the tile fits in them."""
    return not persistent and tile_m * tile_n * out_size <= stages * tile_m * A_ROW_BYTES


PLANES_PER_WARPGROUP = WARPGROUP // 32
MN_BLOCK = 64  # an MN-major B stage is blocks of 64 columns (one 128-byte line of f16/bf16 per k)
GELU_SCALE = 0.7071067811865476  # 1 / sqrt(2): gelu(x) = x (1 + erf(x / sqrt 2)) / 2


def tile_k_of(elem: cp.ScalarType) -> int:
    """The K of a stage for inputs of ``elem``: one 128-byte line per row."""
    return LINE_BYTES // elem.size


def wgmma_gemm_kernel(elem: cp.ScalarType, out_elem: cp.ScalarType, tma_store: bool, has_bias: bool):
    """The GEMM kernel for inputs of ``elem``, output of ``out_elem``, storing through TMA or directly, with or
    without a bias (an f32 array; without one, the parameter is a comptime placeholder)."""
    key = (elem, out_elem, tma_store, has_bias)
    if key not in _KERNELS:
        _KERNELS[key] = _wgmma_gemm_kernel(*key)
    return _KERNELS[key]


_KERNELS: dict = {}


def _release(empty, cluster_m: int) -> None:
    """Tell every cube that fills this stage that this warpgroup's wgmmas no longer read it."""
    if cluster_m == 1:
        empty.arrive()
    else:
        for peer in range(cluster_m):
            empty.arrive_cluster(u32(peer))


def _tile_origin(work, rank, cluster_rows, n_tiles, cluster_m: int, group: int):
    """``(m tile, n tile)`` of the ``work``-th cluster tile of a persistent cube: clusters walk ``group`` N
    tiles of one cluster row (their A panels stay in L2) before moving down M; both cubes of a cluster
    take the same N tile, so the B tile they multicast is the one both need."""
    band_tiles = cluster_rows * u32(group)
    band = work // band_tiles
    first_n = band * u32(group)
    width = cp.min(u32(group), n_tiles - first_n)
    local = work - band * band_tiles
    return (local // width) * u32(cluster_m) + rank, first_n + local % width


def _stage_parities(done, k_tiles, stages: int):
    """The parity each stage's barriers have reached after ``done`` tiles of ``k_tiles`` k tiles: every tile
    restarts at stage 0, so stage ``s`` is used ``k_tiles // stages`` times, once more when ``s`` is below
    the remainder; computed once per tile, so the k loop only xors them with its round's parity."""
    odd = done & u32(1)
    per, rem = k_tiles // u32(stages), k_tiles % u32(stages)
    return tuple(odd & ((per + cp.select(u32(s) < rem, u32(1), u32(0))) & u32(1)) for s in range(stages))


def _wgmma_gemm_kernel(elem: cp.ScalarType, out_elem: cp.ScalarType, tma_store: bool, has_bias: bool):
    out_type = TensorMap[out_elem] if tma_store else Array[out_elem]
    bias_type = Array[f32] if has_bias else Comptime[int]
    tile_k = tile_k_of(elem)
    k_step = 32 // elem.size  # every wgmma reads 32 bytes of K per row
    # a 16-bit output goes to shared memory 16 columns per stmatrix (tile_n is 64, 128 or 256)
    packed_store = tma_store and out_elem.size == 2

    @cube(launch=True)
    def wgmma_gemm(
        a_map: TensorMap[elem],
        b_map: TensorMap[elem],
        out: out_type,
        bias: bias_type,
        out_layout: RowMajorLayout,
        k: u32,
        m_tiles: u32,
        n_tiles: u32,
        stages: Comptime[int],
        cluster_m: Comptime[int],
        consumers: Comptime[int],
        tile_n: Comptime[int],
        b_mn: Comptime[bool],
        in_flight: Comptime[int],
        registers: Comptime[tuple],
        persistent: Comptime[bool],
        raster_group: Comptime[int],
        activation: Comptime[str],
    ):
        """Blocks of ``(64 consumers) x tile_n`` of ``out``: the warpgroup after the consumers loads, consumer
        warpgroup ``w`` multiplies rows ``64 w ..`` of each block and stores them."""
        tile_m = consumers * WGMMA_M
        a_items = tile_m * tile_k
        b_items = tile_n * tile_k
        a_tiles = SharedMemory.aligned(elem, stages * a_items, 1024)
        b_tiles = SharedMemory.aligned(elem, stages * b_items, 1024)
        full = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
        # one arrival per consumer warpgroup of every cube sharing the stage, after its wgmma group completed
        empty = cp.Barrier.shared_array(stages, consumers * cluster_m, UNIT_POS == 0)
        # The epilogue's tile.  Without a next tile to prefetch (not persistent), the A stages are free once every
        # consumer's last wgmma has read them: the tile then takes their bytes instead of shared memory of its own.
        reuse_stages = tma_store and epilogue_reuses_stages(persistent, tile_m, tile_n, out_elem.size, stages)
        own_tile = SharedMemory.aligned(out_elem, tile_m * tile_n, 128) if tma_store and not reuse_stages else None
        c_tile = SharedMemory.alias(a_tiles, out_elem, tile_m * tile_n) if reuse_stages else own_tile
        rank = CUBE_POS_CLUSTER
        if cluster_m > 1:
            cp.sync_cluster()  # every cube's barriers exist before a peer multicasts into them
        k_tiles = (k + (tile_k - 1)) // tile_k
        # the work of this cube: cluster tiles first, first + step, ... (one tile when not persistent)
        first = u32(0)
        step = u32(1)
        total = u32(1)
        cluster_rows = m_tiles // u32(cluster_m)
        if persistent:
            first = CUBE_POS_X // u32(cluster_m)
            step = CUBE_COUNT_X // u32(cluster_m)
            total = cluster_rows * n_tiles
        if UNIT_POS >= consumers * WARPGROUP:  # the producer warpgroup
            if registers[0] > 0:
                cp.setmaxnreg(registers[0], False)  # it keeps few registers, the consumers take them
            if PLANE_POS == consumers * PLANES_PER_WARPGROUP:  # its first plane loads
                for work in range(first, total, step):
                    m_tile = CUBE_POS_Y
                    n_tile = CUBE_POS_X
                    if persistent:
                        m_tile, n_tile = _tile_origin(work, rank, cluster_rows, n_tiles, cluster_m, raster_group)
                        bases = _stage_parities((work - first) // step, k_tiles, stages)
                    m0 = m_tile * tile_m
                    n0 = n_tile * tile_n
                    for round_start in range(0, k_tiles, stages):
                        for s in cp.unroll(range(stages)):
                            tile = round_start + s
                            if tile < k_tiles:
                                parity = (round_start // stages) % 2  # rounds alternate
                                if persistent:  # tiles restart at stage 0: each stage's own count
                                    parity = parity ^ bases[s]
                                empty[s].wait_parity(parity ^ 1)  # a fresh barrier passes parity 1 at once
                                if UNIT_POS == consumers * WARPGROUP:
                                    k0 = tile * tile_k
                                    full[s].arrive_and_expect_tx(1, (a_items + b_items) * elem.size)
                                    a_stage = a_tiles.slice(s * a_items, (s + 1) * a_items)
                                    b_stage = b_tiles.slice(s * b_items, (s + 1) * b_items)
                                    full[s].tma_load_2d(a_map, a_stage, m0, k0)
                                    mask = (1 << cluster_m) - 1
                                    if b_mn:
                                        # K x N: blocks of 64 columns, each of tile_k k rows; every cube of
                                        # the cluster loads its share of the rows of every block
                                        k_rows = tile_k // cluster_m
                                        for j in cp.unroll(range(tile_n // MN_BLOCK)):
                                            start = j * MN_BLOCK * tile_k + rank * k_rows * MN_BLOCK
                                            part = b_stage.slice(start, start + k_rows * MN_BLOCK)
                                            if cluster_m == 1:
                                                full[s].tma_load_2d(b_map, part, k0, n0 + j * MN_BLOCK)
                                            else:
                                                full[s].tma_load_2d(
                                                    b_map, part, k0 + rank * k_rows, n0 + j * MN_BLOCK, multicast=mask
                                                )
                                    elif cluster_m == 1:
                                        full[s].tma_load_2d(b_map, b_stage, n0, k0)
                                    else:
                                        rows = tile_n // cluster_m  # the rows of the B tile this cube loads
                                        part = b_stage.slice(rank * rows * tile_k, (rank + 1) * rows * tile_k)
                                        full[s].tma_load_2d(b_map, part, n0 + rank * rows, k0, multicast=mask)
        else:
            if registers[1] > 0:
                cp.setmaxnreg(registers[1], True)
            group = UNIT_POS // WARPGROUP
            unit = UNIT_POS % WARPGROUP
            acc = LocalArray[f32](tile_n // 2)
            for work in range(first, total, step):
                m_tile = CUBE_POS_Y
                n_tile = CUBE_POS_X
                if persistent:
                    m_tile, n_tile = _tile_origin(work, rank, cluster_rows, n_tiles, cluster_m, raster_group)
                    bases = _stage_parities((work - first) // step, k_tiles, stages)
                m0 = m_tile * tile_m
                n0 = n_tile * tile_n
                for i in cp.unroll(range(tile_n // 2)):
                    acc[i] = f32(0.0)
                for round_start in range(0, k_tiles, stages):
                    for s in cp.unroll(range(stages)):
                        tile = round_start + s
                        if tile < k_tiles:
                            parity = (round_start // stages) % 2
                            if persistent:
                                parity = parity ^ bases[s]
                            full[s].wait_parity(parity)
                            # 8-row groups are 1024 bytes apart; the swizzle makes the leading offset unused.
                            a_start = s * a_items + group * WGMMA_M * tile_k  # this warpgroup's 64 rows of A
                            a_desc = cp.wgmma_descriptor(
                                a_tiles.slice(a_start, a_start + WGMMA_M * tile_k), 16, 1024, "128B"
                            )
                            b_stage = b_tiles.slice(s * b_items, (s + 1) * b_items)
                            cp.wgmma_fence()
                            if b_mn:
                                # MN-major: 8 k rows are 1024 bytes apart (SBO), 64-column blocks 8 KiB (LBO)
                                b_desc = cp.wgmma_descriptor(b_stage, MN_BLOCK * LINE_BYTES, 1024, "128B")
                                for kk in cp.unroll(range(tile_k // k_step)):
                                    a_step = u64(kk * k_step * elem.size // 16)  # 16-byte units
                                    b_step = u64(kk * k_step * LINE_BYTES // 16)  # k_step rows of 128 bytes
                                    cp.wgmma_mma_async(
                                        acc,
                                        a_desc + a_step,
                                        b_desc + b_step,
                                        shape=(WGMMA_M, int(tile_n), k_step),
                                        elem=elem,
                                        major_b="MN",
                                    )
                            else:
                                b_desc = cp.wgmma_descriptor(b_stage, 16, 1024, "128B")
                                for kk in cp.unroll(range(tile_k // k_step)):
                                    kstep = u64(kk * k_step * elem.size // 16)  # the descriptor counts 16 bytes
                                    cp.wgmma_mma_async(
                                        acc,
                                        a_desc + kstep,
                                        b_desc + kstep,
                                        shape=(WGMMA_M, int(tile_n), k_step),
                                        elem=elem,
                                    )
                            cp.wgmma_commit_group()
                            if in_flight == 1:
                                cp.wgmma_wait_group(0)  # this stage's group is complete
                                if unit == 0:
                                    _release(empty[s], cluster_m)
                            else:
                                # the previous stage's group is complete, this one may still read its stage
                                cp.wgmma_wait_group(1)
                                if unit == 0 and tile > 0:
                                    _release(empty[(s + stages - 1) % stages], cluster_m)
                cp.wgmma_wait_group(0)
                if in_flight > 1 and unit == 0 and k_tiles > 0:
                    last = (k_tiles - 1) % stages  # the stage of the last k tile, not released in the loop
                    for s in cp.unroll(range(stages)):
                        if last == s:
                            _release(empty[s], cluster_m)
                if reuse_stages:
                    # every consumer's wgmmas have read their last stage: c_tile may overwrite the A stages
                    cp.named_barrier_sync(STAGES_FREE_BARRIER, consumers * WARPGROUP)
                elif tma_store:
                    # the previous tile's store has read c_tile (its storing unit waited before this barrier)
                    cp.named_barrier_sync(1 + group, WARPGROUP)
                for i in cp.unroll(range(tile_n // 2)):
                    row, col = cp.wgmma_accumulator_position(unit, i)
                    value = acc[i]
                    if has_bias:
                        value = value + bias[cp.select(n0 + col < bias.len(), n0 + col, u32(0))]
                    if activation == "relu":
                        value = cp.max(value, f32(0.0))
                    elif activation == "gelu":
                        value = f32(0.5) * value * (f32(1.0) + cp.erf(value * f32(GELU_SCALE)))
                    if packed_store:
                        acc[i] = value  # stored 16 columns at a time below
                    elif tma_store:
                        c_tile[(group * WGMMA_M + row) * tile_n + col] = out_elem(value)
                    else:
                        View(out, out_layout).write_checked((m0 + group * WGMMA_M + row, n0 + col), out_elem(value))
                if packed_store:
                    own_rows = c_tile.slice(group * WGMMA_M * tile_n, (group + 1) * WGMMA_M * tile_n)
                    cp.wgmma_store_accumulator(acc, own_rows, out_elem, tile_n)
                if tma_store:
                    cp.fence_proxy_async()  # this unit's stores are visible to the TMA unit
                    cp.named_barrier_sync(1 + group, WARPGROUP)
                    if unit == 0:  # TMA drops the rows and columns past the matrix
                        rows = c_tile.slice(group * WGMMA_M * tile_n, (group + 1) * WGMMA_M * tile_n)
                        cp.tma_store_2d(rows, out, m0 + group * WGMMA_M, n0)
                        cp.tma_group_commit()
                        cp.tma_group_wait_read(0)
            if tma_store and unit == 0:
                cp.tma_group_wait(0)
        if cluster_m > 1:
            cp.sync_cluster()  # no cube leaves while a peer may still multicast or arrive into it

    return wgmma_gemm
