"""Sealed files: what the disk caches read back is only ever bytes this user's cubepy wrote.

A cache entry is loaded into the process (unpickled IR, host object code mapped and executed, libdevice bitcode
handed to LLVM), so a planted or damaged entry must never reach those steps.  A :class:`SealedFolder` keeps
three rules:

- **The folder is private.**  It is created ``0700``; an existing folder that another user owns, or that group or
  others may write, is refused (a warning, then the caller runs uncached).
- **Every entry carries a MAC.**  The folder holds a random 32-byte key in ``.cubepy-key`` (mode ``0600``,
  created once, atomically).  An entry is ``MAGIC | tag | payload`` where ``tag`` is keyed BLAKE2b over the
  entry's name and its payload.  Reading checks the tag before any byte of the payload is interpreted; a
  missing, truncated, flipped, renamed or foreign entry is a miss, removed, with one debug line saying why.
- **Nothing is half-written.**  Entries and the key are written through a temporary file and a rename, so a
  reader sees a whole file or none (``cubepy.files.write_atomically``).

Without the key nobody can forge an entry: copying another user's cache, a bit flip on disk, a file dropped
into the folder or a folder swapped in by whoever can write its parent all fail the tag (a swapped-in key file
is someone else's, and refused).  Someone who can read the key can already read and write this user's files.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import warnings
from pathlib import Path

from cubepy.files import write_atomically

try:  # CPython's built-in BLAKE2 and constant-time comparison (no OpenSSL load, unlike hashlib and hmac: ~4 ms)
    from _blake2 import blake2b
    from _operator import _compare_digest as _equal
except ImportError:  # pragma: no cover - other Pythons
    from hashlib import blake2b
    from hmac import compare_digest as _equal  # type: ignore[no-redef]

__all__ = ["CacheSecurityWarning", "SealedFolder", "sealed_folder"]

MAGIC = b"cubepy-sealed\0\x01"
KEY_NAME = ".cubepy-key"
KEY_BYTES = 32
TAG_BYTES = 32


class CacheSecurityWarning(UserWarning):
    """A cache folder or key that is not private to this user: cubepy runs uncached rather than trust it."""


class SealedFolder:
    """A private folder whose files are written with, and only read back through, a per-folder MAC key."""

    def __init__(self, root: Path, key: bytes) -> None:
        self.root = root
        self._key = key

    def _tag(self, name: str, payload: bytes | memoryview) -> bytes:
        mac = blake2b(key=self._key, digest_size=TAG_BYTES, person=b"cubepy-cache")
        mac.update(name.encode())
        mac.update(b"\0")
        mac.update(payload)
        return mac.digest()

    def write(self, relative: str, payload: bytes) -> None:
        """Seal ``payload`` and store it at ``root/relative`` atomically (``OSError`` when the disk refuses)."""
        write_atomically(self.root / relative, MAGIC + self._tag(relative, payload) + payload)

    def read(self, relative: str) -> bytes | None:
        """The payload stored at ``root/relative``, or None (missing, or failing its seal: then it is removed)."""
        path = self.root / relative
        try:
            data = path.read_bytes()
        except OSError:
            return None
        header = len(MAGIC) + TAG_BYTES
        if len(data) < header or not data.startswith(MAGIC):
            self.discard(relative, "not a sealed cubepy entry (truncated, or written by another version)")
            return None
        payload = memoryview(data)[header:]
        if not _equal(data[len(MAGIC) : header], self._tag(relative, payload)):
            self.discard(relative, "its seal does not match (damaged, planted or moved)")
            return None
        return bytes(payload)

    def discard(self, relative: str, why: str) -> None:
        """Remove the entry at ``relative`` (a later build writes it anew), saying why when debugging."""
        path = self.root / relative
        _debug(f"ignoring unreadable entry {path} ({why}); removed, rebuilding")
        try:
            path.unlink()
        except OSError:
            pass


_folders: dict[str, SealedFolder | None] = {}
_lock = threading.Lock()


def sealed_folder(root: str | os.PathLike[str]) -> SealedFolder | None:
    """The sealed folder at ``root`` (created ``0700`` with its key), or None when it is not private to this user.

    None comes with one :class:`CacheSecurityWarning` per folder and process naming what is wrong; the caller then
    works uncached.  The answer is kept per process (and dropped in a forked child, which re-checks).
    """
    path = Path(root)
    text = f"{os.getpid()}:{path}"
    found = _folders.get(text)
    if found is not None or text in _folders:
        return found
    with _lock:
        if text not in _folders:
            problem, folder = _open(path)
            if problem is not None:  # unsafe, not merely unwritable: say so once
                warnings.warn(
                    f"cubepy: not using the cache folder {path}: {problem}. Kernels are compiled anew in this "
                    "process; fix the folder (or point CUBEPY_CACHE_DIR at a private one) to cache them again.",
                    CacheSecurityWarning,
                    stacklevel=3,
                )
            _folders[text] = folder
    return _folders[text]


def forget_folders() -> None:
    """Drop the per-process answers of :func:`sealed_folder` (tests change modes and owners between calls)."""
    with _lock:
        _folders.clear()


def _open(path: Path) -> tuple[str | None, SealedFolder | None]:
    try:
        _make_private(path)
        problem = _unsafe_folder(path)
        if problem is not None:
            return problem, None
        key = _load_key(path)
    except _Refused as refusal:
        return str(refusal), None
    except OSError as error:  # cannot be created or written (a file in the way, read-only, full): only uncached
        _debug(f"cannot use {path}: {error}; running uncached")
        return None, None
    return None, SealedFolder(path, key)


class _Refused(Exception):
    """A key file that is not this user's private file."""


def _make_private(path: Path) -> None:
    """Create ``path`` (and missing parents) with mode 0700; an existing folder keeps its mode (checked next)."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass


def _unsafe_folder(path: Path) -> str | None:
    """What makes ``path`` unsafe to load code from, or None (POSIX owner and mode checks only)."""
    if not hasattr(os, "geteuid"):
        return None
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.geteuid():
        return f"it is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & 0o022:
        return f"group or others may write it (mode {stat.S_IMODE(info.st_mode):04o}; make it 0700)"
    return None


def _load_key(folder: Path) -> bytes:
    """The folder's key, made on first use; a key file that is not a private regular file of ours is refused."""
    path = folder / KEY_NAME
    for _ in range(3):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            _create_key(path)
            continue
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(f"its key {path} is not a regular file")
        if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
            raise _Refused(f"its key {path} is owned by uid {info.st_uid}, not by this user")
        if hasattr(os, "geteuid") and info.st_mode & 0o077:
            raise _Refused(f"its key {path} may be read by others (mode {stat.S_IMODE(info.st_mode):04o}; want 0600)")
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
        # A key cut short (a crash before this format's atomic write): start over; old entries then miss.
        _debug(f"replacing the damaged key {path}")
        path.unlink(missing_ok=True)
    raise _Refused(f"its key {path} could not be created")


def _create_key(path: Path) -> None:
    """Write a fresh random key through a private temporary file and a link: a reader sees all 32 bytes or none."""
    temporary = path.with_name(f"{KEY_NAME}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(KEY_BYTES))
        try:
            os.link(temporary, path)  # fails if another process made the key first: theirs is kept
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


def _debug(message: str) -> None:
    from cubepy import config

    if config.get("CUBEPY_DEBUG") >= 1:
        print(f"[cubepy] disk cache: {message}", file=sys.stderr)
