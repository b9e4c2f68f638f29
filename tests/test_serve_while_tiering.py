"""A consumer reading from earliest through `serve` while serve's RemoteLogManager tiers the
segments it reads, local retention deletes them, and remote retention expires the oldest:
every record it gets equals `engine fetch --json`'s view; without remote expiration it gets
every record; with it, offsets only move forward (a reset to the new log start, as from
Kafka), it misses no record from the final log start on, every jump lands at or below that
start, and it still reaches the end."""

from __future__ import annotations

import bisect
import itertools
import json
import time
from pathlib import Path

import pytest
from serve_support import (
    TOPIC,
    Record,
    ServeProcess,
    build_small_broker,
    engine,
    records_of,
)

DEADLINE_S = 120
RECORDS = 4000


def _reference(config) -> list[Record]:
    return records_of(engine("fetch", "--config", config, "--topic", TOPIC, "--partition",
                             "0", "--offset", "0", "--to-end", "--json").stdout)


def _consume_slowly(bootstrap, last_offset) -> list[Record]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "slow",
                  "enable.auto.commit": False, "isolation.level": "read_uncommitted",
                  "auto.offset.reset": "earliest", "max.partition.fetch.bytes": 4096,
                  "queued.max.messages.kbytes": 64})
    got = []
    try:
        c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and (not got or got[-1].offset < last_offset):
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(Record(m.offset(), m.timestamp()[1], m.key(), m.value(),
                              list(m.headers() or [])))
            time.sleep(0.002)  # a slow reader: the tier moves under it
    finally:
        c.close()
    return got


def _status(config) -> dict:
    return json.loads(engine("status", "--config", config, "--json").stdout)[0]


@pytest.mark.parametrize("expire", [False, True])
def test_a_consumer_reading_while_serve_tiers_and_expires(tmp_path, expire):
    extra = "log.retention.check.interval.ms=200\n"
    config = build_small_broker(tmp_path, extra, records=RECORDS)
    want = _reference(config)
    by_offset = {r.offset: r for r in want}
    if expire:  # remote retention by size: the oldest segments go while it reads
        path = Path(config)
        path.write_text(path.read_text().replace(
            "log.retention.ms=-1\n", "log.retention.ms=-1\nlog.retention.bytes=500000\n"))
    proc = ServeProcess(config)
    try:
        got = _consume_slowly(proc.bootstrap, want[-1].offset)
    finally:
        assert proc.stop() == 0, proc.output()
    assert "Traceback" not in proc.output(), proc.output()
    status = _status(config)
    assert status["remote_segments"] > 0 and status["local_log_start_offset"] > 0, status
    assert got and got[-1].offset == want[-1].offset
    for r in got:
        assert r == by_offset[r.offset], r.offset
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets))
    if expire:
        start = status["log_start_offset"]
        assert start > 0, status
        # the only records it may miss are those expired before it got to them: every jump
        # lands at or below the final log start, and nothing from there on is missing
        existing = [r.offset for r in want]
        for before, after in itertools.pairwise(offsets):
            skipped = bisect.bisect_left(existing, after) - bisect.bisect_right(existing, before)
            if skipped:
                assert after <= start, (before, after, start)
        assert [r for r in want if r.offset >= start] == [r for r in got if r.offset >= start]
    else:
        assert got == want
