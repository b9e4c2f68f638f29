"""Arguments of the tiered-storage commands (kept apart from engine.cli's own parser)."""

from __future__ import annotations

import argparse
import re

from engine.cli._bucket_args import add_bucket_arguments

__all__ = ["INT32_MAX", "INT64_MAX", "add_tiered_commands", "int_in"]


#: Kafka's wire types bound what a request may carry: offsets and timestamps are int64,
#: partitions and fetch sizes int32
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _integer(text: str, lo: int, hi: int, what: str) -> int:
    if re.fullmatch(r"[+-]?[0-9]+", text.strip()) is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected {what}")
    digits = text.strip().lstrip("+-").lstrip("0")
    # checked before int(): a 10**7-digit argument is out of range, not a long parse
    value = int(text) if len(digits) <= len(str(INT64_MAX)) else None
    if value is None or not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: {what} must be between {lo} and "
                                         f"{hi}")
    return value


def int_in(lo: int, hi: int, what: str):
    """An argparse type: an integer in [lo, hi], else a one-line error naming the range."""

    def parse(text: str) -> int:
        return _integer(text, lo, hi, what)

    return parse


_PARTITION = int_in(0, INT32_MAX, "a partition")


def _offset_spec(text: str) -> str:
    """A ListOffsets spec: a name, or a timestamp (an int64 >= 0) or special value that
    engine.rlm.offsets.parse_spec serves."""
    if text in ("earliest", "latest", "earliest-local", "latest-tiered"):
        return text
    if re.fullmatch(r"[+-]?[0-9]+", text.strip()) is None:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}: expected earliest, latest, earliest-local, latest-tiered or a "
            "timestamp in ms")
    value = _integer(text, -INT64_MAX - 1, INT64_MAX, "a timestamp in ms")
    from engine.rlm.offsets import parse_spec

    try:
        parse_spec(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_demo(sub) -> None:
    """`demo`: its sizes, codec, tier and seed."""
    demo = sub.add_parser(
        "demo", help="produce a topic over two log dirs, tier it, read every offset back")
    demo.add_argument("--records", type=int, default=200_000,
                      help="data records in all (default 200000)")
    demo.add_argument("--partitions", type=int, default=4)
    demo.add_argument("--segment-bytes", type=int, default=1 << 20,
                      help="segment.bytes of the topic (default 1 MiB)")
    demo.add_argument("--local-retention-bytes", type=int, default=2 << 20,
                      help="local.retention.bytes of the topic (default 2 MiB)")
    demo.add_argument("--codec", default="zstd", help="none, gzip, snappy, lz4 or zstd")
    demo.add_argument("--point-reads", type=int, default=2000,
                      help="random single-offset reads for the latency figures")
    demo.add_argument("--dir", default=None,
                      help="where to put log dirs, tier and broker file (default: temp dir)")
    demo.add_argument("--seed", type=int, default=1)
    demo.add_argument("--tier", choices=("filesystem", "s3"), default="filesystem",
                      help="the remote tier: a directory (default), or the object-store "
                           "tier on a local SeaweedFS S3 server the demo starts itself")
    demo.add_argument("--quiet", action="store_true", help="no progress lines")


def _add_reads(sub) -> None:
    """The consumer-side reads: `fetch` and `list-offsets`."""
    fetch = sub.add_parser("fetch", help="records of a partition, local or remote")
    fetch.add_argument("--config", required=True, metavar="FILE")
    fetch.add_argument("--topic", required=True)
    fetch.add_argument("--partition", type=_PARTITION, required=True)
    fetch.add_argument("--offset", type=int_in(0, INT64_MAX, "an offset"), required=True)
    size = fetch.add_mutually_exclusive_group()
    size.add_argument("--max-bytes", type=int_in(0, INT32_MAX, "a byte count"),
                      default=1 << 20,
                      help="bytes of one fetch (default 1 MiB; whole first batch always)")
    size.add_argument("--to-end", action="store_true",
                      help="keep fetching up to the high watermark (or last stable offset)")
    fetch.add_argument("--json", action="store_true",
                       help="one JSON object per record, keys as dump-log --json")
    fetch.add_argument("--isolation-level", default="read_uncommitted",
                       choices=("read_uncommitted", "read_committed"))

    offsets = sub.add_parser("list-offsets", help="offsets by spec or timestamp")
    offsets.add_argument("--config", required=True, metavar="FILE")
    offsets.add_argument("--topic", required=True)
    offsets.add_argument("--partition", type=_PARTITION, required=True)
    offsets.add_argument("--time", required=True, type=_offset_spec,
                         help="earliest, latest, earliest-local, latest-tiered or epoch ms")
    offsets.add_argument("--json", action="store_true")


def _add_serve(sub) -> None:
    """`serve`: over the broker's log dirs, or (`--bucket`) a read-only replica of a bucket."""
    serve = sub.add_parser("serve", help="answer Kafka consumers over the local and tiered log")
    serve.add_argument("--config", default=None, metavar="FILE",
                       help="broker .properties file (listeners, advertised.listeners, ...); "
                            "with --bucket, its rsm.config.* keys give the store")
    add_bucket_arguments(serve, "serve s3://bucket/prefix alone, read-only (no log dirs, no "
                                "RLMM)")
    serve.add_argument("--state-dir", default=None, metavar="DIR",
                       help="with --bucket: where committed group offsets and the chunk "
                            "cache are kept (created)")
    serve.add_argument("--refresh-interval-ms", type=int_in(100, INT32_MAX, "an interval"),
                       default=10_000,
                       help="with --bucket: how often the bucket is listed again for new "
                            "segments (default 10000)")


def add_tiered_commands(sub) -> None:
    _add_demo(sub)

    run = sub.add_parser("run", help="run the RemoteLogManager over a broker's log dirs")
    run.add_argument("--config", required=True, metavar="FILE",
                     help="broker .properties file")
    run.add_argument("--until-idle", action="store_true",
                     help="exit once nothing is left to copy or expire")

    _add_reads(sub)

    _add_serve(sub)

    status = sub.add_parser("status", help="local and remote state of every partition")
    status.add_argument("--config", required=True, metavar="FILE")
    view = status.add_mutually_exclusive_group()
    view.add_argument("--all", action="store_true",
                      help="every field of every partition, one per line")
    view.add_argument("--json", action="store_true", help="every field, as a JSON list")

    configs = sub.add_parser("configs", help="per-topic overrides (kafka-configs.sh)")
    configs.add_argument("--config", required=True, metavar="FILE")
    configs.add_argument("--entity-type", default="topics", choices=("topics",))
    configs.add_argument("--entity-name", "--topic", dest="entity_name", default=None)
    configs.add_argument("--alter", action="store_true")
    configs.add_argument("--describe", action="store_true")
    configs.add_argument("--add-config", default=None, metavar="K=V[,K=V]")
    configs.add_argument("--delete-config", default=None, metavar="K[,K]")
    configs.add_argument("--all", action="store_true",
                         help="with --describe: every config with its source")
    configs.add_argument("--json", action="store_true")
