"""`list-offsets`: Kafka's ListOffsets for one partition, tiered storage included
(Kafka's Partition.fetchOffsetForTimestamp and UnifiedLog.fetchOffsetByTimestamp), in the
manner of kafka-get-offsets.sh.

    python -m engine list-offsets --config FILE --topic T --partition P
        --time earliest|latest|earliest-local|latest-tiered|<epoch ms> [--json]

Prints `topic:partition:offset` (with --json also the leader epoch). earliest is the log
start offset (possibly in the remote tier), earliest-local the first local offset,
latest-tiered the highest offset in remote storage (-1 when nothing is tiered), a
timestamp the first offset whose timestamp is at or after it (-1 when there is none).
"""

from __future__ import annotations

import json

from engine.cli._broker import check_topic, cli_errors, open_broker

__all__ = ["run"]


@cli_errors
def run(args) -> int:
    check_topic(args.topic)
    spec = args.time if not args.time.lstrip("-").isdigit() else int(args.time)
    with open_broker(args.config) as session:
        session.log(args.topic, args.partition)  # a clear error for a missing partition
        offset, epoch = session.reader().list_offsets(args.topic, args.partition, spec)
    if args.json:
        print(json.dumps({"topic": args.topic, "partition": args.partition, "time": args.time,
                          "offset": offset, "leader_epoch": epoch}))
    else:
        print(f"{args.topic}:{args.partition}:{offset}")
    return 0
