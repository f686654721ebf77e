"""Locks that survive ``os.fork``: a child starts with every registered lock unlocked.

A thread of the parent that held a lock at the fork does not exist in the child, so the child would wait on
that lock forever (a child forked while another thread launched a kernel used to hang on the launch's locks).
:func:`fork_safe` registers a lock to be made new in every forked child.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, TypeVar

__all__ = ["fork_safe"]

_L = TypeVar("_L")
_FORK_SAFE_LOCKS: weakref.WeakSet[Any] = weakref.WeakSet()


def fork_safe(lock: _L) -> _L:
    """``lock``, made new (unlocked) in a forked child: the thread that held it does not exist there."""
    _FORK_SAFE_LOCKS.add(lock)
    return lock


def _reinit_locks() -> None:
    for lock in list(_FORK_SAFE_LOCKS):
        lock._at_fork_reinit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_locks)
