"""The C heap's medium blocks kept in the process, so that numpy temporaries of a chunk's width cost no page faults.

glibc's ``malloc`` serves a block of 128 KiB or more with a fresh ``mmap`` and unmaps it when it is freed: every
such block is new pages, faulted in and zeroed by the kernel on first touch.  The interp allocates a temporary
of a chunk's width (64K lanes: 256-512 KiB) for nearly every instruction, so before this, a 256^3 tiled matmul
on the interp spent most of its time in page faults: 342 ms in a fresh process against 71 ms once something
had freed a large block.  For glibc raises both thresholds itself when a block above them is freed (to that
block's size, up to 32 MiB, and keeps twice that before it returns the top of the heap to the system); so a
runtime client frees one block of ``PRIMING_BYTES`` first.  That is glibc's own adjustment, made early: the
same as the process would have after its first large numpy array is freed; a process that set its own
thresholds with ``mallopt`` keeps them (glibc then makes no adjustment).  Elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os

__all__ = ["PRIMING_BYTES", "keep_medium_blocks"]

PRIMING_BYTES = 16 << 20  # above a chunk's temporaries, below glibc's 32 MiB cap on the adjustment


@functools.cache
def keep_medium_blocks() -> bool:
    """Have glibc keep blocks up to ``PRIMING_BYTES`` in the heap (once per process); whether it could."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        libc = ctypes.CDLL(None)
        malloc, free = libc.malloc, libc.free
    except (AttributeError, OSError, ValueError):  # not glibc, or no confstr name for it
        return False
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    block = malloc(PRIMING_BYTES)
    if not block:
        return False
    free(block)
    return True
