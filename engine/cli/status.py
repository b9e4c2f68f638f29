"""`status`: per partition, the local and remote offsets and sizes, the copy lag and the
last error.

    python -m engine status --config FILE [--all | --json]

Tiered partitions are described by the RemoteLogManager's status(); the others (every
partition of a broker without tiered storage, and topics without remote.storage.enable)
by their local log alone. The default view is one line per partition that fits about 120
columns: partition, log start / local start / end offsets, tiered (up to: the highest
offset in remote storage; `off` when the partition is not tiered), local and remote bytes, copy
lag, and the last error: the first non-empty field whose name says it is an error or a
fault (`*error*`, `offline`, `damaged`, `inconsisten*`, `corrupt*`, `*gap*`; one with a
message before a bare flag), so a field status() gains later shows there without a change
here. `--all` prints every field of every partition, one per line; `--json` prints them as
a JSON list.
"""

from __future__ import annotations

import json
import re

from engine.cli._broker import cli_errors, open_broker

__all__ = ["compact_table", "error_fields", "format_all", "local_status", "run"]

#: the compact view's width; the last-error column is cut to fit it (`--all` shows it whole)
WIDTH = 120
_ERROR_LIKE = re.compile(r"error|offline|damaged|inconsisten|corrupt|gap")


def local_status(topic: str, partition: int, unified,
                 retention_error: str | None = None) -> dict:
    """The status of a partition that is not tiered, from its local log (and why its last
    local retention run failed, if it did)."""
    return {
        "topic": topic, "partition": partition, "remote_storage_enable": False,
        "log_start_offset": unified.log_start_offset,
        "local_log_start_offset": unified.local_log_start_offset,
        "log_end_offset": unified.log_end_offset,
        "highest_offset_in_remote_storage": unified.highest_offset_in_remote_storage,
        "local_segments": len(unified.segments),
        "local_size_bytes": unified.size_in_bytes,
        "last_local_retention_error": retention_error,
    }


def error_fields(row: dict) -> list[tuple[str, object]]:
    """(name, value) of the row's non-empty error-like fields, in the row's order."""
    return [(k, v) for k, v in row.items()
            if _ERROR_LIKE.search(k) and v not in (None, False, 0, "", [], {})]


def _size(n) -> str:
    if not isinstance(n, int):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError(n)


def _cell(row: dict, key: str) -> str:
    value = row.get(key)
    return "-" if value is None else str(value)


def _error_cell(row: dict, room: int | None = None) -> str:
    """The first error-like field as `name: value` (`copy: ...` for last_copy_error), cut
    to `room` characters; `(+N more)` when there are others."""
    errors = error_fields(row)
    if not errors:
        return "-"
    name, value = next(((k, v) for k, v in errors if v is not True), errors[0])
    short = re.sub(r"^last_|_error$", "", name)
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True, default=str)
    text = short if value is True else f"{short}: {value}"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    if room is not None and len(text) + len(more) > room:
        text = text[:max(0, room - len(more) - 3)] + "..."
    return text + more


def _compact_row(row: dict) -> list[str]:
    tiered = row.get("remote_storage_enable", True) is not False
    lag = row.get("copy_lag_segments")
    if not tiered or lag is None:
        lag_cell = "-"
    else:
        lag_cell = str(lag) + (f" ({_size(row.get('copy_lag_bytes'))})" if lag else "")
    return [f"{row.get('topic')}-{row.get('partition')}", _cell(row, "log_start_offset"),
            _cell(row, "local_log_start_offset"), _cell(row, "log_end_offset"),
            _cell(row, "highest_offset_in_remote_storage") if tiered else "off",
            _size(row.get("local_size_bytes")),
            _size(row.get("remote_size_bytes")) if tiered else "-",
            lag_cell]


_HEADER = ["partition", "log-start", "local-start", "end", "tiered", "local",
           "remote", "copy-lag", "last-error"]


def compact_table(rows: list[dict], width: int = WIDTH) -> str:
    """One line per partition; the last-error column is cut so a line fits `width` (never
    below 30 characters of it)."""
    cells = [_HEADER[:-1]] + [_compact_row(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_HEADER) - 1)]
    room = max(30, width - sum(w + 2 for w in widths))
    errors = [_HEADER[-1]] + [_error_cell(r, room) for r in rows]
    return "\n".join("  ".join([c.ljust(w) for c, w in zip(row, widths)] + [last]).rstrip()
                     for row, last in zip(cells, errors))


def format_all(rows: list[dict]) -> str:
    """Every field of every partition, `name  value` one per line (nested values as JSON),
    a block per partition."""
    blocks = []
    for row in rows:
        name_width = max(len(k) for k in row)
        lines = [f"{row.get('topic')}-{row.get('partition')}"]
        for key, value in row.items():
            shown = (json.dumps(value, sort_keys=True, default=str)
                     if isinstance(value, (dict, list)) else value)
            lines.append(f"  {key.ljust(name_width)}  {'-' if shown is None else shown}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _rows(session) -> list[dict]:
    rows = session.remote_log_manager().status() if session.tiered_storage else []
    described = {(r.get("topic"), r.get("partition")) for r in rows}
    for tp in session.log_manager.partitions():
        if (tp.topic, tp.partition) in described:
            continue
        unified = session.log_manager.get_log(tp.topic, tp.partition)
        if unified is not None:
            rows.append(local_status(
                tp.topic, tp.partition, unified,
                session.log_manager.retention_error(tp.topic, tp.partition)))
    return sorted(rows, key=lambda r: (str(r.get("topic")), r.get("partition", -1)))


@cli_errors
def run(args) -> int:
    with open_broker(args.config) as session:
        rows = _rows(session)
    if args.json:
        print(json.dumps(rows, sort_keys=True, default=str))
    elif not rows:
        print("no partitions")
    elif args.all:
        print(format_all(rows))
    else:
        print(compact_table(rows))
    return 0
