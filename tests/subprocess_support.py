"""Subprocess helpers for tests.

`with_fresh_peak_rss(cmd)`: `cmd` run as the child of a small shell instead of exec'd
straight from pytest. Linux carries a process's peak RSS across execve (and Python starts
children with vfork), so a child exec'd from a pytest process that has grown to 500 MB
reports a 500 MB peak from its first instruction, and libFuzzer's -rss_limit_mb fires on
memory the fuzzer never used. A child the shell forks (the shell's command is not its last,
so it is not exec'd in place) starts from the shell's peak.

`run_with_fresh_peak_rss(cmd, timeout, **kwargs)`: subprocess.run of that, output captured,
in a session of its own, so that a timeout kills the command with its shell (killing the
shell alone would leave the command running)."""

from __future__ import annotations

import os
import signal
import subprocess

__all__ = ["run_with_fresh_peak_rss", "with_fresh_peak_rss"]


def with_fresh_peak_rss(cmd: list[str]) -> list[str]:
    return ["/bin/sh", "-c", '"$@"; status=$?; exit $status', "sh", *cmd]


def run_with_fresh_peak_rss(cmd: list[str], timeout: float, **kwargs
                            ) -> subprocess.CompletedProcess:
    with subprocess.Popen(with_fresh_peak_rss(cmd), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
