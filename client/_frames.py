"""Spool records on disk: the frame format, the chunk files holding frames, the lock.

A record is written as a frame, little-endian::

    b"NWS1" | u32 body length | u32 CRC32(body) | body
    body = u64 seq | u8 kind | u32 points | payload

A frame whose CRC does not match, or that is cut short because the writer was killed in
the middle of it, is skipped when a chunk is read back (`scan`); reading resumes at the
next ``NWS1`` whose frame checks out.
"""

from __future__ import annotations

import enum
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

if sys.platform != "win32":
    import fcntl

MAGIC = b"NWS1"
FRAME = struct.Struct("<4sII")
HEAD = struct.Struct("<QBI")
HEADER_SIZE = FRAME.size + HEAD.size
"""Bytes in front of a record's payload."""
LOCK_FILE = "lock"


class Kind(enum.IntEnum):
    """What a record's payload is."""

    METRICS = 1
    """A columnar batch, JSON without its ``segment`` (added when it is sent)."""
    EVENT = 2
    """An event document ``{"step", "kind", "text"}``."""
    STATUS = 3
    """The run's final status ``{"status": "finished"}``; always the last record."""


_KINDS = frozenset(int(kind) for kind in Kind)


class SpoolBusy(Exception):
    """Another process (or another `Run` of this one) holds the stream's lock."""


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One record as appended: ``points`` is how many (step, metric) values it carries."""

    seq: int
    kind: Kind
    points: int
    payload: bytes


class Dropped(NamedTuple):
    """Records and points given up on to keep a spool under its size bound."""

    records: int
    points: int


class Scan(NamedTuple):
    """`scan` result: the valid records with the offset of each frame, and the damage."""

    records: list[tuple[int, SpoolRecord]]
    corrupt: int
    """Damaged frames skipped (a bad CRC, magic or length)."""
    torn: bool
    """The data ended inside a frame (a writer killed mid-append)."""


def encode(record: SpoolRecord) -> bytes:
    """The frame for ``record``."""
    body = HEAD.pack(record.seq, record.kind, record.points) + record.payload
    return FRAME.pack(MAGIC, len(body), zlib.crc32(body)) + body


def scan(data: bytes) -> Scan:
    """Decode every intact frame of a chunk file, skipping damaged ones."""
    records: list[tuple[int, SpoolRecord]] = []
    corrupt = 0
    offset = 0
    while offset < len(data):
        if len(data) - offset < FRAME.size + HEAD.size:
            return Scan(records, corrupt, torn=True)
        magic, length, crc = FRAME.unpack_from(data, offset)
        end = offset + FRAME.size + length
        if magic == MAGIC and length >= HEAD.size and end <= len(data):
            body = data[offset + FRAME.size : end]
            if zlib.crc32(body) == crc:
                seq, kind, points = HEAD.unpack_from(body)
                if kind in _KINDS:
                    payload = body[HEAD.size :]
                    records.append((offset, SpoolRecord(seq, Kind(kind), points, payload)))
                    offset = end
                    continue
        elif magic == MAGIC and end > len(data) and data.find(MAGIC, offset + 1) < 0:
            return Scan(records, corrupt, torn=True)
        corrupt += 1
        following = data.find(MAGIC, offset + 1)
        if following < 0:
            return Scan(records, corrupt, torn=False)
        offset = following
    return Scan(records, corrupt, torn=False)


@dataclass(eq=False, slots=True)
class Chunk:
    """A chunk file (``path`` set) or its in-memory stand-in (``memory`` set)."""

    number: int
    path: Path | None
    fd: int | None = None
    memory: bytearray | None = None
    size: int = 0
    live: int = 0
    """Records in it not yet acknowledged."""

    def write(self, frame: bytes) -> int:
        """Append ``frame``; returns its offset."""
        offset = self.size
        if self.memory is not None:
            self.memory += frame
        else:
            assert self.fd is not None
            view = memoryview(frame)
            while view:
                view = view[os.write(self.fd, view) :]
        self.size += len(frame)
        return offset

    def read(self, offset: int, length: int) -> bytes:
        if self.memory is not None:
            return bytes(self.memory[offset : offset + length])
        assert self.fd is not None
        return os.pread(self.fd, length, offset)

    def empty(self) -> None:
        if self.memory is not None:
            self.memory.clear()
        elif self.fd is not None:
            os.ftruncate(self.fd, 0)
        self.size = 0

    def close(self, *, remove: bool) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if remove and self.path is not None:
            self.path.unlink(missing_ok=True)
        self.memory = None


def lock_stream(directory: Path) -> int:
    """Take the stream's lock without waiting; the OS releases it if the process dies."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    if sys.platform != "win32":
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SpoolBusy(f"{directory} is in use by another process") from None
    return fd


def fsync_directory(directory: Path) -> None:
    """Make a new or renamed entry of ``directory`` durable (best effort)."""
    if sys.platform == "win32":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
