"""Command line: `python -m engine <command>`.

Commands:
  dump-log FILE...   print (and with --verify, check) segments, indexes, snapshots and
                     checkpoint files, in the spirit of kafka-dump-log.sh
  produce-demo       fill partition logs over several log dirs with realistic records and
                     transactions (some aborted), shut down cleanly, summarize
  demo               the main job: produce a multi-partition topic over two log dirs, tier it
                     with the RemoteLogManager, read every offset back, summarize
  run                the RemoteLogManager over a broker's log dirs (--config FILE)
  fetch              records of a partition from local or remote data, as dump-log --json
  list-offsets       earliest / latest / earliest-local / latest-tiered / by timestamp
  serve              a Kafka broker for reading: consumers (and groups) over the wire
  status             per partition local and remote offsets, sizes, copy lag, last error
  configs            durable per-topic overrides (kafka-configs.sh --alter / --describe)
  codec-demo         the former main job: one segment per codec, validated and decoded
  export             a topic's tiered history to Parquet by partition and date, resumable
                     (a Spark job; needs the [spark] extra)
  kafka-broker       a local Apache Kafka broker (KRaft) whose RemoteStorageManager is the
                     engine (the kafka-plugin jar), tiering into a local SeaweedFS
  scrub              check every remote segment of a bucket (object-store tier) from its
                     objects alone: sizes, manifests, chunks, CRCs, indexes, lineage, gaps
  offsets-recover    keep every committed offset before the damage in serve's offsets
                     file (a copy of the damaged file is kept)
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error convention: one `error: ...` line, exit status 2 (the
    usage is one `--help` away; subcommand parsers inherit this class)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    dump = sub.add_parser("dump-log", help="print or verify Kafka log files")
    dump.add_argument("files", nargs="+", metavar="FILE",
                      help=".log .index .timeindex .txnindex .snapshot leader-epoch-checkpoint "
                           "partition.metadata, an offset checkpoint file, or a partition "
                           "directory (its files in offset order)")
    dump.add_argument("--print-data-log", action="store_true",
                      help="print every record, not only batch headers")
    dump.add_argument("--verify", action="store_true",
                      help="check every CRC, record and index entry; exit 1 naming the first "
                           "problem")
    dump.add_argument("--json", action="store_true",
                      help="one JSON object per record (segments) or per entry (other files)")
    dump.add_argument("--max-decompressed-bytes", type=int, default=256 * 1024 * 1024,
                      help="bound on one batch's decompressed size (default 256 MiB)")

    produce = sub.add_parser("produce-demo",
                             help="fill partition logs over several log dirs with records")
    produce.add_argument("--log-dirs", required=True, help="comma-separated log dirs")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partitions", type=int, default=1)
    produce.add_argument("--records", type=int, default=10_000,
                         help="data records in all (default 10000)")
    produce.add_argument("--codec", default="zstd", help="none, gzip, snappy, lz4 or zstd")
    produce.add_argument("--segment-bytes", type=int, default=None,
                         help="segment.bytes of the topic (default Kafka's 1 GiB)")
    produce.add_argument("--seed", type=int, default=1)
    from engine.cli._tiered_args import INT64_MAX, int_in
    produce.add_argument("--start-timestamp", type=int_in(0, INT64_MAX, "a timestamp in ms"),
                         default=None, metavar="MS",
                         help="timestamp of the first record (default: the records end at "
                              "the current time); with it the data is reproducible")

    codec_demo = sub.add_parser("codec-demo",
                                help="generate, validate and decode a realistic segment")
    codec_demo.add_argument("--records", type=int, default=200_000,
                            help="records per codec (default 200000)")
    codec_demo.add_argument("--codecs", default="none,gzip,snappy,lz4,zstd")
    codec_demo.add_argument("--dir", default=None,
                            help="where to write the partition directory (default: a temp dir)")
    codec_demo.add_argument("--seed", type=int, default=1)

    from engine.cli._tiered_args import add_tiered_commands
    add_tiered_commands(sub)
    from engine.cli.export import add_parser as add_export
    add_export(sub)
    from engine.cli.scrub import add_parser as add_scrub
    add_scrub(sub)
    from engine.cli.kafka_broker import add_parser as add_kafka_broker
    add_kafka_broker(sub)
    from engine.cli.offsets_recover import add_parser as add_offsets_recover
    add_offsets_recover(sub)
    return parser


def tiered_commands() -> dict:
    """Command name -> run function of the tiered-storage commands (imported lazily)."""
    import importlib

    modules = {"demo": "demo", "run": "run", "fetch": "fetch",
               "list-offsets": "list_offsets", "status": "status", "configs": "configs",
               "serve": "serve"}
    return {name: (lambda args, m=m: importlib.import_module(f"engine.cli.{m}").run(args))
            for name, m in modules.items()}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "dump-log":
            from engine.cli.dump_log import run
            return run(args)
        if args.command == "produce-demo":
            from engine.cli.produce_demo import run
            return run(args)
        if args.command == "codec-demo":
            from engine.cli.codec_demo import run
            return run(args)
        if args.command == "export":
            from engine.cli.export import run
            return run(args)
        if args.command == "scrub":
            from engine.cli.scrub import run
            return run(args)
        if args.command == "kafka-broker":
            from engine.cli.kafka_broker import run
            return run(args)
        if args.command == "offsets-recover":
            from engine.cli.offsets_recover import run
            return run(args)
        if args.command in tiered_commands():
            return tiered_commands()[args.command](args)
    except BrokenPipeError:  # `| head` closed the pipe: not an error
        sys.stderr.close()
        return 0
    raise AssertionError(args.command)
