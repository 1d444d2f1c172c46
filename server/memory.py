"""What a long-running service process does about glibc's heap (nothing elsewhere).

Two habits of glibc's allocator make a Python server's resident memory creep up although
nothing leaks:

- **One arena a thread.** Each thread that allocates while another holds the main arena
  gets an arena of its own, up to eight per core, and every arena keeps its own high-water
  mark: a worker whose 40 request threads each once parsed a large batch or read a long
  series holds that peak once per arena. `limit_arenas` caps them at two (what
  ``MALLOC_ARENA_MAX=2`` does; the interpreter lock serialises the threads' work anyway).
- **Freed memory kept for reuse.** After a burst (a compaction pass) the freed heap stays
  resident; `trim` hands its free pages back (``malloc_trim``), as Dask's workers do.

Both are no-ops on other C libraries (macOS, musl).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

__all__ = ["limit_arenas", "trim"]

_M_ARENA_MAX = -8  # mallopt parameter, from glibc's malloc.h


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both must exist: glibc
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def limit_arenas(count: int = 2) -> bool:
    """Let at most ``count`` malloc arenas serve this process's threads from now on (call it
    before starting threads); whether the C library took it."""
    return _LIBC is not None and bool(_LIBC.mallopt(_M_ARENA_MAX, count))


def trim() -> None:
    """Hand the heap's free pages back to the system (after a burst of allocations)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
