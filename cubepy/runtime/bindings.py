"""What a launch binds: the runtime parts of every argument, in parameter order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from cubepy.runtime.handle import Handle

if TYPE_CHECKING:
    from cubepy.runtime.args import ArrayArg, TensorArg
    from cubepy.runtime.tensormap import TensorMapArg


@attrs.define
class BufferBinding:
    """A buffer parameter's runtime part: the handle, line size and the metadata kernels read.

    ``len`` and ``buffer_len`` count items (lines of ``line_size`` elements); ``shape`` and
    ``strides`` are in elements, outermost first.
    """

    handle: Handle
    line_size: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def buffer_len(self) -> int:
        """Items the whole allocation holds from the handle's offset."""
        return self.handle.size // self.line_size

    @property
    def len(self) -> int:
        """Items the logical view covers (product of shape / line size)."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count // self.line_size


@attrs.define
class Bindings:
    """Runtime arguments of one launch, in slot order per kind (the order expansion registered them)."""

    buffers: list[BufferBinding] = attrs.Factory(list)
    scalars: list[object] = attrs.Factory(list)  # Python values, already converted to the param's type
    tensor_maps: list[TensorMapArg] = attrs.Factory(list)
    # A dict kept across the warm launches of one kernel with these same buffers (``ComputeClient.launch``),
    # where a back end may keep what it derives from the buffers alone (the cpu runtime's parameter words);
    # None for a launch the client does not remember.  Nothing in it may depend on a scalar.
    memo: dict[object, object] | None = None

    def add_buffer(self, arg: ArrayArg | TensorArg) -> None:
        """Bind an ``ArrayArg`` or ``TensorArg``."""
        self.buffers.append(BufferBinding(arg.handle, arg.line_size, tuple(arg.shape), tuple(arg.strides)))

    def add_scalar(self, value: object) -> None:
        """Bind a scalar value (a numpy scalar of the parameter's dtype)."""
        self.scalars.append(value)

    def add_tensor_map(self, arg: TensorMapArg) -> None:
        """Bind a ``TensorMapArg``."""
        self.tensor_maps.append(arg)
