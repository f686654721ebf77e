"""Every exception cubepy raises, in one place.

Hierarchy (API.md section 5): ``CubeError`` is the base; ``ExpandError`` (kernel code, with file and
line), ``LaunchError`` (bad launch arguments; nothing was written), ``TensorMapError`` (a tensor-map
constraint), ``SanitizerError`` (the CPU runtime found a memory or synchronization bug).  Internal
stages add ``VerifyError`` (ill-typed IR) and ``CompileError`` (LLVM, ptxas); ``NotAKernelError`` (also an
``AttributeError``) says that a cube function needs ``@cube(launch=True)`` to be launched.
"""

from __future__ import annotations


class CubeError(Exception):
    """Base class of every error cubepy raises on purpose."""


class ExpandError(CubeError):
    """Kernel code that cannot be expanded; carries the user's file and line."""

    def __init__(self, message: str, filename: str | None = None, lineno: int | None = None,
                 col: int | None = None, source_line: str | None = None) -> None:
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

    def __reduce__(self):
        return (type(self), (self.message, self.filename, self.lineno, self.col, self.source_line))


class LaunchError(CubeError):
    """Bad launch arguments (arity, dtype, line size, cube dim, shared memory); nothing was written."""


class NotAKernelError(CubeError, AttributeError):
    """A kernel's method (``launch``, ``launch_unchecked``, ``compile``) used on a plain ``@cube`` function."""


class TensorMapError(CubeError):
    """A tensor-map parameter breaks one of the encoder's rules; the message names parameter, value and rule."""


class SanitizerError(CubeError):
    """The CPU runtime's sanitizer found a memory or synchronization bug in a kernel."""


class VerifyError(CubeError):
    """The IR verifier rejected an instruction; the message names it and its source line."""


class CompileError(CubeError):
    """A back end (LLVM, NVPTX, ptxas) failed on IR the verifier accepted."""
