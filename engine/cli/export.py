"""`export`: a topic's tiered history to Parquet, partitioned by partition and date
(Spark, see engine.spark.export), or to an Apache Iceberg table (engine.arrow.iceberg);
resumable, each record written once.

    python -m engine export --config FILE --topic T --out DIR [--format parquet]
    python -m engine export --bucket s3://bucket/prefix [--store k=v ...] --topic T --out DIR
    spark-submit engine/cli/export.py --config FILE --topic T --out DIR
    python -m engine export --config FILE --topic T --format iceberg \
        --iceberg-catalog-uri sqlite:////path/catalog.db --iceberg-warehouse DIR \
        --iceberg-table NAMESPACE.TABLE

Exit status: 0 done (everything tiered so far is exported), 1 a read or write failed
(rerun to continue), 2 bad arguments or configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.cli._bucket_args import _UsageError, add_bucket_arguments, key_values

__all__ = ["add_parser", "main", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("export", help="write a topic's tiered history to Parquet (resumable)")
    _arguments(p)
    return p


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None,
                   help="the engine's properties file (log.dirs, rsm.config.dirs, ...); "
                        "with --bucket, its rsm.config.* keys give the store")
    add_bucket_arguments(p, "read s3://bucket/prefix alone (no broker, no RLMM)")
    p.add_argument("--remote-log-metadata", action="append", default=[], metavar="DIR",
                   help="with --bucket: read only the segments this remote-log metadata lists "
                        "finished (a log dir with __remote_log_metadata-N partitions, one of "
                        "them, or the embedded RLMM's directory; repeatable)")
    p.add_argument("--topic", required=True)
    p.add_argument("--out", default=None, help="parquet: output directory (created; resumed if "
                                               "it holds an earlier export of the topic)")
    p.add_argument("--format", default="parquet", choices=["parquet", "iceberg"])
    p.add_argument("--iceberg-catalog-uri", default=None, metavar="URI",
                   help="iceberg: the SQL catalog's SQLAlchemy URI (sqlite:////path/cat.db)")
    p.add_argument("--iceberg-warehouse", default=None, metavar="DIR_OR_URL",
                   help="iceberg: where a new table puts its files")
    p.add_argument("--iceberg-table", default=None, metavar="NAMESPACE.TABLE",
                   help="iceberg: the table (created when missing; resumed otherwise)")
    p.add_argument("--iceberg-catalog-property", action="append", default=[],
                   metavar="KEY=VALUE",
                   help="iceberg: a further catalog property, pyiceberg's name (repeatable)")
    p.add_argument("--include-headers", action="store_true",
                   help="add the headers column (array<struct<key,value>>)")
    p.add_argument("--max-bytes-per-round", type=int, default=None,
                   help="remote bytes per committed round (default 1 GiB; iceberg, whose "
                        "round is one in-memory table: 256 MiB)")
    p.add_argument("--master", default=None,
                   help="Spark master when not run by spark-submit (default: local[*])")


def _check_target(args) -> None:
    """--out for parquet; the catalog and table for iceberg, and never the other's."""
    iceberg = [name for name in ("catalog_uri", "warehouse", "table", "catalog_property")
               if getattr(args, f"iceberg_{name}")]
    if args.format == "parquet":
        if iceberg:
            raise _UsageError(f"--iceberg-{iceberg[0].replace('_', '-')} needs --format iceberg")
        if args.out is None:
            raise _UsageError("--format parquet needs --out DIR")
        return
    if args.out is not None:
        raise _UsageError("--out is for --format parquet: iceberg writes to --iceberg-table")
    for name in ("catalog_uri", "table"):
        if not getattr(args, f"iceberg_{name}"):
            raise _UsageError(f"--format iceberg needs --iceberg-{name.replace('_', '-')}")


def _store_and_properties(args) -> tuple[dict[str, str], dict[str, str]]:
    """The --store settings and the --config properties, after the argument checks that
    need no Spark and no tier (_UsageError naming the argument otherwise)."""
    from engine.config import load_properties

    if args.max_bytes_per_round is not None and args.max_bytes_per_round < 1:
        raise _UsageError("--max-bytes-per-round must be at least 1")
    store = key_values("--store", args.store)
    if args.config is None and args.bucket is None:
        raise _UsageError("give --config FILE (the broker's tier) or --bucket URL")
    if store and args.bucket is None:
        raise _UsageError("--store needs --bucket")
    _check_target(args)
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
    from engine.scan.export import ExportState
    from engine.spark.export import (
        DEFAULT_MAX_BYTES_PER_ROUND,
        STATE_FILE,
        run_export,
        spark_session,
    )

    try:
        store, props = _store_and_properties(args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:  # bad configuration or topic fails here, before a Spark session is started
        from engine.scan.tier import UnknownTopicError, tier_for_export

        with tier_for_export(props, args.config, args.topic, args.bucket, store) as tier:
            topics = sorted({t for t, _ in tier.partitions()})
        if args.topic not in topics:
            raise UnknownTopicError(f"unknown topic {args.topic!r}: the remote tier holds "
                                    f"{topics or 'no topic'}")
        if args.format == "parquet":  # another topic's output?
            ExportState.load(Path(args.out) / STATE_FILE, args.topic)
    except (ConfigError, KafkaEngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "iceberg":
        return _run_iceberg(args, props, store)
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
    _report(args.topic, args.out, state)
    return 0


def _report(topic: str, where: str, state) -> None:
    print(f"exported {topic} to {where}: round {state.round}, next offsets " +
          ", ".join(f"{topic}-{p}={o}" for p, o in sorted(state.offsets.items())), flush=True)


def _run_iceberg(args, props: dict[str, str], store: dict[str, str]) -> int:
    """The Iceberg export: no Spark (the rounds are read with engine.arrow)."""
    from engine.arrow.iceberg import DEFAULT_MAX_BYTES_PER_ROUND, IcebergTarget, export_to_iceberg
    from engine.config import ConfigError
    from engine.errors import KafkaEngineError

    try:
        target = IcebergTarget(args.iceberg_catalog_uri, args.iceberg_warehouse,
                               args.iceberg_table,
                               key_values("--iceberg-catalog-property",
                                          args.iceberg_catalog_property))
        state = export_to_iceberg(props, args.config, args.topic, target,
                                  max_bytes_per_round=args.max_bytes_per_round
                                  or DEFAULT_MAX_BYTES_PER_ROUND,
                                  include_headers=args.include_headers,
                                  log=lambda line: print(line, flush=True), bucket=args.bucket,
                                  store=store)
    except (_UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaEngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _report(args.topic, f"table {args.iceberg_table}", state)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="export", description=__doc__.split("\n")[0])
    _arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # spark-submit engine/cli/export.py ...
    sys.exit(main())
