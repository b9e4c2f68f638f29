"""The metadata writer that tests/test_rlmm.py kills with SIGKILL (not a test module).

    python tests/rlmm_crash_writer.py METADATA_DIR --seed S [--snapshot-interval N]

Opens METADATA_DIR with EmbeddedRemoteLogMetadataManager (recovering whatever a killed
predecessor left), prints "ready", then forever picks a random event for one of
`PARTITIONS`: add a new segment, or move a live segment one step along its lifecycle
(STARTED -> FINISHED -> DELETE_STARTED -> DELETE_FINISHED, or STARTED -> DELETE_STARTED).
Before each call it prints "try <segment uuid> <state>", after the call returned (the event
is fsynced) "ack <segment uuid> <state>", each line flushed; DELETE_SEGMENT_FINISHED is
state 3. A small snapshot interval makes kills land in compactions too.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.common import Uuid
from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
from engine.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

PARTITIONS = (TopicIdPartition(Uuid(0x0123456789ABCDEF, 1), "crash-topic", 0),
              TopicIdPartition(Uuid(0x0123456789ABCDEF, 2), "crash.topic-2", 7))
_NEXT = {RemoteLogSegmentState.COPY_SEGMENT_STARTED: (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                      RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
         RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
             (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,),
         RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
             (RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,)}


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("metadata_dir")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--snapshot-interval", type=int, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    rlmm = EmbeddedRemoteLogMetadataManager(args.metadata_dir,
                                            snapshot_interval_entries=args.snapshot_interval)
    rlmm.on_partition_leadership_changes(PARTITIONS, [])
    next_offset = {}
    for tip in PARTITIONS:
        segments = list(rlmm.list_remote_log_segments(tip))
        next_offset[tip] = max((m.end_offset + 1 for m in segments), default=0) + 1000
    _say("ready")
    while True:
        tip = rng.choice(PARTITIONS)
        live = list(rlmm.list_remote_log_segments(tip))
        if not live or rng.random() < 0.35:
            start = next_offset[tip]
            end = start + rng.randrange(1, 500)
            next_offset[tip] = end + 1
            epochs = {rng.randrange(0, 3): start}
            if rng.random() < 0.5 and end > start + 1:
                epochs[max(epochs) + 1] = rng.randrange(start + 1, end + 1)
            md = RemoteLogSegmentMetadata(
                RemoteLogSegmentId.generate_new(tip), start, end, 1_700_000_000_000 + start,
                0, 1, rng.randrange(0, 2**20), epochs,
                custom_metadata=rng.choice([None, b"", os.urandom(rng.randrange(1, 40))]))
            _say(f"try {md.remote_log_segment_id.id} 0")
            rlmm.add_remote_log_segment_metadata(md)
            _say(f"ack {md.remote_log_segment_id.id} 0")
        else:
            md = rng.choice(live)
            target = rng.choice(_NEXT[md.state])
            _say(f"try {md.remote_log_segment_id.id} {int(target)}")
            rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 2, rng.choice([None, b"cm"]), target, 0))
            _say(f"ack {md.remote_log_segment_id.id} {int(target)}")


if __name__ == "__main__":
    sys.exit(main())
