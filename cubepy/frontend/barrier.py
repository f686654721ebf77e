"""``cp.Barrier``: an asynchronous transaction barrier (mbarrier) in shared memory, and TMA loads onto it.

``Barrier.shared(arrival_count, is_elected)`` declares one barrier per cube; the units where
``is_elected`` holds initialise it and the whole cube then synchronises (as CubeCL's CUDA back end
does), so every unit may use it right after.  A phase completes when ``arrival_count`` arrivals and
every expected transaction byte have come in; ``arrive`` returns a token naming its phase for
``wait``, ``wait_parity(p)`` waits for the phase of parity ``p`` and ``try_wait_parity(p)`` tests it.
TMA loads are methods of the barrier they complete on; coordinates are given outermost first, as
everywhere in cubepy's API.

``Barrier.shared_array(count, arrival_count, is_elected)`` declares ``count`` barriers at once (one IR
variable, initialised together behind one cube synchronisation); ``bars[i]`` is the barrier of element ``i``,
where ``i`` may be a run-time value (a pipeline's stage ``k % stages``): the operations then name their
barrier by address, with no switch over the stages.
"""

from __future__ import annotations

from typing import Any

from cubepy import ir
from cubepy.frontend import operations, source
from cubepy.frontend.state import current_scope, require_state
from cubepy.frontend.tma import TensorMapExpand, shared_operand, signed_coordinates
from cubepy.frontend.values import ExpandElement
from cubepy.ir import Type, VarKind
from cubepy.ir import ops as irops

_U32 = Type(ir.U32)
MAX_BARRIER_ARRAY = 1024  # elements; 8 KiB of shared memory, far more than a pipeline's stages


def _u32(value: Any, what: str) -> ir.Variable:
    return operations.to_index(value, what)


class BarrierExpand:
    """A barrier inside a kernel (its BARRIER variable; ``index``: its element of an array of barriers)."""

    __slots__ = ("index", "var")

    def __init__(self, var: ir.Variable, index: ir.Variable | None = None) -> None:
        self.var = var
        self.index = index

    # -- arrivals and waits -------------------------------------------------------------------
    def arrive(self) -> ExpandElement:
        """Arrive once; the token of the current phase (for ``wait``)."""
        return operations.emit(irops.BarrierArrive(self.var, index=self.index), irops.tma.TOKEN_TYPE)

    def arrive_and_expect_tx(self, arrivals: Any, tx_bytes: Any) -> ExpandElement:
        """Expect ``tx_bytes`` more transaction bytes in this phase, then arrive ``arrivals`` times; a token."""
        op = irops.BarrierArriveExpectTx(
            self.var, _u32(arrivals, "arrivals"), _u32(tx_bytes, "transaction bytes"), index=self.index
        )
        return operations.emit(op, irops.tma.TOKEN_TYPE)

    def expect_tx(self, tx_bytes: Any) -> None:
        """Expect ``tx_bytes`` more transaction bytes in the current phase, without arriving."""
        current_scope().append(irops.BarrierExpectTx(self.var, _u32(tx_bytes, "transaction bytes"), index=self.index))

    def wait(self, token: Any) -> None:
        """Wait until the phase ``token`` was taken in has completed."""
        element = operations.as_element(token, "barrier token")
        if element.type != irops.tma.TOKEN_TYPE:
            source.fail(f"bar.wait expects the token returned by arrive, got a value of type {element.type!r}")
        current_scope().append(irops.BarrierWait(self.var, element.var, index=self.index))

    def wait_parity(self, phase: Any) -> None:
        """Wait until the phase of parity ``phase`` (0 or 1) has completed."""
        current_scope().append(irops.BarrierWaitParity(self.var, _u32(phase, "phase parity"), index=self.index))

    def try_wait_parity(self, phase: Any) -> ExpandElement:
        """Whether the phase of parity ``phase`` (0 or 1) has completed (PTX ``mbarrier.try_wait.parity``).

        It may give False after a time-out even on a GPU, so wait with a loop:
        ``while not bar.try_wait_parity(p): pass``.
        """
        op = irops.BarrierTryWaitParity(self.var, _u32(phase, "phase parity"), index=self.index)
        return operations.emit(op, Type(ir.BOOL))

    def arrive_and_wait(self) -> None:
        """Arrive once and wait for the phase to complete."""
        self.wait(self.arrive())

    # -- TMA loads ----------------------------------------------------------------------------------
    def _tiled(self, rank: int, tensor_map: Any, smem: Any, coords: tuple[Any, ...], multicast: Any = None) -> None:
        tmap = _tensor_map(tensor_map, f"tma_load_{rank}d")
        if len(coords) != rank:
            source.fail(f"tma_load_{rank}d takes {rank} coordinates (outermost first), got {len(coords)}")
        _check_rank(tmap, rank, "tiled", f"tma_load_{rank}d")
        memory, offset, length = shared_operand(smem, tmap, f"tma_load_{rank}d")
        driver = signed_coordinates(coords[::-1], f"tma_load_{rank}d coordinate")
        mask = None if multicast is None else _u32(multicast, "multicast mask")
        load = irops.TmaLoad(self.var, tmap.var, memory, offset, length, driver, rank, mask, index=self.index)
        current_scope().append(load)

    def tma_load_1d(self, tensor_map: Any, smem: Any, x: Any, *, multicast: Any = None) -> None:
        """Load the 1-D box at ``x`` into ``smem`` through TMA, completing on this barrier.

        ``multicast`` (cluster launches): a u32 mask of cube ranks; the box lands at the same place in
        ``smem`` of each of those cubes and completes on each one's copy of this barrier."""
        self._tiled(1, tensor_map, smem, (x,), multicast)

    def tma_load_2d(self, tensor_map: Any, smem: Any, y: Any, x: Any, *, multicast: Any = None) -> None:
        """Load the 2-D box at ``(y, x)`` into ``smem`` through TMA, completing on this barrier (``multicast``:
        as for ``tma_load_1d``)."""
        self._tiled(2, tensor_map, smem, (y, x), multicast)

    def tma_load_3d(self, tensor_map: Any, smem: Any, z: Any, y: Any, x: Any, *, multicast: Any = None) -> None:
        """Load the 3-D box at ``(z, y, x)`` into ``smem`` through TMA, completing on this barrier."""
        self._tiled(3, tensor_map, smem, (z, y, x), multicast)

    def tma_load_4d(self, tensor_map: Any, smem: Any, w: Any, z: Any, y: Any, x: Any, *, multicast: Any = None) -> None:
        """Load the 4-D box at ``(w, z, y, x)`` into ``smem`` through TMA, completing on this barrier."""
        self._tiled(4, tensor_map, smem, (w, z, y, x), multicast)

    def tma_load_5d(
        self, tensor_map: Any, smem: Any, v: Any, w: Any, z: Any, y: Any, x: Any, *, multicast: Any = None
    ) -> None:
        """Load the 5-D box at ``(v, w, z, y, x)`` into ``smem`` through TMA, completing on this barrier."""
        self._tiled(5, tensor_map, smem, (v, w, z, y, x), multicast)

    def arrive_cluster(self, rank: Any) -> None:
        """Arrive once on this barrier's copy in the cluster's cube ``rank`` (PTX ``mapa`` +
        ``mbarrier.arrive.release.cluster.shared::cluster``): a consumer freeing a stage a peer multicasts into."""
        current_scope().append(irops.BarrierArriveCluster(self.var, _u32(rank, "cube rank"), index=self.index))

    def _im2col(self, rank: int, tensor_map: Any, smem: Any, coords: tuple[Any, ...], offsets: tuple[Any, ...]) -> None:
        name = f"tma_load_im2col_{rank}d"
        tmap = _tensor_map(tensor_map, name)
        _check_rank(tmap, rank, "im2col", name)
        memory, offset, length = shared_operand(smem, tmap, name)
        driver = signed_coordinates(coords[::-1], f"{name} coordinate")
        offs = tuple(_offset(value, f"{name} offset") for value in offsets[::-1])
        load = irops.TmaLoadIm2col(self.var, tmap.var, memory, offset, length, driver, offs, rank, index=self.index)
        current_scope().append(load)

    def tma_load_im2col_3d(self, tensor_map: Any, smem: Any, n: Any, w: Any, c: Any, w_offset: Any) -> None:
        """Im2col load for NWC: pixels from filter base ``w`` of image ``n``, channels from ``c``."""
        self._im2col(3, tensor_map, smem, (n, w, c), (w_offset,))

    def tma_load_im2col_4d(
        self, tensor_map: Any, smem: Any, n: Any, h: Any, w: Any, c: Any, h_offset: Any, w_offset: Any
    ) -> None:
        """Im2col load for NHWC: pixels from filter base ``(h, w)`` of image ``n``, channels from ``c``."""
        self._im2col(4, tensor_map, smem, (n, h, w, c), (h_offset, w_offset))

    def tma_load_im2col_5d(
        self,
        tensor_map: Any,
        smem: Any,
        n: Any,
        d: Any,
        h: Any,
        w: Any,
        c: Any,
        d_offset: Any,
        h_offset: Any,
        w_offset: Any,
    ) -> None:
        """Im2col load for NDHWC: pixels from filter base ``(d, h, w)`` of image ``n``, channels from ``c``."""
        self._im2col(5, tensor_map, smem, (n, d, h, w, c), (d_offset, h_offset, w_offset))

    def __repr__(self) -> str:
        return f"<barrier {self.var!r}>" if self.index is None else f"<barrier {self.var!r}[{self.index!r}]>"


class BarrierArrayExpand:
    """``count`` barriers declared together; ``bars[i]`` is element ``i`` (a Python int or a run-time integer)."""

    __slots__ = ("var",)

    def __init__(self, var: ir.Variable) -> None:
        self.var = var

    @property
    def count(self) -> int:
        """How many barriers the array holds."""
        return self.var.length or 1

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> BarrierExpand:
        """Element ``index``: a Python int is checked against the array now, a run-time index by every runtime."""
        if operations.is_number(index):
            if isinstance(index, bool) or not isinstance(index, int):
                source.fail(f"a barrier array is indexed by an integer, got {index!r}")
            if not -self.count <= index < self.count:
                source.fail(f"barrier index {index} is outside an array of {self.count} barriers")
            return BarrierExpand(self.var, operations.literal(index % self.count, ir.U32).var)
        element = operations.as_element(index, "barrier index")
        if not element.elem.is_int or element.type.line != 1:
            source.fail(f"a barrier array is indexed by a scalar integer, got {element.type!r}")
        return BarrierExpand(self.var, _u32(element, "barrier index"))

    def __iter__(self) -> Any:
        return (self[k] for k in range(self.count))

    def __repr__(self) -> str:
        return f"<barrier array {self.var!r} x {self.count}>"


class Barrier:
    """``cp.Barrier.shared(arrival_count, is_elected)``: a cube-wide mbarrier; ``shared_array`` declares several."""

    @staticmethod
    def shared(arrival_count: Any, is_elected: Any) -> BarrierExpand:
        """Declare a barrier; units where ``is_elected`` holds initialise it, then the cube synchronises."""
        return BarrierExpand(_declare("cp.Barrier.shared", 1, arrival_count, is_elected))

    @staticmethod
    def shared_array(count: Any, arrival_count: Any, is_elected: Any) -> BarrierArrayExpand:
        """Declare ``count`` barriers (a Python int), each for ``arrival_count`` arrivals; units where
        ``is_elected`` holds initialise all of them, then the cube synchronises once."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_BARRIER_ARRAY:
            source.fail(f"cp.Barrier.shared_array: count must be an int in [1, {MAX_BARRIER_ARRAY}], got {count!r}")
        return BarrierArrayExpand(_declare("cp.Barrier.shared_array", count, arrival_count, is_elected))


def _declare(what: str, count: int, arrival_count: Any, is_elected: Any) -> ir.Variable:
    """The BARRIER variable of ``count`` barriers, and its ``barrier_init`` (all of them, one cube sync)."""
    state = require_state(what)
    var = state.declare_memory(VarKind.BARRIER, irops.tma.TOKEN_TYPE, count)
    arrivals = _u32(arrival_count, "arrival_count")
    current_scope().append(irops.BarrierInit(var, arrivals, operations.to_bool(is_elected).var))
    return var


def _tensor_map(value: Any, what: str) -> TensorMapExpand:
    if not isinstance(value, TensorMapExpand):
        source.fail(f"{what}: the first argument must be a TensorMap parameter, got {type(value).__name__}")
    return value


def _check_rank(tmap: TensorMapExpand, rank: int, mode: str, what: str) -> None:
    comp = tmap.compilation_arg
    if tmap.rank is not None and tmap.rank != rank:
        source.fail(f"{what} on a tensor map of rank {tmap.rank}")
    comp_mode = getattr(comp, "mode", mode)
    if comp_mode != mode and tmap.rank is not None:
        source.fail(f"{what} needs a {mode} tensor map, got a {comp_mode} one")


def _offset(value: Any, what: str) -> ir.Variable:
    if operations.is_number(value):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFF:
            source.fail(f"{what}: {value!r} is not a u16")
        return operations.literal(value, ir.U16).var
    element = operations.as_element(value, what)
    if not element.elem.is_int or element.type.line != 1:
        source.fail(f"{what}: expected a scalar integer, got {element.type!r}")
    return operations.cast(element, ir.U16).var
