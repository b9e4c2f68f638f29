"""Subprocess helpers for tests.

`with_fresh_peak_rss(cmd)`: `cmd` run as the child of a small shell instead of exec'd
straight from pytest. Linux carries a process's peak RSS across execve (and Python starts
children with vfork), so a child exec'd from a pytest process that has grown to 500 MB
reports a 500 MB peak from its first instruction, and libFuzzer's -rss_limit_mb fires on
memory the fuzzer never used. A child the shell forks (the shell's command is not its last,
so it is not exec'd in place) starts from the shell's peak."""

from __future__ import annotations

__all__ = ["with_fresh_peak_rss"]


def with_fresh_peak_rss(cmd: list[str]) -> list[str]:
    return ["/bin/sh", "-c", '"$@"; status=$?; exit $status', "sh", *cmd]
