"""The interp back end: ``ComputeClient`` runs kernels by executing their IR with numpy (``cp.client("interp")``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from cubepy import config
from cubepy.errors import LaunchError
from cubepy.ir.kernel import written_slots
from cubepy.runtime.backend import MAX_SHARED_BYTES
from cubepy.runtime.bindings import Bindings
from cubepy.runtime.host_heap import keep_medium_blocks
from cubepy.runtime.rollback import restore_on_failure

if TYPE_CHECKING:
    from cubepy.ir import KernelDefinition
    from cubepy.runtime.interp.schedule import Schedule


class InterpBackend:
    """The interp runtime: runs the IR itself, lockstep over the grid, with numpy."""

    name = "interp"
    disk_cache_target = "interp"

    @property
    def disk_cache_kind(self) -> str | None:
        """``interp``: its artifact (a post-pass KernelDefinition) pickles, so it is cached on disk; None for a
        subclass with its own ``prepare`` (its artifacts are not this one's)."""
        return "interp" if type(self).prepare is InterpBackend.prepare else None

    def prepare(self, definition: KernelDefinition) -> KernelDefinition:
        """Run the IR passes; the result is what ``run`` executes."""
        from cubepy.compiler.passes import run_passes

        definition, _ = run_passes(definition)
        return definition

    def __init__(self, schedule: Schedule | None = None) -> None:
        # A Schedule, or None: CUBEPY_SCHEDULE (read at each launch) decides.
        self.schedule = schedule
        keep_medium_blocks()  # a chunk's temporaries come from the heap, not from fresh pages
        self._fits: dict[int, object] = {}  # id -> definition already checked (its limits do not change)
        self._writes: dict[int, tuple[object, tuple[tuple[int, ...], tuple[int, ...]]]] = {}

    def _written_slots(self, definition: KernelDefinition) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Buffer and tensor-map slots a kernel may write, the only ones a failed launch must restore.

        Read from the operations' records: the buffers and tensor maps named by an operand that the
        record lists as written.
        """
        cached = self._writes.get(id(definition))
        if cached is not None and cached[0] is definition:
            return cached[1]
        slots = written_slots(definition)
        if len(self._writes) > 4096:
            self._writes.clear()
        self._writes[id(definition)] = (definition, slots)
        return slots

    def check_launch(self, definition: KernelDefinition, cube_count: tuple[int, int, int]) -> None:
        """Reject launches the hardware would refuse (shared memory over the limit)."""
        if self._fits.get(id(definition)) is definition:
            return
        # every shared memory is sized; a view of another's bytes takes none of its own
        shared = sum(cast(int, v.length) * v.type.size for v in definition.shared_memories if v.aliases is None)
        if shared > MAX_SHARED_BYTES:
            raise LaunchError(
                f"kernel {definition.name} needs {shared} bytes of shared memory; a cube has at "
                f"most {MAX_SHARED_BYTES} (227 KiB on sm_90)"
            )
        if len(self._fits) > 4096:
            self._fits.clear()
        self._fits[id(definition)] = definition

    def current_schedule(self) -> Schedule:
        """The schedule of the next launch: the client's, else ``CUBEPY_SCHEDULE``'s."""
        from cubepy.runtime.interp.schedule import parse

        if self.schedule is not None:
            return self.schedule
        return parse(config.get("CUBEPY_SCHEDULE"))

    def run(
        self,
        definition: KernelDefinition,
        cube_count: tuple[int, int, int],
        bindings: Bindings,
        *,
        sanitize: bool,
        cluster: tuple[int, int, int] = (1, 1, 1),
    ) -> None:
        """Execute; on any error restore every buffer the kernel may write, so a failed launch writes nothing."""
        from cubepy.runtime import interp

        with restore_on_failure(bindings, self._written_slots(definition)):
            interp.run(
                definition, cube_count, bindings, sanitize=sanitize, schedule=self.current_schedule(), cluster=cluster
            )
