"""``sha256`` for cache keys without ``import hashlib``.

``hashlib`` loads OpenSSL on import (3-4 ms), which a process that only finds its kernels in the disk
cache would pay for the keys alone.  CPython's own SHA-256 module (``_sha256`` up to 3.11, ``_sha2``
from 3.12) gives the same digests; hashlib is the fallback where neither exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _hashlib import HASH


def _constructor() -> Any:
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # CPython >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]  # CPython <= 3.11
        except ImportError:
            from hashlib import sha256
    return sha256


sha256: Callable[..., HASH] = _constructor()
