"""`export`: a topic's tiered history to Parquet, partitioned by partition and date,
resumable (see engine.spark.export).

    python -m engine export --config FILE --topic T --out DIR [--format parquet]
    python -m engine export --bucket s3://bucket/prefix [--store k=v ...] --topic T --out DIR
    spark-submit engine/cli/export.py --config FILE --topic T --out DIR

Exit status: 0 done (everything tiered so far is exported), 1 a read or write failed
(rerun to continue), 2 bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_parser", "main", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("export", help="write a topic's tiered history to Parquet (resumable)")
    _arguments(p)
    return p


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None,
                   help="the engine's properties file (log.dirs, rsm.config.dirs, ...); "
                        "with --bucket, its rsm.config.* keys give the store")
    p.add_argument("--bucket", default=None, metavar="URL",
                   help="read s3://bucket/prefix alone (no broker, no RLMM)")
    p.add_argument("--store", action="append", default=[], metavar="KEY=VALUE",
                   help="with --bucket: a store setting, the plugin's name without "
                        "rsm.config. (repeatable)")
    p.add_argument("--remote-log-metadata", action="append", default=[], metavar="DIR",
                   help="with --bucket: read only the segments this remote-log metadata lists "
                        "finished (a log dir with __remote_log_metadata-N partitions, one of "
                        "them, or the embedded RLMM's directory; repeatable)")
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True, help="output directory (created; resumed if it "
                                                "holds an earlier export of the topic)")
    p.add_argument("--format", default="parquet", choices=["parquet"])
    p.add_argument("--include-headers", action="store_true",
                   help="add the headers column (array<struct<key,value>>)")
    p.add_argument("--max-bytes-per-round", type=int, default=None,
                   help="remote bytes per committed round (default 1 GiB)")
    p.add_argument("--master", default=None,
                   help="Spark master when not run by spark-submit (default: local[*])")


class _UsageError(Exception):
    """A bad argument or unreadable --config: one `error: ...` line, exit 2."""


def _store_and_properties(args) -> tuple[dict[str, str], dict[str, str]]:
    """The --store settings and the --config properties, after the argument checks that
    need no Spark and no tier (_UsageError naming the argument otherwise)."""
    from engine.config import load_properties

    if args.max_bytes_per_round is not None and args.max_bytes_per_round < 1:
        raise _UsageError("--max-bytes-per-round must be at least 1")
    store = {}
    for item in args.store:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _UsageError(f"--store {item!r}: expected KEY=VALUE")
        store[key.strip()] = value.strip()
    if args.config is None and args.bucket is None:
        raise _UsageError("give --config FILE (the broker's tier) or --bucket URL")
    if store and args.bucket is None:
        raise _UsageError("--store needs --bucket")
    if args.remote_log_metadata:
        if args.bucket is None:
            raise _UsageError("--remote-log-metadata needs --bucket")
        # a reading option of the bucket: it goes with the store settings to every scan
        store["remoteLogMetadataPath"] = ",".join(args.remote_log_metadata)
    try:
        props = load_properties(args.config) if args.config is not None else {}
    except FileNotFoundError:
        raise _UsageError(f"--config {args.config}: file not found") from None
    except (OSError, ValueError) as exc:
        raise _UsageError(f"--config {args.config}: {exc}") from None
    return store, props


def run(args) -> int:
    from engine.config import ConfigError
    from engine.errors import KafkaEngineError
    from engine.spark.export import (
        DEFAULT_MAX_BYTES_PER_ROUND,
        STATE_FILE,
        ExportState,
        run_export,
        spark_session,
    )

    try:
        store, props = _store_and_properties(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:  # bad configuration or topic fails here, before a Spark session is started
        from engine.spark.tier import UnknownTopicError, tier_for_export

        with tier_for_export(props, args.config, args.topic, args.bucket, store) as tier:
            topics = sorted({t for t, _ in tier.partitions()})
        if args.topic not in topics:
            raise UnknownTopicError(f"unknown topic {args.topic!r}: the remote tier holds "
                                    f"{topics or 'no topic'}")
        ExportState.load(Path(args.out) / STATE_FILE, args.topic)  # another topic's output?
    except (ConfigError, KafkaEngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = spark_session(args.master)
    try:
        state = run_export(spark, props, args.config, args.topic, args.out, fmt=args.format,
                           max_bytes_per_round=args.max_bytes_per_round
                           or DEFAULT_MAX_BYTES_PER_ROUND,
                           include_headers=args.include_headers,
                           log=lambda line: print(line, flush=True), bucket=args.bucket,
                           store=store)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"exported {args.topic} to {args.out}: round {state.round}, next offsets " +
          ", ".join(f"{args.topic}-{p}={o}" for p, o in sorted(state.offsets.items())),
          flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="export", description=__doc__.split("\n")[0])
    _arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # spark-submit engine/cli/export.py ...
    sys.exit(main())
