"""`scrub`: check every remote segment of an object-store tier from its objects alone (see
engine.remote.scrub).

    python -m engine scrub --bucket s3://bucket/prefix [--store k=v ...] [--config FILE]
    python -m engine scrub --config FILE      (the bucket of the broker's object-store tier)

`--store` takes the store's settings under the plugin's names without `rsm.config.`
(`storage.s3.endpoint.url=...`); `--config` a broker file whose `rsm.config.*` keys give
them (and, without `--bucket`, the bucket: `storage.s3.bucket.name` and `key.prefix`).
Progress goes to stderr; the report to stdout (a summary, or `--json`).

Exit status: 0 clean, 1 findings, 2 bad usage or a scrub that could not run (one line
`error: ...`).
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("scrub", help="check every remote segment of a bucket (object-store "
                                     "tier) from its objects alone")
    p.add_argument("--bucket", default=None, metavar="URL",
                   help="s3://bucket/prefix (also gs://, az://)")
    p.add_argument("--store", action="append", default=[], metavar="KEY=VALUE",
                   help="a store setting, the plugin's name without rsm.config. "
                        "(repeatable)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="a broker properties file: its rsm.config.* keys give the store")
    p.add_argument("--topic", default=None, help="scrub this topic only")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument("--threads", type=_positive, default=4,
                   help="segments checked at once (default 4)")
    p.add_argument("--max-bytes-per-second", type=_positive, default=None,
                   help="bound on the bytes read per second (default: none)")
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
    from engine.config import ConfigError, load_properties
    from engine.errors import KafkaEngineError
    from engine.remote.bucket import Bucket
    from engine.remote.scrub import scrub_bucket

    settings = {}
    for item in args.store:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            return _fail(f"--store {item!r}: expected KEY=VALUE")
        settings[key.strip()] = value.strip()
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
    url = args.bucket
    if url is None:
        if props is None:
            return _fail("give --bucket URL (with --store or --config for the store's "
                         "settings) or --config FILE of a broker on the object-store tier")
        prefix = props.get("remote.log.storage.manager.impl.prefix") or "rsm.config."
        name = props.get(f"{prefix}storage.s3.bucket.name")
        if not name:
            return _fail(f"--config {args.config}: no {prefix}storage.s3.bucket.name (the "
                         "broker's tier is not on an S3 bucket); give --bucket")
        url = f"s3://{name}/{props.get(f'{prefix}key.prefix', '')}"

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        with Bucket(url, settings, props) as bucket:
            report = scrub_bucket(bucket, topic=args.topic, threads=args.threads,
                                  max_bytes_per_second=args.max_bytes_per_second,
                                  progress=progress)
    except ConfigError as exc:
        return _fail(str(exc))
    except KafkaEngineError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.summary())
    return 0 if report.clean else 1
