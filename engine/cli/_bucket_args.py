"""The `--bucket URL` and `--store KEY=VALUE` options of the commands that read a bucket
alone (`serve`, `export`, `scrub`): one definition of the options and of their parsing."""

from __future__ import annotations

import argparse

__all__ = ["STORE_HELP", "add_bucket_arguments", "key_values"]

STORE_HELP = "a store setting, the plugin's name without rsm.config. (repeatable)"


class _UsageError(ValueError):
    """A bad argument: one `error: ...` line, exit status 2."""


def add_bucket_arguments(p: argparse.ArgumentParser, bucket_help: str,
                         store_help: str = "with --bucket: " + STORE_HELP) -> None:
    p.add_argument("--bucket", default=None, metavar="URL", help=bucket_help)
    p.add_argument("--store", action="append", default=[], metavar="KEY=VALUE",
                   help=store_help)


def key_values(option: str, items: list[str]) -> dict[str, str]:
    """KEY=VALUE arguments of a repeatable option as a dict (keys and values stripped)."""
    out = {}
    for n, item in enumerate(items, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # not echoed: without its `=` an argument may be a secret typed alone
            raise _UsageError(f"{option} (its argument number {n} of {len(items)}): "
                              "expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
