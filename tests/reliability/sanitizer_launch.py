"""How the sanitizer tests launch a kernel: two cubes of 64 units (128 for a warpgroup) over a zeroed output,
with an input buffer or a tiled tensor map in front where the kernel takes one."""

from __future__ import annotations

import numpy as np

import cubepy as cp

INPUT, TENSOR_MAP = "input buffer", "tensor map"


def launch_kernel(kernel, extra: str | None, client) -> None:
    """Launch ``kernel`` on ``client``; ``extra`` is INPUT, TENSOR_MAP or None (the output buffer only)."""
    out = client.create(np.zeros(64, dtype=np.uint32 if "atomic" in kernel.name else np.float32))
    args = [cp.ArrayArg(out)]
    if extra == INPUT:
        args.insert(0, cp.ArrayArg(client.create(np.ones(64, np.float32))))
    elif extra == TENSOR_MAP:
        source = client.create(np.arange(32 * 32, dtype=np.float32).reshape(32, 32))
        args.insert(0, cp.TensorMapArg.tiled(cp.TensorArg(source), (16, 16)))
    launch = kernel.launch_unchecked if hasattr(kernel, "launch_unchecked") else kernel.launch
    whole = ("wgmma_read_before_its_wait", "wgmma_operand_overwritten")
    units = 128 if kernel.name in whole else 64  # wgmma needs a whole warpgroup
    launch(client, cp.CubeCount(2), cp.CubeDim(units), *args)
