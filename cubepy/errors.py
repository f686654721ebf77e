"""Every exception cubepy raises, in one place.

Hierarchy: ``CubeError`` is the base; ``ExpandError`` (kernel code, with file and
line), ``LaunchError`` (bad launch arguments; nothing was written), ``TensorMapError`` (a tensor-map
constraint), ``SanitizerError`` (the interp or cpu runtime's sanitizer found a memory or synchronization bug).  Internal
stages add ``VerifyError`` (ill-typed IR) and ``CompileError`` (LLVM, ptxas); the interp adds
``InterpreterError`` (it cannot execute an instruction) and ``TmaMisuseError`` (both a
``SanitizerError`` and a ``TensorMapError``).  ``SanitizerError.kind`` is a ``SanitizerKind``.
``NotAKernelError`` (also an ``AttributeError``) says that a cube function needs ``@cube(launch=True)``
to be launched or compiled.
``ArmExit`` is not an error: the frontend's signal that a runtime ``break``/``continue``/``return``
ended a branch body; it never leaves the expansion.
"""

from __future__ import annotations

from enum import Enum


class CubeError(Exception):
    """Base class of every error cubepy raises on purpose."""


class ExpandError(CubeError):
    """Kernel code that cannot be expanded; carries the user's file and line."""

    def __init__(
        self,
        message: str,
        filename: str | None = None,
        lineno: int | None = None,
        col: int | None = None,
        source_line: str | None = None,
    ) -> None:
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.source_line = source_line
        super().__init__(self._render())

    def _render(self) -> str:
        if self.filename is None:
            return self.message
        where = f"{self.filename}:{self.lineno}" + (f":{self.col + 1}" if self.col is not None else "")
        text = f"{where}: {self.message}"
        if self.source_line:
            # The line is shown without its indentation, so the caret moves left by that much too.
            text += f"\n    {self.source_line.strip()}"
            if self.col is not None:
                stripped = len(self.source_line) - len(self.source_line.lstrip())
                text += "\n    " + " " * max(self.col - stripped, 0) + "^"
        return text

    def __reduce__(self) -> tuple[type[ExpandError], tuple[object, ...]]:
        return (type(self), (self.message, self.filename, self.lineno, self.col, self.source_line))


class LaunchError(CubeError):
    """Bad launch arguments (arity, dtype, line size, cube dim, shared memory); nothing was written."""


class NotAKernelError(CubeError, AttributeError):
    """A kernel's method (``launch``, ``launch_unchecked``, ``compile``) used on a plain ``@cube`` function."""


class TensorMapError(CubeError):
    """A tensor-map parameter breaks one of the encoder's rules; the message names parameter, value and rule."""


class SanitizerKind(Enum):
    """What kind of kernel bug a ``SanitizerError`` reports; the value starts the error's message."""

    OUT_OF_BOUNDS = "out-of-bounds"
    """An access past the end (or before the start) of a buffer, shared memory, local array or line."""
    DATA_RACE = "data race"
    """Two units access one shared byte, at least one writing, with no barrier ordering them."""
    UNINITIALIZED_READ = "uninitialized read"
    """A read of shared memory that no unit of the cube wrote."""
    DIVERGENT_BARRIER = "divergent barrier"
    """A ``sync_cube``/``sync_plane`` that some live units of the cube or plane do not reach."""
    INACTIVE_PLANE_LANE = "inactive plane lane"
    """A plane operation reads the value of a lane that is not executing it."""
    PARTIAL_PLANE = "partial plane"
    """A plane-cooperative operation (cmma) run by only some units of a plane."""
    BARRIER_DEADLOCK = "barrier deadlock"
    """A wait on an asynchronous barrier whose phase cannot complete, or a named barrier too few units reach."""
    BARRIER_OVERFLOW = "barrier overflow"
    """More arrivals on an asynchronous barrier than its current phase expects."""
    BARRIER_MISUSE = "barrier misuse"
    """An asynchronous barrier used before ``barrier_init``, or initialised with a bad arrival count."""
    WRONG_PARITY = "wrong parity"
    """A ``wait_parity``/``try_wait_parity`` with a parity other than 0 or 1, or stuck on a phase nothing reached."""
    LIVELOCK = "livelock"
    """Units spin on memory that nothing left to run can change (the interp's report; a GPU hangs)."""
    TX_COUNT_RANGE = "transaction count out of range"
    """An asynchronous barrier's transaction count leaves the PTX range [-(2^20 - 1), 2^20 - 1]."""
    MISSING_PROXY_FENCE = "missing proxy fence"
    """A TMA store reads shared bytes written by ordinary stores with no ``fence_proxy_async`` after them."""
    NAMED_BARRIER_MISUSE = "named barrier misuse"
    """A named barrier with an id outside [0, 16), a unit count that is not a multiple of 32, or more arrivals."""
    TMA_MISUSE = "tma misuse"
    """A TMA copy that breaks a tensor-map or shared-memory rule (alignment, box size, map mode)."""
    WGMMA_MISUSE = "wgmma misuse"
    """A ``wgmma`` run by part of a warpgroup, or a matrix descriptor that breaks a layout rule."""
    WGMMA_PENDING_READ = "wgmma pending read"
    """A read of an accumulator whose ``wgmma`` result is not yet visible (no ``wgmma_wait_group`` covered it)."""
    WGMMA_OPERAND_OVERWRITE = "wgmma operand overwrite"
    """A write (a store or a TMA load) of shared bytes a started ``wgmma`` may still read (before its wait)."""
    TMA_UNCOVERED_ACCESS = "tma uncovered access"
    """A read or write of shared bytes a TMA load fills, before the unit waited for the barrier phase covering it."""
    TMA_STAGE_REUSE = "tma stage reuse"
    """A TMA load into shared bytes another unit read with no release (arrive, then a wait on it) in between."""
    ASYNC_COPY_UNCOVERED = "async copy uncovered access"
    """A read or write of shared bytes a ``cp.async`` copy fills before the copying unit waited for its group."""
    ASYNC_COPY_MISUSE = "async copy misuse"
    """A ``cp.async`` copy with a misaligned address, a source byte count above its size, or out of bounds."""
    ZERO_RANGE_STEP = "zero range step"
    """A runtime ``range`` whose step is zero (the loop runs zero iterations; Python would raise)."""


class SanitizerError(CubeError):
    """The sanitizer of the interp or cpu runtime found a memory or synchronization bug in a kernel; ``kind`` says which."""

    def __init__(self, message: str, kind: SanitizerKind) -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[type[SanitizerError], tuple[object, ...]]:
        return (type(self), (self.args[0], self.kind))


class TmaMisuseError(SanitizerError, TensorMapError):
    """A TMA copy or barrier used against the tensor-map rules, found while running (kind ``TMA_MISUSE``)."""

    def __init__(self, message: str, kind: SanitizerKind = SanitizerKind.TMA_MISUSE) -> None:
        super().__init__(message, kind)


class InterpreterError(CubeError):
    """The interp could not execute an instruction (unsupported IR, or a bug in the interp)."""


class VerifyError(CubeError):
    """The IR verifier rejected an instruction; the message names it and its source line."""


class CompileError(CubeError):
    """A back end (LLVM, NVPTX, ptxas) failed on IR the verifier accepted."""


class ArmExit(Exception):
    """A runtime break/continue/return ended the expansion of the current runtime body (never escapes)."""
