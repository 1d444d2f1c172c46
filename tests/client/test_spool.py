"""The spool format and its bookkeeping, and `sync_spool`, without a server process."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import httpx
import pytest

from normwatch.client import sync_spool
from normwatch.client._batch import split_document
from normwatch.client._delivery import with_segment
from normwatch.client._frames import MAGIC, Dropped, Kind, SpoolBusy, SpoolRecord, encode, scan
from normwatch.client._spool import Spool
from normwatch.client._streams import new_stream_dir, run_folder, stream_dirs

from .fake_ingest import TOKEN, FakeIngest, endpoint

METADATA = {"version": 1, "url": "http://normwatch.test", "project": "marin", "name": "exp1"}


def batch(step: int, width: int = 1) -> bytes:
    """A spooled batch of one step holding ``width`` metrics."""
    metrics = {f"m{i}": [float(step)] for i in range(width)}
    return json.dumps({"steps": [step], "metrics": metrics}).encode()


def new_spool(tmp_path: Path, max_bytes: int = 2**20) -> Spool:
    folder = run_folder(tmp_path / "spool", "marin", "exp1")
    return Spool.create(new_stream_dir(folder), dict(METADATA, create={}), max_bytes=max_bytes)


def drain(spool: Spool) -> list[SpoolRecord]:
    """Every pending record, oldest first, acknowledging each."""
    records = []
    while (record := spool.peek()) is not None:
        assert spool.ack(record.seq)
        records.append(record)
    return records


def chunk_files(spool: Spool) -> list[Path]:
    assert spool.directory is not None
    return sorted(spool.directory.glob("*.nws"))


def test_records_come_back_in_order_from_memory_and_from_disk(tmp_path: Path) -> None:
    spool = new_spool(tmp_path)
    spool.append(Kind.METRICS, 1, batch(0))
    spool.append(Kind.EVENT, 0, b'{"step": 0, "kind": "note", "text": "x"}')
    spool.append(Kind.METRICS, 3, batch(1, width=3))
    spool.append(Kind.STATUS, 0, b'{"status": "finished"}')
    spool.flush()
    assert (spool.pending_records, spool.pending_points) == (4, 4)
    assert spool.directory is not None
    spool.close()

    again = Spool.open(spool.directory)
    assert again.metadata["name"] == "exp1"
    records = drain(again)
    assert [(r.seq, r.kind, r.points) for r in records] == [
        (1, Kind.METRICS, 1),
        (2, Kind.EVENT, 0),
        (3, Kind.METRICS, 3),
        (4, Kind.STATUS, 0),
    ]
    assert records[2].payload == batch(1, width=3)
    assert (again.corrupt_records, again.torn_chunks) == (0, 0)
    again.destroy()
    assert not spool.directory.exists()


def test_a_torn_last_record_is_skipped(tmp_path: Path) -> None:
    spool = new_spool(tmp_path)
    for step in range(3):
        spool.append(Kind.METRICS, 1, batch(step))
    spool.flush()
    spool.close()
    (chunk,) = chunk_files(spool)
    chunk.write_bytes(chunk.read_bytes()[:-5])  # the writer died inside its last write

    assert spool.directory is not None
    again = Spool.open(spool.directory)
    assert [r.payload for r in drain(again)] == [batch(0), batch(1)]
    assert (again.corrupt_records, again.torn_chunks) == (0, 1)
    again.close()


@pytest.mark.parametrize("cut", [1, 8, 14], ids=["in-magic", "in-length", "in-header"])
def test_a_record_cut_anywhere_in_its_header_is_torn_not_fatal(tmp_path: Path, cut: int) -> None:
    whole = encode(SpoolRecord(1, Kind.METRICS, 1, batch(0)))
    torn = encode(SpoolRecord(2, Kind.METRICS, 1, batch(1)))[:cut]
    scanned = scan(whole + torn)
    assert [record.seq for _, record in scanned.records] == [1]
    assert scanned.torn and scanned.corrupt == 0


def test_a_record_with_a_bad_crc_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    spool = new_spool(tmp_path)
    for step in range(3):
        spool.append(Kind.METRICS, 1, batch(step))
    spool.flush()
    spool.close()
    (chunk,) = chunk_files(spool)
    data = bytearray(chunk.read_bytes())
    second = data.find(MAGIC, 1)
    data[second + 30] ^= 0xFF  # a flipped bit in the second record's payload
    chunk.write_bytes(bytes(data))

    assert spool.directory is not None
    again = Spool.open(spool.directory)
    assert [r.payload for r in drain(again)] == [batch(0), batch(2)]
    assert (again.corrupt_records, again.torn_chunks) == (1, 0)
    again.close()


def test_a_corrupt_length_field_resynchronises_on_the_next_frame() -> None:
    frames = [encode(SpoolRecord(seq, Kind.METRICS, 1, batch(seq))) for seq in (1, 2, 3)]
    broken = bytearray(frames[1])
    struct.pack_into("<I", broken, 4, 10**6)  # a length that runs past the end
    scanned = scan(frames[0] + bytes(broken) + frames[2])
    assert [record.seq for _, record in scanned.records] == [1, 3]
    assert (scanned.corrupt, scanned.torn) == (1, False)


def test_the_frame_is_length_prefixed_and_crc32_checked() -> None:
    frame = encode(SpoolRecord(7, Kind.EVENT, 0, b"{}"))
    magic, length, crc = struct.unpack_from("<4sII", frame)
    body = frame[12:]
    assert (magic, length, crc) == (b"NWS1", len(body), zlib.crc32(body))
    assert struct.unpack_from("<QBI", body) == (7, Kind.EVENT, 0)
    assert body[13:] == b"{}"


def test_overflow_drops_the_oldest_chunks_and_counts_them(tmp_path: Path) -> None:
    spool = new_spool(tmp_path, max_bytes=4096)
    record_size = len(encode(SpoolRecord(1, Kind.METRICS, 2, batch(0, width=2))))
    dropped = Dropped(0, 0)
    for step in range(100):
        result = spool.append(Kind.METRICS, 2, batch(step, width=2))
        dropped = Dropped(dropped.records + result.records, dropped.points + result.points)
        assert spool.size_bytes <= 4096

    kept = drain(spool)
    assert dropped.records > 0 and dropped.points == 2 * dropped.records
    assert len(kept) + dropped.records == 100
    assert [json.loads(r.payload)["steps"][0] for r in kept] == list(range(dropped.records, 100))
    assert len(kept) * record_size > 4096 * 3 // 4, "drops whole chunks of an eighth"
    spool.close()


def test_a_record_larger_than_the_whole_spool_is_still_kept(tmp_path: Path) -> None:
    spool = new_spool(tmp_path, max_bytes=4096)
    spool.append(Kind.METRICS, 1, batch(0))
    huge = batch(1, width=500)
    assert len(huge) > 4096
    assert spool.append(Kind.METRICS, 500, huge) == Dropped(1, 1)
    assert [r.payload for r in drain(spool)] == [huge]
    spool.close()


def test_chunks_rotate_and_acknowledged_ones_are_deleted(tmp_path: Path) -> None:
    spool = new_spool(tmp_path, max_bytes=16 * 1024)  # 2 KiB chunks
    for step in range(100):
        spool.append(Kind.METRICS, 1, batch(step))
    spool.flush()
    files = chunk_files(spool)
    assert len(files) > 3
    assert [int(path.stem) for path in files] == list(range(1, len(files) + 1))

    records = drain(spool)
    assert [json.loads(r.payload)["steps"] for r in records] == [[step] for step in range(100)]
    (active,) = chunk_files(spool)
    assert active == files[-1] and active.stat().st_size == 0, "the active chunk is truncated"
    spool.append(Kind.METRICS, 1, batch(100))
    assert [r.payload for r in drain(spool)] == [batch(100)]
    spool.close()


def test_acknowledged_records_are_not_replayed_after_a_crash(tmp_path: Path) -> None:
    spool = new_spool(tmp_path)
    for step in range(5):
        spool.append(Kind.METRICS, 1, batch(step))
    spool.flush()
    for _ in range(2):
        record = spool.peek()
        assert record is not None and spool.ack(record.seq)
    spool.close()  # as a SIGKILL would leave it: files and lock released, nothing deleted

    assert spool.directory is not None
    again = Spool.open(spool.directory)
    assert [r.payload for r in drain(again)] == [batch(2), batch(3), batch(4)]
    again.close()


def test_a_stream_in_use_cannot_be_opened_twice(tmp_path: Path) -> None:
    spool = new_spool(tmp_path)
    assert spool.directory is not None
    with pytest.raises(SpoolBusy):
        Spool.open(spool.directory)
    spool.close()
    Spool.open(spool.directory).close()


def test_ack_of_a_record_dropped_for_room_reports_it(tmp_path: Path) -> None:
    spool = new_spool(tmp_path, max_bytes=4096)
    spool.append(Kind.METRICS, 1, batch(0))
    in_flight = spool.peek()
    assert in_flight is not None
    dropped = Dropped(0, 0)
    step = 1
    while dropped.records == 0:
        dropped = spool.append(Kind.METRICS, 1, batch(step))
        step += 1
    assert not spool.ack(in_flight.seq), "it was counted as dropped already"
    spool.close()


def test_an_in_memory_spool_orders_and_bounds_the_same_way() -> None:
    spool = Spool.in_memory(dict(METADATA), max_bytes=4096)
    dropped = sum(spool.append(Kind.METRICS, 1, batch(step)).records for step in range(200))
    kept = drain(spool)
    assert dropped > 0 and len(kept) + dropped == 200
    steps = [json.loads(r.payload)["steps"][0] for r in kept]
    assert steps == list(range(200 - len(kept), 200))
    assert not spool.on_disk
    spool.destroy()


def test_streams_are_found_in_the_order_they_started(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    made = []
    for name in ("b", "a", "b"):
        folder = run_folder(root, None, name)
        spool = Spool.create(new_stream_dir(folder), {"name": name}, max_bytes=4096)
        made.append(spool.directory)
        spool.close()
    found = stream_dirs(root)
    assert sorted(found) == sorted(made)
    b_streams = [path for path in found if path.parent.name.startswith("_.b-")]
    assert b_streams == [made[0], made[2]]
    assert stream_dirs(made[1]) == [made[1]] and stream_dirs(made[1].parent) == [made[1]]


def test_run_folders_are_unique_per_project_and_name(tmp_path: Path) -> None:
    names = {
        run_folder(tmp_path, project, name)
        for project in (None, "a", "a/b")
        for name in ("x", "x/../y", "x y")
    }
    assert len(names) == 9
    assert all(path.parent == tmp_path and "/" not in path.name for path in names)


def test_segments_are_added_to_spooled_batches_when_sent() -> None:
    body = batch(3)
    assert json.loads(with_segment(body, 2)) == {**json.loads(body), "segment": 2}
    assert with_segment(body, None) == body


def test_a_batch_splits_in_halves_by_step_with_point_counts() -> None:
    document = {"steps": [1, 2, 3], "metrics": {"a": [1.0, None, 3.0], "b": [None, None, 9.0]}}
    assert split_document(document) == (
        ({"steps": [1], "metrics": {"a": [1.0]}}, 1),
        ({"steps": [2, 3], "metrics": {"a": [None, 3.0], "b": [None, 9.0]}}, 2),
    )
    assert split_document({"steps": [1], "metrics": {"a": [1.0]}}) is None


def _stream(root: Path, name: str, steps: range) -> Path:
    spool = Spool.create(
        new_stream_dir(run_folder(root, "marin", name)),
        dict(METADATA, name=name, create={"project": "marin", "name": name}),
        max_bytes=2**20,
    )
    for step in steps:
        spool.append(Kind.METRICS, 1, batch(step))
    spool.append(Kind.STATUS, 0, b'{"status": "finished"}')
    spool.flush()
    assert spool.directory is not None
    spool.close()
    return spool.directory


def test_sync_delivers_every_stream_and_removes_it(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    _stream(root, "one", range(0, 3))
    _stream(root, "two", range(10, 12))
    server = FakeIngest()
    lines: list[str] = []
    report = sync_spool(root, token=TOKEN, transport=server.transport(), progress=lines.append)

    assert report.ok and (report.streams, report.delivered) == (2, 2)
    assert (report.tally.batches, report.tally.points, report.tally.dead_records) == (5, 5, 0)
    assert sorted(server.points) == [(s, "m0") for s in (0, 1, 2, 10, 11)]
    assert [d["name"] for d in server.created] == ["one", "two"]
    assert list(root.iterdir()) == []
    assert any("marin/one" in line and "3 points" in line for line in lines)


def test_sync_leaves_the_spool_intact_when_the_server_is_unreachable(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    directory = _stream(root, "one", range(3))
    before = {path.name: path.read_bytes() for path in directory.iterdir()}

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    report = sync_spool(root, token=TOKEN, transport=httpx.MockTransport(refuse), retry_for=0.2)
    assert not report.ok and report.failure is not None
    assert "did not take the data" in report.failure and report.delivered == 0
    assert {path.name: path.read_bytes() for path in directory.iterdir()} == before


def test_sync_skips_a_stream_a_live_trainer_still_writes(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    live = Spool.create(
        new_stream_dir(run_folder(root, "marin", "live")), dict(METADATA), max_bytes=2**20
    )
    live.append(Kind.METRICS, 1, batch(0))
    server = FakeIngest()
    report = sync_spool(root, token=TOKEN, transport=server.transport())
    assert report.ok and report.busy == [live.directory] and server.requests == []
    live.close()


def test_sync_dead_letters_what_the_server_refuses_and_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    directory = _stream(root, "one", range(3))
    server = FakeIngest()

    def refuse_step_one(
        request: httpx.Request, document: dict[str, object] | None
    ) -> httpx.Response | None:
        assert document is not None
        if document["steps"] == [1]:
            return httpx.Response(422, json={"detail": "metrics['m0'][0]: bad"})
        return None

    server.faults["metrics"] = refuse_step_one
    report = sync_spool(root, token=TOKEN, transport=server.transport())
    assert not report.ok and report.failure is None
    assert (report.tally.points, report.tally.dead_records, report.tally.dead_points) == (2, 1, 1)
    (letter,) = (directory.parent / "deadletter.jsonl").read_text().splitlines()
    assert json.loads(letter)["message"] == "HTTP 422: metrics['m0'][0]: bad"
    assert [endpoint(r) for r in server.requests] == [
        "runs",
        "metrics",
        "metrics",
        "metrics",
        "update",
    ]
    assert not directory.exists()


def test_sync_reports_a_stream_it_cannot_read_and_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "spool"
    broken = _stream(root, "broken", range(1))
    (broken / "stream.json").write_text("{not json")
    _stream(root, "fine", range(2))
    server = FakeIngest()
    report = sync_spool(root, token=TOKEN, transport=server.transport())

    assert not report.ok and [path for path, _ in report.unreadable] == [broken]
    assert report.delivered == 1 and sorted(server.points) == [(0, "m0"), (1, "m0")]
    assert broken.exists()
