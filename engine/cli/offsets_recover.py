"""`python -m engine offsets-recover`: makes a damaged committed-offsets file of `serve`
(`consumer-offsets.log`) usable again. Every frame before the first damaged one is kept; the
damaged file is copied aside first (`consumer-offsets.log.damaged-<ms>`), so nothing is
lost that a closer look could still save. The log dir (or state dir) is locked as `serve`
locks it, so this never runs under a live `serve`."""

from __future__ import annotations

import argparse
import sys

from engine.cli._broker import _DirLocks, cli_errors
from engine.config import ConfigError, load_broker_config
from engine.protocol.offsets_store import recover_offsets_store

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("offsets-recover",
                       help="keep every committed offset before the damage in serve's "
                            "offsets file (a copy of the damaged file is kept)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="the broker file `serve --config` runs with (its first log dir)")
    p.add_argument("--state-dir", default=None, metavar="DIR",
                   help="the --state-dir of `serve --bucket`")
    return p


@cli_errors
def run(args) -> int:
    if (args.config is None) == (args.state_dir is None):
        raise ConfigError("--config", args.config, "give --config FILE or --state-dir DIR")
    where = (args.state_dir if args.state_dir is not None
             else load_broker_config(args.config).log_dirs[0])
    lock = _DirLocks([where])
    try:
        print(f"offsets-recover: {recover_offsets_store(where)}", file=sys.stderr)
    finally:
        lock.release()
    return 0
