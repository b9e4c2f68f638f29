"""`scrub`: check every remote segment of a tier.

    python -m engine scrub --config FILE [--delete-orphans [--no-dry-run]]
    python -m engine scrub --bucket s3://bucket/prefix [--store k=v ... | --config FILE]

With `--config` alone: the broker's tier (object store or filesystem) through its RLMM
(engine.remote.scrub_tier), opened read-only, so the broker may keep running; objects no
segment of the RLMM has are orphans, and `--delete-orphans` deletes those it reported, only
with `--no-dry-run` (the default is a dry run). The scrub reads the tier with no chunk
cache (a cached chunk would hide the object's damage) and, on the filesystem tier, checks
every file's CRC.

With `--bucket`: the objects alone (engine.remote.scrub), no RLMM; `--store` takes the
store's settings under the plugin's names without `rsm.config.`
(`storage.s3.endpoint.url=...`), `--config` a broker file whose `rsm.config.*` keys give
them.

Every read is paced by `--max-bytes-per-second`; `--threads` segments are checked at once.
Progress goes to stderr; the report to stdout (a summary, or `--json`).

Exit status: 0 clean, 1 findings, 2 bad usage or a scrub that could not run (one line
`error: ...`).
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli._bucket_args import STORE_HELP, _UsageError, add_bucket_arguments, key_values

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("scrub", help="check every remote segment of the broker's tier "
                                     "(through its RLMM) or of a bucket (objects alone)")
    add_bucket_arguments(p, "s3://bucket/prefix (also gs://, az://)", STORE_HELP)
    p.add_argument("--config", default=None, metavar="FILE",
                   help="a broker properties file: alone, its tier and RLMM; with --bucket, "
                        "its rsm.config.* keys give the store")
    p.add_argument("--topic", default=None, help="scrub this topic only")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument("--threads", type=_positive, default=4,
                   help="segments checked at once (default 4)")
    p.add_argument("--max-bytes-per-second", type=_positive, default=None,
                   help="bound on the bytes read per second (default: none)")
    p.add_argument("--delete-orphans", action="store_true",
                   help="delete the objects reported as orphans (with --no-dry-run only; "
                        "--config without --bucket)")
    p.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=True,
                   help="report what --delete-orphans would delete, delete nothing "
                        "(the default; --no-dry-run to delete)")
    return p


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _fail(message: str) -> int:
    print(f"error: scrub: {message}", file=sys.stderr)
    return 2


def run(args) -> int:
    from engine.config import ConfigError
    from engine.errors import KafkaEngineError

    if args.bucket is None and args.config is None:
        return _fail("give --config FILE (the broker's tier, through its RLMM) or --bucket "
                     "URL (with --store or --config for the store's settings)")
    if args.bucket is not None and args.delete_orphans:
        return _fail("--delete-orphans needs the RLMM to tell orphans: give --config FILE "
                     "without --bucket")
    try:
        report = _scrub_tier(args) if args.bucket is None else _scrub_bucket(args)
    except (ConfigError, KafkaEngineError, _UsageError) as exc:
        return _fail(str(exc))
    if isinstance(report, int):
        return report
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.summary())
    return 0 if report.clean else 1


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _scrub_bucket(args):
    from engine.config import ConfigError, load_properties
    from engine.remote.bucket import Bucket
    from engine.remote.scrub import scrub_bucket

    settings = key_values("--store", args.store)
    props = None
    if args.config is not None:
        try:
            props = load_properties(args.config)
        except FileNotFoundError:
            return _fail(f"--config {args.config}: file not found")
        except OSError as exc:
            return _fail(f"--config {args.config}: [Errno {exc.errno}] {exc.strerror}")
        except ConfigError as exc:
            return _fail(f"--config {args.config}: {exc}")
    with Bucket(args.bucket, settings, props) as bucket:
        return scrub_bucket(bucket, topic=args.topic, threads=args.threads,
                            max_bytes_per_second=args.max_bytes_per_second,
                            progress=_progress)


def _scrub_tier(args):
    from engine.config import BrokerConfig, load_broker_config
    from engine.remote import factory
    from engine.remote.scrub_tier import scrub_tier

    if args.store:
        return _fail("--store goes with --bucket; the broker file gives its tier's settings")
    broker = load_broker_config(args.config, check_dirs=False)
    props = broker.originals()
    prefix = broker[factory.RSM_PREFIX_KEY]
    # no chunk cache (none without its class): a chunk cached before would hide its
    # object's damage
    props.pop(f"{prefix}fetch.chunk.cache.class", None)
    name = broker[factory.RSM_CLASS_KEY] or factory.DEFAULT_RSM_CLASS
    if name.replace(":", ".") == factory.DEFAULT_RSM_CLASS.replace(":", "."):
        props[f"{prefix}log.read.verification"] = "full"  # every file's CRC
    config = BrokerConfig(props)
    with factory.create_remote_storage_manager(config) as rsm:
        return scrub_tier(rsm, lambda: factory.open_remote_log_metadata_reader(config),
                          topic=args.topic, threads=args.threads,
                          max_bytes_per_second=args.max_bytes_per_second,
                          progress=_progress, delete_orphans=args.delete_orphans,
                          dry_run=args.dry_run)
