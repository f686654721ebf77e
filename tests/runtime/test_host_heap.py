"""keep_medium_blocks: after it, a 1 MiB block comes from glibc's heap, not from a fresh mmap (counted by mallinfo2)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cubepy
from cubepy.runtime.host_heap import PRIMING_BYTES, keep_medium_blocks

FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")

# Run in a fresh process: how many mmapped blocks one malloc of 1 MiB adds (after priming the heap or not).
PROBE = f"""
import ctypes, sys
sys.path.insert(0, {str(Path(cubepy.__file__).resolve().parents[1])!r})
from cubepy.runtime.host_heap import keep_medium_blocks
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in {FIELDS!r}]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "primed":
    assert keep_medium_blocks()
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)
after = libc.mallinfo2().hblks
libc.free(block)
print(after - before)
"""


def _glibc_with_mallinfo2() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION")) and hasattr(ctypes.CDLL(None), "mallinfo2")
    except (OSError, ValueError):
        return False


pytestmark = pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="needs glibc 2.33+ (mallinfo2)")


def _mmapped_blocks_added(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_fresh_process_maps_a_1_mib_block():
    assert _mmapped_blocks_added("fresh") == 1  # glibc's default: 128 KiB and up come from mmap


def test_after_priming_a_1_mib_block_comes_from_the_heap():
    assert _mmapped_blocks_added("primed") == 0


def test_priming_is_once_per_process_and_below_glibcs_cap():
    assert keep_medium_blocks() is keep_medium_blocks()
    assert PRIMING_BYTES < 32 << 20  # glibc adjusts its thresholds only for freed blocks up to 32 MiB
