"""A failed launch writes nothing: the host runtimes (interp, cpu) copy every storage a kernel may write before
it runs and copy it back if the launch raises.  The cuda runtime needs none: it refuses a launch before it
queues it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from cubepy.runtime.bindings import Bindings


@contextlib.contextmanager
def restore_on_failure(bindings: Bindings, written: tuple[tuple[int, ...], tuple[int, ...]]) -> Iterator[None]:
    """Run the body; if it raises (Ctrl-C included), restore the storages behind ``written`` and re-raise.

    ``written``: the buffer slots and tensor-map slots the kernel may write (``cubepy.ir.kernel.written_slots``).
    A storage bound to several of them is copied once."""
    buffer_slots, map_slots = written
    storages: dict[int, Any] = {}  # id -> a numpy array holding a whole allocation
    for slot in buffer_slots:
        storage = bindings.buffers[slot].handle.storage
        storages[id(storage)] = storage
    for slot in map_slots:
        storage = bindings.tensor_maps[slot].handle.storage
        storages[id(storage)] = storage
    snapshots = [(storage, storage.copy()) for storage in storages.values()]
    try:
        yield
    except BaseException:
        for storage, saved in snapshots:
            storage[...] = saved
        raise
