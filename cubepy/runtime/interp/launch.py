"""The interp's launch: what every chunk of one launch shares, and how the grid is cut into chunks.

A ``Launch`` is built once per ``run``: it checks and binds the kernel's buffers (1-D numpy storages of
the element type and line size the kernel was expanded for) and its scalars, notes the grid, the cluster
shape, the schedule, the sanitizer switch and the coverage recorder, and says how many whole cubes one
chunk holds (``cubes_per_chunk``: at most ``MAX_LANES_PER_CHUNK`` lanes and ``MAX_CHUNK_MEMORY_BYTES`` of
shared arenas and local arrays, on a multiple of whole clusters).  The executor (``executor``) then runs
the chunks one after another, each a ``Chunk`` that reads this shared state as ``ctx.launch``.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from cubepy.errors import LaunchError
from cubepy.ir import Param
from cubepy.runtime.bindings import Bindings, BufferBinding
from cubepy.runtime.interp.coverage import ACTIVE as COVERAGE
from cubepy.runtime.interp.memory import MemoryRef, global_ref
from cubepy.runtime.interp.program import Program
from cubepy.runtime.interp.schedule import Schedule
from cubepy.runtime.interp.values import numpy_dtype

MAX_LANES_PER_CHUNK = 1 << 16
MAX_CHUNK_MEMORY_BYTES = 1 << 28  # shared arenas plus local arrays of one chunk


class Launch:
    """What every chunk of one launch shares: the program, bound buffers and scalars, the grid."""

    def __init__(
        self,
        program: Program,
        cube_count: tuple[int, int, int],
        bindings: Bindings,
        sanitize: bool,
        schedule: Schedule | None = None,
        cluster: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        kernel = program.kernel
        self.schedule = schedule or Schedule()
        self.program = program
        self.kernel = kernel
        self.cube_count = cube_count
        self.cluster = cluster
        self.bindings = bindings
        self.sanitize = sanitize
        self.coverage = COVERAGE.get()  # a coverage Recorder, or None (the default: nothing recorded)
        self.globals: dict[int, MemoryRef] = {}
        for param in kernel.buffers:
            self.globals[param.slot] = global_ref(param.var, self._checked_buffer(param), param.name)
        self.scalars: dict[int, np.generic] = {}
        for param in kernel.scalars:
            if param.slot >= len(bindings.scalars):
                raise LaunchError(f"scalar parameter {param.name!r} (slot {param.slot}) is not bound")
            value = np.asarray(bindings.scalars[param.slot])
            self.scalars[param.slot] = cast(np.generic, value.astype(numpy_dtype(param.var.elem))[()])

    def _checked_buffer(self, param: Param) -> BufferBinding:
        slot = param.slot
        if slot >= len(self.bindings.buffers):
            raise LaunchError(f"buffer parameter {param.name!r} (slot {slot}) is not bound")
        binding = self.bindings.buffers[slot]
        expected = numpy_dtype(param.var.elem)
        storage = binding.handle.storage
        if not isinstance(storage, np.ndarray) or storage.ndim != 1:
            raise LaunchError(
                f"buffer parameter {param.name!r}: the interp needs a 1-D numpy storage, got {type(storage).__name__}"
            )
        if storage.dtype != expected:
            raise LaunchError(
                f"buffer parameter {param.name!r} holds {storage.dtype}, the kernel expects "
                f"{param.var.elem!r} ({expected})"
            )
        if binding.line_size != param.var.type.line:
            raise LaunchError(
                f"buffer parameter {param.name!r} is bound with line size {binding.line_size}, "
                f"the kernel was expanded for {param.var.type.line}"
            )
        return binding

    def cubes_per_chunk(self) -> int:
        """How many whole cubes one chunk holds: at most 64K lanes and a bounded memory footprint."""
        kernel = self.kernel
        units = kernel.units_per_cube
        local_bytes = sum(cast(int, var.length) * var.type.size for var in kernel.local_arrays)
        per_cube = self.program.shared_bytes + units * local_bytes
        align = self.cluster_alignment()
        if self.schedule.independent_planes:
            return align  # every plane is a group: small chunks keep each group's numpy operations small
        by_lanes = MAX_LANES_PER_CHUNK // units
        by_memory = MAX_CHUNK_MEMORY_BYTES // per_cube if per_cube else by_lanes
        return max(1, min(by_lanes, by_memory)) // align * align or align

    def cluster_alignment(self) -> int:
        """A chunk starts and ends on a multiple of this many cubes, so that it holds whole clusters.

        Cubes are numbered x fastest: a cluster of (cx, 1, 1) is cx consecutive cubes; one of (cx, cy, 1)
        lies within cy whole rows of the grid, one of (cx, cy, cz) within cz whole layers."""
        (nx, ny, _), (cx, cy, cz) = self.cube_count, self.cluster
        if cz > 1:
            return nx * ny * cz
        if cy > 1:
            return nx * cy
        return cx
