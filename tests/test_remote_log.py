"""The read model (engine.remote.remote_log): every answer of RemoteLog, from each source of
segments a reader feeds it, on the same tiered partition, equal to what the partition held
before it was tiered.

Sources: "lineage" (a broker's: the leader-epoch cache and the RLMM's lookups, the RLM's
RemoteIndexCache), "chain" (the RLMM's lineage resolved once, as a Spark or Arrow scan plans
it, indexes through the RSM) and, on the object-store tier, "bucket" (the bucket's listing
alone, as `serve --bucket` and the bucket readers see it)."""

from __future__ import annotations

import itertools
import uuid
from types import SimpleNamespace

import pytest
from test_rlm_helpers import T0, TOPIC, Env, marker, records_of, txn_batch

from engine.config import BrokerConfig
from engine.remote import remote_log as remote_log_module
from engine.remote.checked_batches import CHECKED_BATCHES
from engine.remote.factory import create_remote_storage_manager
from engine.remote.remote_log import READ_FORWARD_LINKS, ChainSegments, RemoteLog, StoreIndexes
from engine.rlm.reader import remote_log
from engine.scan.planning import lineage

SIZES = (1, 150, 700, 100_000)


class Tiered:
    """A partition with committed and aborted transactions across segments, tiered but for
    its active segment, and what it held before (local reads, records, aborts)."""

    def __init__(self, tmp_path, kind, s3_server):
        rsm, self.store, self.closers = None, None, []
        if kind == "s3":
            self.store = {**s3_server.config(), "key.prefix": f"rl-{uuid.uuid4().hex[:8]}/",
                          "chunk.size": "512"}
            rsm = create_remote_storage_manager(BrokerConfig({
                "remote.log.storage.manager.class.name":
                    "io.aiven.kafka.tieredstorage.RemoteStorageManager",
                **{f"rsm.config.{k}": v for k, v in self.store.items()}}))
            self.url = f"s3://{self.store['storage.s3.bucket.name']}/{self.store['key.prefix']}"
        self.env = Env(tmp_path, topic_config={"local.retention.bytes": 1}, rsm=rsm)
        unified = self.env.log()
        self.aborted = []  # (producer id, first offset, marker offset)
        for i, pid in enumerate((31, 32, 33, 34)):
            self.env.produce(2, size=90)
            first = unified.log_end_offset
            unified.append_as_leader(txn_batch([b"t" * 150] * 2, producer_id=pid,
                                               timestamp=T0 + 500_000 + i), 0)
            self.env.produce(1, size=90)
            abort = pid % 2 == 1
            end, _ = unified.append_as_leader(
                marker(not abort, producer_id=pid, timestamp=T0 + 500_000 + i), 0)
            if abort:
                self.aborted.append((pid, first, end))
        self.env.produce(6, size=90)
        self.end = unified.segments[-1].base_offset
        self.local = {(o, mb): unified.read(o, mb, True) for o in range(self.end)
                      for mb in SIZES}
        self.local = {k: (bytes(v), n) for k, (v, n) in self.local.items()}
        self.records, offset = [], 0
        while offset < self.end:  # a local read stays within one segment
            data, offset = unified.read(offset, 1 << 20, True)
            self.records += [(r.offset, r.timestamp) for b in _batches(data)
                             if not b.is_control for r in b]
        self.env.rlm.run_once()
        assert unified.local_log_start_offset == self.end

    def close(self):
        for closer in self.closers:
            closer.close()
        self.env.close()


def _batches(data):
    from engine.records import MemoryRecords

    return list(MemoryRecords(bytes(data)).batches())


@pytest.fixture(params=["fs", "s3"])
def tiered(request, tmp_path):
    s3 = request.getfixturevalue("s3_server") if request.param == "s3" else None
    t = Tiered(tmp_path, request.param, s3)
    yield t
    t.close()


def _sources(t: Tiered) -> dict[str, tuple[RemoteLog, list]]:
    env = t.env
    st = env.rlm._partitions[(TOPIC, 0)]
    chain = lineage(env.rlmm.list_remote_log_segments(st.tip))
    broker = remote_log(env.rlm.reader, st)
    walked, link = [], broker.segments.link_for(0)
    while link is not None:
        walked.append(link)
        link = broker.segments.next_link(link)
    out = {"lineage": (broker, walked),
           "chain": (RemoteLog(env.rsm, ChainSegments(f"{TOPIC}-0", chain),
                               StoreIndexes(env.rsm)), chain)}
    if t.store is not None:
        from engine.remote.bucket import Bucket

        bucket = Bucket(t.url, t.store)
        t.closers.append(bucket)
        view = bucket.partition(bucket.partitions()[(TOPIC, 0)])
        out["bucket"] = (RemoteLog(bucket.rsm, ChainSegments(f"{TOPIC}-0", view.chain),
                                   StoreIndexes(bucket.rsm)), view.chain)
    return out


def _each_source(t):
    sources = _sources(t)
    assert len({tuple((link.start_offset, link.end) for link in links)
                for _, links in sources.values()}) == 1, "every source serves the same links"
    return sources.items()


def test_reads_equal_the_local_reads_before_tiering(tiered):
    for name, (log, _) in _each_source(tiered):
        for (offset, max_bytes), (data, next_offset) in tiered.local.items():
            got = log.read(offset, max_bytes)
            assert (bytes(got.records), got.next_offset) == (data, next_offset), \
                (name, offset, max_bytes)


def test_reads_cut_from_checked_rows_equal_reads_that_scan(tmp_path, monkeypatch):
    """A read answered from checked batch rows (engine.remote.checked_batches) returns what a
    read scanning the bytes returns, under every rule of the cut: max_bytes, the first batch
    whole (or nothing, without min_one_message), the upper bound. (The filesystem tier: the
    object store's plain reads here have no chunk cache, so no read generation.)"""
    tiered = Tiered(tmp_path, "fs", None)
    try:
        _compare_reads_cut_from_rows(tiered, monkeypatch)
    finally:
        tiered.close()


def _compare_reads_cut_from_rows(tiered, monkeypatch):
    scans = []
    real_scan = remote_log_module._records.scan
    monkeypatch.setattr(remote_log_module, "_records", SimpleNamespace(
        scan=lambda view, crc=True: scans.append(1) or real_scan(view, crc)))
    for name, (log, _) in _each_source(tiered):
        cases = [(o, mb, one, upto) for o in range(tiered.end) for mb in (1, 700, 100_000)
                 for one in (True, False) for upto in (None, o + 2)]

        def read(case, log=log):
            got = log.read(case[0], case[1], case[2], upto=case[3])
            return bytes(got.records), got.next_offset

        scans.clear()
        scanned = {}
        for case in cases:  # (a first read of a segment opens its file: no generation)
            CHECKED_BATCHES.clear()
            scanned[case] = read(case)
        expected = len(scans)
        for case in cases:  # every batch's row recorded
            read(case)
        scans.clear()
        assert {case: read(case) for case in cases} == scanned, name
        assert len(scans) < expected // 10, name  # most answered from rows


def test_aborted_transactions_are_those_produced(tiered):
    for name, (log, _) in _each_source(tiered):
        for offset in range(tiered.end):
            got = log.read(offset, 700)
            found, complete = log.aborted_transactions(got.link, offset, got.next_offset)
            want = [(p, f) for p, f, last in tiered.aborted
                    if last >= offset and f < got.next_offset]
            assert [(a.producer_id, a.first_offset) for a in found] == want, (name, offset)
            assert complete or got.next_offset > tiered.aborted[-1][2] or not want
        assert sorted(log.all_aborted_transactions(_links(log, tiered))) == \
            sorted(tiered.aborted), name


def _links(log, t):
    out, link = [], log.segments.link_for(0)
    while link is not None:
        out.append(link)
        link = log.segments.next_link(link)
    return out


def test_offsets_for_timestamps_and_max_timestamp(tiered):
    records = tiered.records
    top = max(ts for _, ts in records)
    for name, (log, links) in _each_source(tiered):
        for _, ts in records + [(None, top + 1), (None, T0 - 1)]:
            want = next((o for o, t in records if t >= ts), None)
            found = log.offset_for_timestamp(ts, links)
            assert (found[0] if found else None) == want, (name, ts)
        assert log.max_timestamp(links) == (top, next(o for o, t in records if t == top)), name
        for offset, ts in records[::7]:
            assert log.timestamp_at(offset) == ts, (name, offset)


def test_list_offsets_specs(tiered):
    records = tiered.records
    for name, (log, links) in _each_source(tiered):
        lso = log.last_stable_offset(links)
        assert lso == tiered.end, name
        answers = {spec: log.list_offset(spec, links, lso, False, 0, lambda o: 0)
                   for spec in (-1, -2, -3, -4, -5, records[10][1])}
        top = max(ts for _, ts in records)
        hit = next((o, t) for o, t in records if t >= records[10][1])
        assert answers == {
            -1: (-1, tiered.end, 0), -2: (-1, 0, 0), -4: (-1, tiered.end, 0),
            -5: (-1, tiered.end - 1, 0),
            -3: (top, next(o for o, t in records if t == top), 0),
            records[10][1]: (hit[1], hit[0], 0)}, name


def test_an_offset_no_segment_serves_is_out_of_range(tiered):
    from engine.errors import OffsetOutOfRangeError

    for name, (log, _) in _each_source(tiered):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(tiered.end + 3, 100)
        assert info.value.offset == tiered.end + 3, name
        assert records_of(log.read(0, 1).records)[0][0] == 0, name


# -- indexes that lie: checked against their segment before they decide anything ---------

def _drop_first(rows):
    return rows[1:]


def _other_producer(rows):
    rows = rows.copy()
    rows["producer_id"][:1] += 100
    return rows


def _emptied(rows):
    return rows[:0]


TXN_LIES = {"an entry dropped": _drop_first, "another producer": _other_producer,
            "every entry dropped": _emptied}


def _mangling_copies(rsm, tmp_path, txn=None, times=None):
    """Wraps `rsm.copy_log_segment_data` so that each upload carries a rewritten
    transaction index (`txn`: rows -> rows, applied where it has entries) or time index
    (`times`: raw bytes -> raw bytes): the tier holds them as if they were written so."""
    import dataclasses

    import numpy as np

    from engine.log.transaction_index import ABORTED_TXN_DTYPE

    copy = rsm.copy_log_segment_data
    count = iter(range(1_000_000))

    def mangled(md, data):
        n = next(count)
        if txn is not None and data.transaction_index is not None:
            rows = np.frombuffer(data.transaction_index.read_bytes(), ABORTED_TXN_DTYPE)
            if len(rows):
                path = tmp_path / f"lie-{n}.txnindex"
                path.write_bytes(txn(rows).tobytes())
                data = dataclasses.replace(data, transaction_index=path)
        if times is not None:
            path = tmp_path / f"lie-{n}.timeindex"
            path.write_bytes(times(data.time_index.read_bytes()))
            data = dataclasses.replace(data, time_index=path)
        return copy(md, data)

    rsm.copy_log_segment_data = mangled


def _lying_tier(tmp_path, kind, s3_server, **lies):
    import test_rlm_helpers

    made = {}
    real_env = test_rlm_helpers.Env

    def env_with_lies(*args, **kwargs):
        env = real_env(*args, **kwargs)
        _mangling_copies(env.rsm, tmp_path, **lies)
        made["env"] = env
        return env

    import test_remote_log

    test_remote_log.Env = env_with_lies
    try:
        return Tiered(tmp_path, kind, s3_server)
    finally:
        test_remote_log.Env = real_env


@pytest.mark.parametrize("kind", ["fs", "s3"])
@pytest.mark.parametrize("lie", sorted(TXN_LIES))
def test_a_lying_transaction_index_fails_read_committed_never_misleads(tmp_path, kind, lie,
                                                                     request):
    from engine.errors import CorruptIndexError

    s3 = request.getfixturevalue("s3_server") if kind == "s3" else None
    t = _lying_tier(tmp_path, kind, s3, txn=TXN_LIES[lie])
    try:
        for name, (log, _) in _each_source(t):
            failed = set()
            for offset in range(t.end):
                got = log.read(offset, 700)  # read_uncommitted needs no transaction index
                try:
                    log.aborted_transactions(got.link, offset, got.next_offset)
                except CorruptIndexError as exc:
                    assert "transaction index" in str(exc) and "disagrees" in str(exc)
                    failed.add(got.link.segment.remote_log_segment_id)
            # the segments holding an abort marker are the ones whose index lies
            holding = {link.segment.remote_log_segment_id for link in _links(log, t)
                       if any(link.start_offset <= m < link.end for _, _, m in t.aborted)}
            assert failed >= holding and holding, (name, lie)
        # a scan checks each range's markers against the planned aborts as it decodes
        from engine.arrow import read_topic

        source = ({"bucket": t.url, "store": t.store} if kind == "s3"
                  else {"config": t.env.config.originals()})
        with (pytest.raises(CorruptIndexError, match="transaction indexes disagree"),
              read_topic(TOPIC, isolation_level="read_committed", **source) as stream):
            stream.read_all()
        with read_topic(TOPIC, **source) as stream:
            assert stream.read_all().num_rows == len(t.records)
    finally:
        t.close()


def test_a_lying_time_index_fails_list_offsets_by_time(tmp_path):
    from engine.errors import CorruptIndexError

    def later_last(raw):  # the last entry's timestamp one ms earlier than the records say
        if len(raw) < 12:
            return raw
        ts = int.from_bytes(raw[-12:-4], "big") - 1
        return raw[:-12] + ts.to_bytes(8, "big") + raw[-4:]

    t = _lying_tier(tmp_path, "fs", None, times=later_last)
    try:
        for name, (log, links) in _each_source(t):
            with pytest.raises(CorruptIndexError, match="time index"):
                for _, ts in t.records:
                    log.offset_for_timestamp(ts, links)
            assert log.read(0, 100).next_offset > 0, name
    finally:
        t.close()


class _ForwardCounting:
    """An RSM that reads ahead, recording each `read_forward` (segment start offsets)."""

    reads_ahead = True

    def __init__(self, rsm):
        self._rsm = rsm
        self.named: list[tuple[int, int | None]] = []

    def read_forward(self, metadata, next_segment):
        self.named.append((metadata.start_offset,
                           None if next_segment is None else next_segment.start_offset))

    def __getattr__(self, name):
        return getattr(self._rsm, name)


@pytest.mark.parametrize("source", ["lineage", "chain"])
def test_a_sequential_reader_names_each_segments_lineage_once(tmp_path, source, monkeypatch):
    """The segments after the one read are named to the RSM once per segment a reader
    enters, not once per read; a lineage that ended (no segment after, as yet) is asked
    again READ_FORWARD_RENEW_S later, so that a segment copied meanwhile is named."""
    now = [1000.0]
    monkeypatch.setattr(remote_log_module.time, "monotonic", lambda: now[0])
    t = Tiered(tmp_path, "fs", None)
    try:
        log, links = _sources(t)[source]
        rsm = log.rsm = _ForwardCounting(t.env.rsm)
        assert len(links) > READ_FORWARD_LINKS + 1
        offset, reads = 0, {}
        while offset < t.end:
            got = log.read(offset, 150)
            reads[got.link.start_offset] = reads.get(got.link.start_offset, 0) + 1
            offset = got.next_offset
        assert min(reads.values()) > 1, "several reads a segment"
        starts = [link.start_offset for link in links]
        expect = []
        for i in range(len(starts)):
            chain = starts[i:i + READ_FORWARD_LINKS + 1]
            expect += itertools.pairwise(chain)
            if len(chain) <= READ_FORWARD_LINKS:  # the lineage ends short of the links named
                expect.append((chain[-1], None))
        assert rsm.named == expect
        # the last segment again: its lineage ended, so it is asked again once the renew
        # period is over, and only then
        last = links[-1].start_offset
        del rsm.named[:]
        log.read(last, 150)
        now[0] += remote_log_module.READ_FORWARD_RENEW_S / 2
        log.read(last, 150)
        assert rsm.named == []
        now[0] += remote_log_module.READ_FORWARD_RENEW_S
        log.read(last, 150)
        log.read(last, 150)
        assert rsm.named == [(last, None)]
    finally:
        t.close()
