"""glibc heap settings of long-running service processes."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the settings are glibc's; elsewhere they are no-ops"
)


@glibc
def test_arenas_are_capped_and_threads_share_them() -> None:
    """In a fresh process: with the cap, 16 threads that allocate at once end up with at
    most two arenas (glibc's malloc_info lists them), where without it they get several."""
    probe = """
import ctypes, sys, threading
from normwatch.server import memory
if sys.argv[1] == "capped":
    assert memory.limit_arenas(2)
libc = ctypes.CDLL("libc.so.6")
libc.fdopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fflush.argtypes = [ctypes.c_void_p]
barrier = threading.Barrier(16)
def work():
    barrier.wait()
    blocks = [bytearray(1000) for _ in range(20000)]
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
fd = libc.fdopen(1, b"w")
libc.malloc_info(0, fd)
libc.fflush(fd)
"""
    arenas = {}
    for mode in ("capped", "default"):
        out = subprocess.run(
            [sys.executable, "-c", probe, mode], capture_output=True, text=True, check=True
        ).stdout
        arenas[mode] = out.count("<heap nr=")
    assert 1 <= arenas["capped"] <= 2, arenas
    assert arenas["default"] > 2, arenas


@glibc
def test_trim_hands_freed_heap_pages_back() -> None:
    """In a fresh process: 64 MB of small blocks freed below a live one stay resident
    (``free`` cannot shrink the heap past it); `trim` gives them back, and a second call,
    with nothing left to give, gives back nothing more than a stray page or two (the
    interpreter itself may touch or drop one between the reads)."""
    probe = """
import os
from normwatch.server import memory
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
blocks = [bytearray(4000) for _ in range(16000)]
above = bytearray(4000)
loaded = resident()
del blocks
freed = resident()
memory.trim()
trimmed = resident()
memory.trim()
print(loaded, freed, trimmed, resident())
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded, freed, trimmed, again = map(int, out.split())
    blocks = 16000 * 4000
    assert loaded - freed < 0.05 * blocks, (loaded, freed)
    assert freed - trimmed > 0.95 * blocks, (freed, trimmed)
    assert abs(again - trimmed) <= 16 * 4096, (trimmed, again)
