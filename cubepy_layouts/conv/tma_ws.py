"""The warp-specialized TMA implicit GEMM: one producer plane, consumer planes, full/empty barriers.

The same operands, layouts and tiles as ``tma_gemm`` (so fprop and wgrad both run on it), split by job:

- plane 0 is the *producer*: for k tile ``t`` it waits until stage ``t % stages`` is empty, and its
  elected unit expects both boxes' bytes on the stage's *full* barrier and starts both TMA loads;
- planes ``1 .. consumers`` are *consumers*: consumer ``c`` owns the stages ``s`` with
  ``s % consumers == c`` and takes every k tile that lands in them; it waits for the stage's *full* phase, loads its tensor-core fragments,
  releases the stage (every unit of the plane arrives on the *empty* barrier) and multiplies into its
  own accumulator;
- at the end the consumers put their partial sums in shared memory, meet at named barrier 1 (the
  producer is not part of it) and add the partial sums into ``out``.

Phases: tile ``t`` is round ``r = t // stages`` of its stage.  Its *full* wait passes once the
stage's ``r``-th fill completed (``wait_parity(r % 2)``); the producer's *empty* wait for it passes
once the consumers released round ``r - 1`` (``wait_parity((r % 2) ^ 1)``, which a fresh barrier passes
at once: the phase "before" phase 0 counts as complete).  A parity names a phase only up to two, so a
waiter must see every phase of its barrier: that is why a stage belongs to one consumer (a consumer
that took every other tile of a stage could be two phases behind and pass a wait on a stale fill).

``skip_full_wait`` builds a deliberately broken kernel: the consumers read the first round of stages
without waiting for their copies (the lockstep schedule lands a copy at its issue, so it still gives the
right answer there), for tests of the sanitizer and of the random schedules.
"""

import attrs

import cubepy as cp
from cubepy import (
    CUBE_POS_X,
    CUBE_POS_Y,
    PLANE_POS,
    UNIT_POS,
    UNIT_POS_PLANE,
    Comptime,
    SharedMemory,
    Tensor,
    TensorMap,
    cube,
    f32,
)
from cubepy_layouts.chain import Chain
from cubepy_layouts.conv.problem import ConvolutionProblem
from cubepy_layouts.conv.tma_fprop import fprop_tma_launch
from cubepy_layouts.conv.tma_gemm import TILE, TILE_ITEMS, TmaGemmConfig, issue_stage
from cubepy_layouts.conv.tma_wgrad import wgrad_tma_launch
from cubepy_layouts.view import View
from cubepy_layouts.virtual import VirtualLayout

PLANE = 32
CONSUMERS_BARRIER = 1  # the named barrier of the consumer planes (0 is sync_cube's)


@attrs.frozen
class TmaWsConfig:
    """The warp-specialized blocking: a ring of ``stages`` buffers, ``consumers`` consumer planes."""

    stages: int = 4
    consumers: int = 2

    def __attrs_post_init__(self) -> None:
        if self.stages < 1 or self.consumers < 1:
            raise ValueError(f"stages and consumers must be at least 1, got {self.stages} and {self.consumers}")


DEFAULT_WS_CONFIG = TmaWsConfig()


def _tma_ws_kernel(elem: cp.ScalarType):
    @cube(launch=True)
    def conv2d_tma_ws_gemm(
        lhs_map: TensorMap[elem],
        rhs_map: TensorMap[elem],
        out_data: Tensor[f32],
        lhs_layout: VirtualLayout,
        rhs_layout: VirtualLayout,
        out_layout: Chain,
        a_layout: Comptime[str],
        b_layout: Comptime[str],
        stages: Comptime[int],
        consumers: Comptime[int],
        skip_full_wait: Comptime[bool],
    ):
        """The ``16 x 16`` block of ``out`` at ``(CUBE_POS_Y, CUBE_POS_X)``: plane 0 loads, the others multiply."""
        lhs = View(lhs_map, lhs_layout)  # (batch, m, k)
        rhs = View(rhs_map, rhs_layout)  # (batch, k, n)
        out = View(out_data, out_layout)  # (m, n)
        m0 = CUBE_POS_Y * TILE
        n0 = CUBE_POS_X * TILE
        a_tiles = SharedMemory.aligned(elem, stages * TILE_ITEMS, 128)
        b_tiles = SharedMemory.aligned(elem, stages * TILE_ITEMS, 128)
        full = cp.Barrier.shared_array(stages, 1, UNIT_POS == 0)
        empty = cp.Barrier.shared_array(stages, PLANE, UNIT_POS == 0)
        partial = SharedMemory[f32](consumers * TILE_ITEMS)
        _batches, _m, k = lhs.shape()
        k_tiles = (k + (TILE - 1)) // TILE
        if PLANE_POS == 0:
            for round_start in range(0, k_tiles, stages):
                parity = (round_start // stages) % 2
                for s in cp.unroll(range(stages)):
                    tile = round_start + s
                    if tile < k_tiles:
                        empty[s].wait_parity(parity ^ 1)
                        issue_stage(
                            full[s],
                            lhs,
                            rhs,
                            a_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS),
                            b_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS),
                            m0,
                            n0,
                            tile * TILE,
                        )
        else:
            consumer = PLANE_POS - 1
            acc = cp.cmma.Matrix[f32].from_value(cp.cmma.MatrixIdent.ACCUMULATOR, TILE, TILE, TILE, None, 0.0)
            a = cp.cmma.Matrix[elem].uninitialized(cp.cmma.MatrixIdent.A, TILE, TILE, TILE, a_layout)
            b = cp.cmma.Matrix[elem].uninitialized(cp.cmma.MatrixIdent.B, TILE, TILE, TILE, b_layout)
            for round_start in range(0, k_tiles, stages):
                parity = (round_start // stages) % 2
                for s in cp.unroll(range(stages)):
                    tile = round_start + s
                    if tile < k_tiles and s % consumers == consumer:
                        if skip_full_wait:
                            if round_start > 0:  # BUG on purpose: the first round reads unfilled stages
                                full[s].wait_parity(parity)
                        else:
                            full[s].wait_parity(parity)
                        cp.cmma.load(a, a_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS), TILE)
                        cp.cmma.load(b, b_tiles.slice(s * TILE_ITEMS, (s + 1) * TILE_ITEMS), TILE)
                        # the fragments are in registers: the producer may refill the stage now.
                        empty[s].arrive()
                        cp.cmma.execute(a, b, acc, acc)
            mine = partial.slice(consumer * TILE_ITEMS, (consumer + 1) * TILE_ITEMS)
            cp.cmma.store(mine, acc, TILE, cp.cmma.MatrixLayout.ROW_MAJOR)
            cp.named_barrier_sync(CONSUMERS_BARRIER, consumers * PLANE)
            for i in range(consumer * PLANE + UNIT_POS_PLANE, TILE_ITEMS, consumers * PLANE):
                total = f32(0.0)
                for c in cp.unroll(range(consumers)):
                    total += partial[c * TILE_ITEMS + i]
                out.write_checked((m0 + i // TILE, n0 + i % TILE), total)

    return conv2d_tma_ws_gemm


_KERNELS: dict = {}


def tma_ws_kernel(elem: cp.ScalarType):
    """The warp-specialized TMA GEMM kernel for inputs of ``elem`` (f16 or bf16), built once per type."""
    if elem not in _KERNELS:
        _KERNELS[elem] = _tma_ws_kernel(elem)
    return _KERNELS[elem]


@attrs.frozen
class TmaWsLaunch:
    """Everything the warp-specialized kernel is launched with, for one pass of one problem."""

    kind: str
    elem: cp.ScalarType
    args: tuple
    cube_count: cp.CubeCount
    config: TmaWsConfig
    skip_full_wait: bool = False

    @property
    def cube_dim(self) -> cp.CubeDim:
        """One producer plane and the consumer planes."""
        return cp.CubeDim(PLANE * (1 + self.config.consumers))

    def _args(self) -> tuple:
        return (*self.args, self.config.stages, self.config.consumers, self.skip_full_wait)

    def launch(self, client) -> None:
        """Run the kernel."""
        tma_ws_kernel(self.elem).launch(client, self.cube_count, self.cube_dim, *self._args())

    def compile(self, target: str = "sm_90a"):
        """The compiled kernel (IR, PTX and, with ptxas, its resource report)."""
        return tma_ws_kernel(self.elem).compile(self.cube_dim, *self._args(), target=target)


def _specialize(plain, config: TmaWsConfig, skip_full_wait: bool) -> TmaWsLaunch:
    """The warp-specialized launch of the operands ``plain`` (a ``TmaGemmLaunch``) was built for."""
    return TmaWsLaunch(plain.kind, plain.elem, plain.args[:-1], plain.cube_count, config, skip_full_wait)


def fprop_tma_ws_launch(
    x, w, out, problem: ConvolutionProblem, config: TmaWsConfig = DEFAULT_WS_CONFIG, *, skip_full_wait: bool = False
) -> TmaWsLaunch:
    """The warp-specialized TMA fprop for handles ``x`` (NHWC), ``w`` (C_out, KH, KW, C_in), ``out`` (f32)."""
    plain = fprop_tma_launch(x, w, out, problem, TmaGemmConfig(stages=config.stages))
    return _specialize(plain, config, skip_full_wait)


def wgrad_tma_ws_launch(
    x, dy, dw, problem: ConvolutionProblem, config: TmaWsConfig = DEFAULT_WS_CONFIG, *, skip_full_wait: bool = False
) -> TmaWsLaunch:
    """The warp-specialized TMA wgrad for handles ``x`` (NHWC), ``dy`` (N, OH, OW, C_out), ``dw`` (f32)."""
    plain = wgrad_tma_launch(x, dy, dw, problem, TmaGemmConfig(stages=config.stages))
    return _specialize(plain, config, skip_full_wait)
