"""RemoteLogMetadataCache and RemoteLogLeaderEpochState (Kafka's semantics), and the
metadata log's entry encoding."""

import itertools
import random

import pytest

from engine.common import Uuid
from engine.errors import CorruptRemoteLogMetadataError, RemoteResourceNotFoundError
from engine.remote.metadata import (
    IllegalStateTransitionError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from engine.remote.metadata_cache import RemoteLogLeaderEpochState, RemoteLogMetadataCache
from engine.remote.metadata_log import (
    FORMAT_VERSION,
    _decode_body,
    decode_frames,
    encode_event,
    encode_frame,
    encode_snapshot,
    parse_partition_dir_name,
    partition_dir_name,
)

S = RemoteLogSegmentState
D = RemotePartitionDeleteState
TIP = TopicIdPartition(Uuid.random(), "foo", 0)
OTHER = TopicIdPartition(Uuid.random(), "bar", 1)


def seg(start, end, epochs, *, tip=TIP, size=1024, custom=None):
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(tip), start, end, -1, 0,
                                    1, size, epochs, custom)


def upd(md, state, custom=None, broker=1):
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 2, custom, state, broker)


def finished(cache, md):
    cache.add_copy_in_progress_segment(md)
    return cache.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED))


def observable(cache):
    """Everything a caller can see, for 'refused events change nothing' checks."""
    lookups = {(e, o): cache.remote_log_segment_metadata(e, o)
               for e in range(6) for o in range(0, 420, 7)}
    return (cache.list_all_remote_log_segments(),
            {e: cache.list_remote_log_segments(e) for e in range(6)},
            {e: cache.highest_offset_for_epoch(e) for e in range(6)},
            lookups, cache.epoch_states(), cache.partition_delete_metadata)


def ids(segments):
    return [m.remote_log_segment_id for m in segments]


# ---- RemoteLogLeaderEpochState (Kafka's RemoteLogLeaderEpochStateTest scenarios) ---------

def _sid():
    return RemoteLogSegmentId.generate_new(TIP)


def test_epoch_state_empty():
    state = RemoteLogLeaderEpochState()
    assert state.segment_ids() == [] and state.highest_offset is None
    assert state.floor_segment_id(0) is None


def test_epoch_state_finished_segments_floor_and_highest():
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(101, s2, 200)
    exported = state.export(0)
    assert exported.referenced == ((10, s1), (101, s2)) and exported.unreferenced == ()
    assert state.floor_segment_id(9) is None
    assert state.floor_segment_id(90) == s1 and state.floor_segment_id(150) == s2
    assert state.highest_offset == 200


def test_epoch_state_overlapping_segment_displaces_the_earlier_one():
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(5, s2, 150)
    assert state.export(0).referenced == ((5, s2),)
    assert state.export(0).unreferenced == (s1,)
    assert state.floor_segment_id(11) == s2 and state.highest_offset == 150


def test_epoch_state_multiple_overlapping_segments():
    state, s1, s2, s3, s4 = RemoteLogLeaderEpochState(), _sid(), _sid(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(5, s2, 150)
    state.on_copy_finished(148, s3, 155)
    state.on_copy_finished(4, s4, 200)
    assert state.export(0).referenced == ((4, s4),)
    assert set(state.export(0).unreferenced) == {s1, s2, s3}
    assert state.floor_segment_id(11) == s4 and state.highest_offset == 200


def test_epoch_state_duplicate_and_same_start_segments():
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(10, s2, 100)
    assert state.floor_segment_id(11) == s2 and state.export(0).unreferenced == (s1,)
    assert state.highest_offset == 100
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(10, s2, 150)
    assert state.floor_segment_id(11) == s2 == state.floor_segment_id(111)
    assert state.export(0).unreferenced == (s1,) and state.highest_offset == 150


def test_epoch_state_shorter_later_segment_does_not_displace():
    # a segment ending below the epoch's highest offset leaves the later entries in place
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(50, s1, 100)
    state.on_copy_finished(40, s2, 60)
    assert state.export(0).referenced == ((40, s2), (50, s1))
    assert state.highest_offset == 100


def test_epoch_state_same_start_shorter_segment_replaces_but_stays_listed():
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(10, s2, 50)       # does not reach the highest offset
    assert state.export(0).referenced == ((10, s2),)
    assert state.export(0).unreferenced == (s1,) and state.highest_offset == 100


def test_epoch_state_delete_started_and_finished():
    state, s1, s2 = RemoteLogLeaderEpochState(), _sid(), _sid()
    state.on_copy_finished(10, s1, 100)
    state.on_copy_finished(101, s2, 200)
    state.on_delete_started(10, s1)
    state.on_delete_started(101, s2)
    assert state.export(0).referenced == () and state.export(0).unreferenced == (s1, s2)
    state.on_delete_finished(s1)
    assert state.segment_ids() == [s2]
    assert state.highest_offset == 200
    started = _sid()
    state.on_copy_started(started)
    assert started in state.segment_ids()
    state.on_delete_finished(started)
    assert started not in state.segment_ids()


def test_epoch_listing_sorted_by_start_offset_with_unreferenced_segments():
    # Kafka's testListAllRemoteLogSegmentsShouldReturnSortedSegments, through the cache
    cache = RemoteLogMetadataCache(TIP)
    m1 = seg(0, 4, {0: 0})
    cache.add_copy_in_progress_segment(m1)          # never finished: unreferenced
    m2 = finished(cache, seg(5, 10, {0: 5}))
    m3 = finished(cache, seg(11, 100, {0: 11}))     # displaced by m4 below
    m4 = finished(cache, seg(9, 150, {0: 9}))
    assert ids(cache.list_remote_log_segments(0)) == ids([m1, m2, m4, m3])
    assert ids(cache.list_all_remote_log_segments()) == ids([m1, m2, m4, m3])
    assert cache.remote_log_segment_metadata(0, 50) == m4
    assert cache.remote_log_segment_metadata(0, 7) == m2


# ---- the cache: lookups (Kafka's RemoteLogSegmentLifecycleTest scenario) -----------------

def lifecycle_cache():
    cache = RemoteLogMetadataCache(TIP)
    m0 = seg(0, 100, {0: 0, 1: 20, 2: 80})
    cache.add_copy_in_progress_segment(m0)
    assert cache.remote_log_segment_metadata(1, 40) is None
    assert all(cache.highest_offset_for_epoch(e) is None for e in range(3))
    m0 = cache.update_remote_log_segment_metadata(upd(m0, S.COPY_SEGMENT_FINISHED))
    m1 = finished(cache, seg(101, 200, {2: 101}))
    m2 = finished(cache, seg(201, 300, {2: 201, 3: 240}))
    m3 = finished(cache, seg(250, 400, {3: 250, 4: 370}))
    return cache, (m0, m1, m2, m3)


def test_lookup_by_epoch_and_offset_across_multi_epoch_segments():
    cache, (m0, m1, m2, m3) = lifecycle_cache()
    expected = {(0, 0): m0, (0, 19): m0, (1, 20): m0, (1, 40): m0, (1, 79): m0,
                (2, 80): m0, (2, 100): m0, (2, 110): m1, (2, 239): m2, (3, 240): m2,
                (3, 249): m2, (3, 250): m3, (3, 369): m3, (4, 375): m3, (4, 400): m3,
                (0, 20): None,    # epoch 0 ends at 19 inside m0
                (1, 110): None, (1, 19): None, (4, 401): None, (5, 301): None,
                (4, 369): None, (2, 240): None}
    for (epoch, offset), md in expected.items():
        assert cache.remote_log_segment_metadata(epoch, offset) == md, (epoch, offset)
    assert m0.broker_id == 1 and m0.state == S.COPY_SEGMENT_FINISHED


def test_highest_offset_for_epoch_keeps_deleted_segments():
    cache, (m0, *_) = lifecycle_cache()
    cache.update_remote_log_segment_metadata(upd(m0, S.DELETE_SEGMENT_STARTED))
    assert cache.remote_log_segment_metadata(0, 10) is None
    assert m0.remote_log_segment_id in ids(cache.list_all_remote_log_segments())
    cache.update_remote_log_segment_metadata(upd(m0, S.DELETE_SEGMENT_FINISHED))
    assert cache.remote_log_segment_metadata(0, 10) is None
    assert m0.remote_log_segment_id not in ids(cache.list_all_remote_log_segments())
    assert cache.list_remote_log_segments(0) == []
    assert {e: cache.highest_offset_for_epoch(e) for e in range(6)} == {
        0: 19, 1: 79, 2: 239, 3: 369, 4: 400, 5: None}


def test_overlapping_segments_from_different_leaders():
    # leader A uploaded 10-90 in epoch 1; leader B, lagging, uploads 5-100 then 101-200
    cache = RemoteLogMetadataCache(TIP)
    a = finished(cache, seg(10, 90, {1: 10}))
    b1 = finished(cache, seg(5, 100, {1: 5}))
    b2 = finished(cache, seg(101, 200, {1: 101}))
    assert cache.remote_log_segment_metadata(1, 95) == b1
    assert cache.remote_log_segment_metadata(1, 50) == b1
    assert cache.remote_log_segment_metadata(1, 150) == b2
    # the displaced upload stays listed (for deletion) but is never returned by lookups
    assert ids(cache.list_remote_log_segments(1)) == ids([b1, a, b2])
    assert cache.highest_offset_for_epoch(1) == 200


def test_duplicate_upload_of_a_superset_segment():
    cache = RemoteLogMetadataCache(TIP)
    s0 = finished(cache, seg(0, 100, {0: 0}))
    s1 = finished(cache, seg(0, 200, {0: 0}))
    assert cache.remote_log_segment_metadata(0, 50) == s1
    # same start offset: the referenced segment comes first (Kafka's stable sort)
    assert ids(cache.list_remote_log_segments(0)) == ids([s1, s0])


def test_copy_started_and_delete_started_segments_listed_but_not_returned():
    cache = RemoteLogMetadataCache(TIP)
    started = seg(0, 50, {0: 0})
    cache.add_copy_in_progress_segment(started)
    assert cache.remote_log_segment_metadata(0, 0) is None
    assert cache.list_remote_log_segments(0) == [started]
    assert cache.list_all_remote_log_segments() == [started]
    deleting = cache.update_remote_log_segment_metadata(upd(started, S.DELETE_SEGMENT_STARTED))
    assert cache.list_remote_log_segments(0) == [deleting]
    assert cache.highest_offset_for_epoch(0) is None
    cache.update_remote_log_segment_metadata(upd(started, S.DELETE_SEGMENT_FINISHED))
    assert cache.list_all_remote_log_segments() == [] and len(cache) == 0


def test_custom_metadata_carried_to_later_updates():
    cache = RemoteLogMetadataCache(TIP)
    md = seg(0, 9, {0: 0})
    cache.add_copy_in_progress_segment(md)
    cache.update_remote_log_segment_metadata(upd(md, S.COPY_SEGMENT_FINISHED, custom=b"cm"))
    after = cache.update_remote_log_segment_metadata(upd(md, S.DELETE_SEGMENT_STARTED))
    assert after.custom_metadata == b"cm" and after.state == S.DELETE_SEGMENT_STARTED


def test_readd_while_copying_replaces_the_epochs():
    cache = RemoteLogMetadataCache(TIP)
    md = seg(0, 9, {0: 0, 1: 5})
    cache.add_copy_in_progress_segment(md)
    retried = RemoteLogSegmentMetadata(md.remote_log_segment_id, 0, 9, -1, 0, 3, 1024, {1: 0})
    cache.add_copy_in_progress_segment(retried)
    assert cache.list_remote_log_segments(0) == []
    assert cache.list_remote_log_segments(1) == [retried]


# ---- state transitions: every pair ----------------------------------------------------

_PATH = {S.COPY_SEGMENT_STARTED: [], S.COPY_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED],
         S.DELETE_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
         S.DELETE_SEGMENT_FINISHED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
                                     S.DELETE_SEGMENT_FINISHED]}
_ALLOWED = {(S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_STARTED),
            (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
            (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
            (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
            (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
            (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
            (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED)}


def cache_with_segment_in(state):
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, seg(0, 99, {0: 0}))          # a neighbour, so the state is not trivial
    md = seg(100, 199, {0: 100, 1: 150})
    cache.add_copy_in_progress_segment(md)
    for step in _PATH[state]:
        cache.update_remote_log_segment_metadata(upd(md, step))
    return cache, md


def apply_target(cache, md, target):
    if target == S.COPY_SEGMENT_STARTED:
        cache.add_copy_in_progress_segment(md)
    else:
        cache.update_remote_log_segment_metadata(upd(md, target))


@pytest.mark.parametrize("source,target", list(itertools.product(
    [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED], list(S))))
def test_segment_transition_pairs(source, target):
    cache, md = cache_with_segment_in(source)
    before = observable(cache)
    if (source, target) in _ALLOWED:
        apply_target(cache, md, target)
        now = cache.segment(md.remote_log_segment_id)
        if target == S.DELETE_SEGMENT_FINISHED:
            assert now is None
        else:
            assert now.state == target
    else:
        with pytest.raises(IllegalStateTransitionError):
            apply_target(cache, md, target)
        assert observable(cache) == before
        assert cache.segment(md.remote_log_segment_id).state == source


@pytest.mark.parametrize("target", list(S))
def test_transitions_from_no_segment(target):
    cache, md = cache_with_segment_in(S.DELETE_SEGMENT_FINISHED)  # purged: as if never seen
    before = observable(cache)
    if target == S.COPY_SEGMENT_STARTED:
        apply_target(cache, md, target)
        assert cache.segment(md.remote_log_segment_id) == md
        return
    with pytest.raises(RemoteResourceNotFoundError):
        apply_target(cache, md, target)
    assert observable(cache) == before


@pytest.mark.parametrize("state", [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED,
                                   S.DELETE_SEGMENT_FINISHED])
def test_add_in_another_state_is_refused(state):
    cache = RemoteLogMetadataCache(TIP)
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TIP), 0, 9, -1, 0, 1, 10,
                                  {0: 0}, state=state)
    with pytest.raises(IllegalStateTransitionError):
        cache.add_copy_in_progress_segment(md)
    assert len(cache) == 0


def test_events_of_another_partition_are_refused():
    cache = RemoteLogMetadataCache(TIP)
    with pytest.raises(ValueError):
        cache.add_copy_in_progress_segment(seg(0, 9, {0: 0}, tip=OTHER))
    with pytest.raises(ValueError):
        cache.put_partition_delete_metadata(RemotePartitionDeleteMetadata(
            OTHER, D.DELETE_PARTITION_MARKED, 1, 0))


_DELETE_ALLOWED = {(None, D.DELETE_PARTITION_MARKED),
                   (D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_MARKED),
                   (D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_STARTED),
                   (D.DELETE_PARTITION_STARTED, D.DELETE_PARTITION_STARTED),
                   (D.DELETE_PARTITION_STARTED, D.DELETE_PARTITION_FINISHED),
                   (D.DELETE_PARTITION_FINISHED, D.DELETE_PARTITION_FINISHED)}


def cache_in_delete_state(state):
    cache = RemoteLogMetadataCache(TIP)
    finished(cache, seg(0, 99, {0: 0}))
    steps = [] if state is None else list(D)[:int(state) + 1]
    for step in steps:
        cache.put_partition_delete_metadata(RemotePartitionDeleteMetadata(TIP, step, 1, 0))
    return cache


@pytest.mark.parametrize("source,target", list(itertools.product([None, *D], list(D))))
def test_partition_delete_transition_pairs(source, target):
    cache = cache_in_delete_state(source)
    before = observable(cache)
    event = RemotePartitionDeleteMetadata(TIP, target, 5, 2)
    if (source, target) in _DELETE_ALLOWED:
        cache.put_partition_delete_metadata(event)
        assert cache.partition_delete_state == target
        assert cache.partition_delete_metadata == event
    else:
        with pytest.raises(IllegalStateTransitionError):
            cache.put_partition_delete_metadata(event)
        assert observable(cache) == before


def test_partition_delete_finished_purges_and_refuses_new_segments():
    cache = cache_in_delete_state(D.DELETE_PARTITION_STARTED)
    assert len(cache.list_all_remote_log_segments()) == 1   # still listed while deleting
    cache.put_partition_delete_metadata(RemotePartitionDeleteMetadata(
        TIP, D.DELETE_PARTITION_FINISHED, 1, 0))
    assert cache.list_all_remote_log_segments() == [] and cache.epoch_states() == []
    assert cache.highest_offset_for_epoch(0) is None
    with pytest.raises(IllegalStateTransitionError):
        cache.add_copy_in_progress_segment(seg(100, 199, {0: 100}))


# ---- snapshot state round trip --------------------------------------------------------

def random_cache(rng, n=40):
    cache = RemoteLogMetadataCache(TIP)
    live = []
    offset = 0
    for _ in range(n):
        if live and rng.random() < 0.5:
            md = rng.choice(live)
            nxt = {S.COPY_SEGMENT_STARTED: [S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED],
                   S.COPY_SEGMENT_FINISHED: [S.DELETE_SEGMENT_STARTED],
                   S.DELETE_SEGMENT_STARTED: [S.DELETE_SEGMENT_FINISHED]}[md.state]
            new = cache.update_remote_log_segment_metadata(upd(md, rng.choice(nxt),
                                                               custom=rng.choice([None, b"x"])))
            live.remove(md)
            if new.state != S.DELETE_SEGMENT_FINISHED:
                live.append(new)
        else:
            start = max(0, offset - rng.randrange(0, 50))   # overlaps now and then
            end = start + rng.randrange(0, 100)
            offset = end + 1
            first = rng.randrange(0, 4)
            epochs = {first: start}
            if end > start and rng.random() < 0.5:
                epochs[first + 1] = rng.randrange(start + 1, end + 1)
            md = seg(start, end, epochs, custom=rng.choice([None, b"", b"\x00\xff"]))
            cache.add_copy_in_progress_segment(md)
            live.append(md)
    return cache


def test_snapshot_restores_the_exact_state():
    for seed in range(5):
        cache = random_cache(random.Random(seed))
        if seed == 3:
            cache.put_partition_delete_metadata(RemotePartitionDeleteMetadata(
                TIP, D.DELETE_PARTITION_MARKED, 9, 4))
        restored = RemoteLogMetadataCache.restore(
            TIP, list(cache.segments_in_order()), cache.epoch_states(),
            cache.partition_delete_metadata)
        assert observable(restored) == observable(cache)
        data = encode_snapshot(cache, 17)
        frames, tail = decode_frames(data, "snap")
        assert tail is None
        assert frames and all(b[0] == FORMAT_VERSION for _, b in frames)


def test_restore_refuses_epoch_states_naming_unknown_segments():
    cache = random_cache(random.Random(1))
    with pytest.raises(ValueError):
        RemoteLogMetadataCache.restore(TIP, [], cache.epoch_states(), None)


# ---- entry encoding -------------------------------------------------------------------

@pytest.mark.parametrize("custom", [None, b"", b"\x00" * 3, bytes(range(256))])
def test_events_round_trip(custom):
    md = RemoteLogSegmentMetadata(RemoteLogSegmentId.generate_new(TIP), 2**40, 2**40 + 7,
                                  -1, 2**31 - 1, -5, 2**31 - 1, {-1: 2**40, 7: 2**40 + 3},
                                  custom, txn_idx_empty=True)
    events = [md, upd(md, S.COPY_SEGMENT_FINISHED, custom=custom, broker=-1),
              RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_STARTED, 2**62, 3)]
    for event in events:
        _, value = _decode_body(memoryview(encode_event(event)), TIP)
        assert value == event


def test_encode_refuses_other_objects():
    with pytest.raises(TypeError):
        encode_event("not an event")


def test_unsupported_version_is_corruption():
    body = bytearray(encode_event(RemotePartitionDeleteMetadata(
        TIP, D.DELETE_PARTITION_MARKED, 1, 0)))
    body[0] = FORMAT_VERSION + 1
    frames, _ = decode_frames(encode_frame(bytes(body)), "f")
    from engine.remote.metadata_log import _decode
    with pytest.raises(CorruptRemoteLogMetadataError, match="format version 2") as info:
        _decode(frames[0][1], TIP, "f", frames[0][0])
    assert info.value.file == "f" and info.value.position == 0


def test_directory_names():
    tip = TopicIdPartition(Uuid.from_string("LWgrMmVrT0a__7a4SasuPA"), "my-topic.x", 12)
    assert partition_dir_name(tip) == "my-topic.x-12-LWgrMmVrT0a__7a4SasuPA"
    assert parse_partition_dir_name(partition_dir_name(tip)) == tip
    dashed = TopicIdPartition(Uuid.from_string("-WgrMmVrT0a__7a4Sas-PA"), "a-1", 0)
    assert parse_partition_dir_name(partition_dir_name(dashed)) == dashed
    for name in (".lock", "topic-0", "topic-x-LWgrMmVrT0a__7a4SasuPA", "t-1-short"):
        assert parse_partition_dir_name(name) is None


def test_bytes_match_the_documented_layout():
    """docs/remote-log-metadata-format.md, assembled by hand."""
    import struct

    from engine.checksums import crc32c

    sid = RemoteLogSegmentId(TIP, Uuid(5, 6))
    md = RemoteLogSegmentMetadata(sid, 100, 199, 1234, 7, 99, 4096, {3: 100, 4: 150},
                                  b"abc", txn_idx_empty=True)
    body = (bytes([1, 0]) + bytes(Uuid(5, 6)) + struct.pack(">qqqiqi", 100, 199, 1234, 7, 99, 4096)
            + bytes([0, 0b11]) + struct.pack(">i", 3) + b"abc" + struct.pack(">i", 2)
            + struct.pack(">iqiq", 3, 100, 4, 150))
    assert encode_event(md) == body
    head = struct.pack(">II", len(body), crc32c(body))
    assert encode_frame(body) == head + struct.pack(">I", crc32c(head)) + body
    update = upd(md, S.DELETE_SEGMENT_FINISHED)                    # no custom metadata
    assert encode_event(update) == (bytes([1, 1]) + bytes(Uuid(5, 6))
                                    + struct.pack(">qibb", 2, 1, 3, 0))
    delete = RemotePartitionDeleteMetadata(TIP, D.DELETE_PARTITION_STARTED, 77, 2)
    assert encode_event(delete) == bytes([1, 2]) + struct.pack(">bqi", 1, 77, 2)
    from engine.remote.metadata_log import _partition_body

    assert _partition_body(TIP) == (bytes([1, 3]) + bytes(TIP.topic_id)
                                    + struct.pack(">ih", 0, 3) + b"foo")


def test_a_partition_found_by_an_equal_one_here_and_in_another_process():
    """TopicIdPartition keeps its hash (every read looks it up in several dicts); a pickled
    one is hashed again where it is loaded, since a string's hash differs per process."""
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    def tip(partition=2):
        return TopicIdPartition(Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ"), "orders", partition)

    assert {tip(): "here"}[tip()] == "here"
    assert tip() == tip() and tip() != tip(3) and tip() != ("orders", 2)
    assert tip() != TopicIdPartition(Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ"), "orders", 2)
    load = ("import pickle, sys\n"
            "from engine.common import Uuid\n"
            "from engine.remote.metadata import TopicIdPartition\n"
            "found = pickle.loads(sys.stdin.buffer.read())\n"
            "print(found[TopicIdPartition(Uuid.from_string('lZ6vvmajTWKDBUTV6SQAtQ'), "
            "'orders', 2)])\n")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", load], input=pickle.dumps({tip(): "there"}),
                             capture_output=True, check=True, env={"PYTHONHASHSEED": seed},
                             cwd=str(Path(__file__).resolve().parent.parent))
        assert out.stdout.strip() == b"there", out.stderr
