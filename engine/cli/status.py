"""`status`: per partition, the local and remote offsets and sizes, the copy lag and the
last error, from the RemoteLogManager's status().

    python -m engine status --config FILE [--json]
"""

from __future__ import annotations

import json

from engine.cli._broker import cli_errors, open_broker

__all__ = ["format_table", "run"]

# Columns shown first, in this order, when status() has them; any other key follows.
_PREFERRED = ("topic", "partition", "log_start_offset", "local_log_start_offset",
              "log_end_offset", "highest_offset_in_remote_storage", "local_segments",
              "local_bytes", "remote_segments", "remote_bytes", "copy_lag_segments",
              "copy_lag_bytes", "last_error")


def format_table(rows: list[dict]) -> str:
    keys = [k for k in _PREFERRED if any(k in r for r in rows)]
    keys += sorted({k for r in rows for k in r} - set(keys))
    cells = [[("" if r.get(k) is None else str(r.get(k))) for k in keys] for r in rows]
    widths = [max([len(k)] + [len(c[i]) for c in cells]) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


@cli_errors
def run(args) -> int:
    with open_broker(args.config) as session:
        rows = session.remote_log_manager().status()
    if args.json:
        print(json.dumps(rows, sort_keys=True, default=str))
    elif rows:
        print(format_table(rows))
    else:
        print("no partitions")
    return 0
