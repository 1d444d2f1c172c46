"""An append-only, bounded, crash-safe log of what a run still has to send.

One *stream* (what one `Run` writes) is a folder::

    stream.json        who the records belong to (url, project, run name, run document,
                       and the run id and segment once the server has answered)
    lock               flock()ed by the process that owns the stream
    acked              8 bytes: the sequence number of the last record the server took
    00000001.nws ...   chunk files of records, oldest first

Each record is a length-prefixed, CRC32-checked frame (`normwatch.client._frames`); a
damaged frame, such as one torn by a SIGKILL in the middle of an append, is skipped when
the stream is read back.

Records leave the spool in the order they were appended. Acknowledged records are not
rewritten: a chunk whose records are all acknowledged is deleted (or, if it is the one
being written, truncated), and ``acked`` lets a reader skip acknowledged records of a
chunk that still holds newer ones. When appending would pass ``max_bytes``, whole chunks
are dropped, oldest first, and the caller is told how much was lost.

A spool can also live in memory only, with the same behaviour minus durability: that is
what a `Run` falls back to when its spool folder cannot be written.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._frames import (
    HEADER_SIZE,
    LOCK_FILE,
    Chunk,
    Dropped,
    Kind,
    SpoolBusy,
    SpoolRecord,
    encode,
    fsync_directory,
    lock_stream,
    scan,
)

__all__ = ["Dropped", "Kind", "Spool", "SpoolBusy", "SpoolRecord"]

CHUNK_SUFFIX = ".nws"
INFO_FILE = "stream.json"
ACKED_FILE = "acked"
MAX_CHUNK_BYTES = 16 * 2**20
"""Chunk files rotate at this size (or at an eighth of the spool's bound, if smaller)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    seq: int
    kind: Kind
    points: int
    chunk: Chunk
    offset: int
    """Of the payload within the chunk."""
    length: int


@dataclass(slots=True)
class _State:
    chunks: list[Chunk] = field(default_factory=list)
    entries: deque[_Entry] = field(default_factory=deque)
    next_seq: int = 1
    pending_points: int = 0


class Spool:
    """The records of one stream, in order; thread-safe for one writer and one reader.

    Build one with `Spool.create` (a new stream, to append to), `Spool.open` (an existing
    stream, to replay) or `Spool.in_memory`.
    """

    def __init__(
        self,
        directory: Path | None,
        *,
        max_bytes: int,
        lock_fd: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.chunk_bytes = max(min(MAX_CHUNK_BYTES, max_bytes // 8), 1)
        self.metadata: dict[str, Any] = metadata or {}
        self.corrupt_records = 0
        self.torn_chunks = 0
        self.on_disk = directory is not None
        self.failure: OSError | None = None
        """The disk fault that moved the spool into memory, if one did."""
        self._lock = threading.Lock()
        self._lock_fd = lock_fd
        self._acked_fd: int | None = None
        self._state = _State()
        self._closed = False
        self._appending = True
        """False for a stream opened to replay: its last chunk is deleted, not emptied."""

    @classmethod
    def create(cls, directory: Path, metadata: dict[str, Any], *, max_bytes: int) -> Spool:
        """A new stream in ``directory`` (created), locked by this process."""
        directory.mkdir(parents=True, exist_ok=False)
        lock_fd = lock_stream(directory)
        spool = cls(directory, max_bytes=max_bytes, lock_fd=lock_fd, metadata=metadata)
        try:
            spool._write_metadata()
            spool._acked_fd = os.open(directory / ACKED_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            fsync_directory(directory.parent)
        except BaseException:
            spool.close()
            raise
        return spool

    @classmethod
    def open(cls, directory: Path) -> Spool:
        """An existing stream, to replay. Raises `SpoolBusy` when its owner is alive,
        `FileNotFoundError` when it has been delivered and removed meanwhile."""
        lock_fd = lock_stream(directory)
        try:
            metadata = json.loads((directory / INFO_FILE).read_text())
            spool = cls(directory, max_bytes=2**62, lock_fd=lock_fd, metadata=metadata)
        except BaseException:
            os.close(lock_fd)
            raise
        spool._appending = False
        try:
            spool._load()
        except BaseException:
            spool.close()
            raise
        return spool

    @classmethod
    def in_memory(cls, metadata: dict[str, Any], *, max_bytes: int) -> Spool:
        """A spool that keeps its records in memory: bounded, ordered, not durable."""
        return cls(None, max_bytes=max_bytes, metadata=metadata)

    @property
    def pending_records(self) -> int:
        """Records appended and not yet acknowledged (nor dropped)."""
        return len(self._state.entries)

    @property
    def pending_points(self) -> int:
        """Points in the pending records."""
        return self._state.pending_points

    @property
    def size_bytes(self) -> int:
        """Bytes held: every chunk's size, acknowledged records included until removed."""
        return sum(chunk.size for chunk in self._state.chunks)

    def update_metadata(self, **changes: Any) -> None:
        """Merge ``changes`` into ``stream.json``, replacing the file atomically."""
        with self._lock:
            self.metadata.update(changes)
            if self.on_disk:
                try:
                    self._write_metadata()
                except OSError as exc:
                    self._fail(exc)

    def append(self, kind: Kind, points: int, payload: bytes) -> Dropped:
        """Append a record (durable after the next `flush`). Returns what was dropped to
        make room: whole chunks, oldest first, so that the spool stays within ``max_bytes``
        (a single record larger than that is still kept).

        Never raises for a disk fault: the spool keeps this and later records in memory,
        `on_disk` turns False and `failure` says why.
        """
        with self._lock:
            state = self._state
            frame = encode(SpoolRecord(state.next_seq, kind, points, payload))
            active = self._active_chunk(len(frame))
            dropped = self._make_room(len(frame), active)
            try:
                offset = active.write(frame)
            except OSError as exc:
                self._fail(exc)
                active = self._active_chunk(len(frame))
                offset = active.write(frame)
            self._add_entry(kind, points, active, offset, len(frame))
            return dropped

    def flush(self) -> None:
        """Make appended records durable (fsync); a disk fault is handled as in `append`."""
        with self._lock:
            active = self._state.chunks[-1] if self._state.chunks else None
            try:
                if active is not None and active.fd is not None and self.on_disk:
                    os.fsync(active.fd)
                if self._acked_fd is not None:
                    os.fsync(self._acked_fd)
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        self.on_disk = False
        self.failure = exc

    def peek(self) -> SpoolRecord | None:
        """The oldest pending record, or None."""
        with self._lock:
            if not self._state.entries:
                return None
            entry = self._state.entries[0]
            payload = entry.chunk.read(entry.offset, entry.length)
            return SpoolRecord(entry.seq, entry.kind, entry.points, payload)

    def ack(self, seq: int) -> bool:
        """Forget record ``seq``, which the server has taken. False when it had already been
        dropped to make room (and counted as dropped)."""
        with self._lock:
            state = self._state
            if not state.entries or state.entries[0].seq != seq:
                return False
            entry = state.entries.popleft()
            state.pending_points -= entry.points
            entry.chunk.live -= 1
            if self._acked_fd is not None:
                try:
                    os.pwrite(self._acked_fd, struct.pack("<Q", seq), 0)
                except OSError:
                    pass  # only costs re-sending acknowledged records after a crash
            if entry.chunk.live == 0:
                self._release_chunk(entry.chunk)
            return True

    def close(self) -> None:
        """Release files and the lock; what is pending stays on disk."""
        with self._lock:
            self._close(remove=False)

    def destroy(self) -> None:
        """Delete the stream (everything has been delivered) and release the lock."""
        with self._lock:
            directory = self.directory
            if directory is not None and not self._closed:
                # stream.json goes first: a reader that takes the lock after us and finds
                # no stream.json knows the stream is gone.
                (directory / INFO_FILE).unlink(missing_ok=True)
            self._close(remove=True)
            if directory is not None:
                for name in (ACKED_FILE, LOCK_FILE):
                    (directory / name).unlink(missing_ok=True)
                try:
                    directory.rmdir()
                except OSError:
                    pass  # something foreign in it; leave it for the user

    def _close(self, *, remove: bool) -> None:
        if self._closed:
            return
        self._closed = True
        for chunk in self._state.chunks:
            chunk.close(remove=remove)
        for fd in (self._acked_fd, self._lock_fd):
            if fd is not None:
                os.close(fd)
        self._acked_fd = self._lock_fd = None

    def _add_entry(self, kind: Kind, points: int, chunk: Chunk, offset: int, size: int) -> None:
        state = self._state
        state.entries.append(
            _Entry(state.next_seq, kind, points, chunk, offset + HEADER_SIZE, size - HEADER_SIZE)
        )
        state.next_seq += 1
        state.pending_points += points
        chunk.live += 1

    def _active_chunk(self, frame_size: int) -> Chunk:
        """The chunk to append to: a new one when the current one is full, or when the disk
        failed under it."""
        chunks = self._state.chunks
        if not chunks:
            return self._new_chunk()
        active = chunks[-1]
        full = active.size > 0 and active.size + frame_size > self.chunk_bytes
        if not full and (active.memory is not None or self.on_disk):
            return active
        if active.fd is not None and self.on_disk:
            try:
                os.fsync(active.fd)  # durable before a newer chunk holds later records
            except OSError as exc:
                self._fail(exc)
        if active.live == 0:
            self._release_chunk(active, rotating=True)
        return self._new_chunk()

    def _new_chunk(self) -> Chunk:
        chunks = self._state.chunks
        number = chunks[-1].number + 1 if chunks else 1
        if not self.on_disk or self.directory is None:
            chunk = Chunk(number, None, memory=bytearray())
        else:
            path = self.directory / f"{number:08d}{CHUNK_SUFFIX}"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            except OSError as exc:  # recorded, so that the writer warns as for a failed write
                self._fail(exc)
                chunk = Chunk(number, None, memory=bytearray())
            else:
                chunk = Chunk(number, path, fd=fd)
                fsync_directory(self.directory)
        chunks.append(chunk)
        return chunk

    def _make_room(self, frame_size: int, active: Chunk) -> Dropped:
        state = self._state
        records = points = 0
        while self.size_bytes + frame_size > self.max_bytes and state.chunks[0] is not active:
            oldest = state.chunks[0]
            while state.entries and state.entries[0].chunk is oldest:
                entry = state.entries.popleft()
                records += 1
                points += entry.points
            oldest.live = 0
            self._release_chunk(oldest)
        state.pending_points -= points
        return Dropped(records, points)

    def _release_chunk(self, chunk: Chunk, *, rotating: bool = False) -> None:
        """A chunk without pending records: delete it, or empty it if it is being written."""
        chunks = self._state.chunks
        if chunk is chunks[-1] and self._appending and not rotating:
            try:
                chunk.empty()
            except OSError:
                pass
            return
        chunk.close(remove=True)
        chunks.remove(chunk)

    def _load(self) -> None:
        assert self.directory is not None
        acked = 0
        try:
            raw = (self.directory / ACKED_FILE).read_bytes()
            if len(raw) >= 8:
                acked = struct.unpack_from("<Q", raw)[0]
        except FileNotFoundError:
            pass
        state = self._state
        paths = sorted(self.directory.glob(f"*{CHUNK_SUFFIX}"))
        for path in paths:
            if not path.stem.isdigit():
                continue
            fd = os.open(path, os.O_RDONLY)
            chunk = Chunk(int(path.stem), path, fd=fd)
            data = path.read_bytes()
            chunk.size = len(data)
            scanned = scan(data)
            self.corrupt_records += scanned.corrupt
            self.torn_chunks += scanned.torn
            state.chunks.append(chunk)
            for offset, record in scanned.records:
                if record.seq <= acked:
                    continue
                state.entries.append(
                    _Entry(
                        record.seq,
                        record.kind,
                        record.points,
                        chunk,
                        offset + HEADER_SIZE,
                        len(record.payload),
                    )
                )
                state.pending_points += record.points
                chunk.live += 1
                state.next_seq = max(state.next_seq, record.seq + 1)
        self._acked_fd = os.open(self.directory / ACKED_FILE, os.O_RDWR | os.O_CREAT, 0o600)

    def _write_metadata(self) -> None:
        assert self.directory is not None
        temporary = self.directory / f"{INFO_FILE}.tmp"
        with temporary.open("w") as file:
            json.dump(self.metadata, file)
            file.flush()
            os.fsync(file.fileno())
        temporary.replace(self.directory / INFO_FILE)
        fsync_directory(self.directory)
