"""`run`: the RemoteLogManager over a broker's existing log dirs.

    python -m engine run --config FILE [--until-idle]

Loads and validates the broker file and the stored topic overrides (nothing is opened on
a bad one), locks the log dirs, opens the logs (recovering them after a crash), and:

- long-lived (default): starts the RLM's copy and expiration tasks (every
  `remote.log.manager.task.interval.ms`), runs local retention (`LogManager.cleanup_logs`)
  every `log.retention.check.interval.ms`, checkpoints log start offsets after it, and
  applies topic overrides changed with `configs --alter` while it runs. SIGTERM or SIGINT
  stops it: the RLM is closed first (its current copy finishes or is aborted, leaving
  COPY_SEGMENT_STARTED that the next run cleans up), then the logs are closed cleanly.
- `--until-idle`: synchronous passes (`run_once`) until nothing is left to copy or expire,
  then the same clean shutdown. A signal stops it after the current pass. After a pass
  that copied or deleted nothing it waits for the failed tasks' retry (the RLM's
  exponential `remote.log.manager.task.retry.backoff.ms` .. `backoff.max.ms`; at least
  `retry.backoff.ms`, or `task.interval.ms` when nothing failed), and it gives up after
  PASSES_WITHOUT_PROGRESS (5) such passes in a row while work is left: a full or read-only
  tier then ends the run with exit 1 after about 1+2+4+8 times `retry.backoff.ms` instead
  of retrying forever. A partition whose remote log metadata is damaged (offline) does not
  hold up the others: their work is finished, then the run exits 1 naming it.

Progress goes to stderr: with --until-idle one line per pass that did something,
otherwise a status line (tiered partitions, remote segments and bytes, copy lag, last
error) every 5 s when it changed. Exit status 0 on a clean stop, 1 when the last
--until-idle pass still had errors.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from engine.cli._broker import apply_topic_overrides, cli_errors, open_broker
from engine.config import ConfigError, load_broker_config

__all__ = ["PASSES_WITHOUT_PROGRESS", "run"]

#: --until-idle stops (exit 1) after this many passes in a row that copied and deleted
#: nothing while work was left; the retry backoff between them bounds the time too
PASSES_WITHOUT_PROGRESS = 5


def _install_stop_handlers(stop: threading.Event) -> dict:
    previous = {}

    def handler(signum, frame):
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)
    return previous


def _store_stamp(path: str):
    try:
        st = os.stat(path)
        return st.st_mtime_ns, st.st_size, st.st_ino
    except FileNotFoundError:
        return None


def _summary_line(summary) -> str:
    return (f"copied {summary.copied_segments} segment(s) ({summary.copied_bytes} bytes), "
            f"deleted {summary.deleted_remote_segments} remote and "
            f"{summary.deleted_local_segments} local segment(s)"
            + (f", {len(summary.errors)} error(s): {summary.errors[0]}"
               if summary.errors else ""))


def _status_line(rlm) -> str:
    rows = rlm.status()
    remote = sum(r.get("remote_segments") or 0 for r in rows)
    remote_bytes = sum(r.get("remote_size_bytes") or 0 for r in rows)
    lag = sum(r.get("copy_lag_segments") or 0 for r in rows)
    errors = [f"{r['topic']}-{r['partition']}: {r[k]}" for r in rows
              for k in ("offline_error", "last_copy_error", "last_expiration_error",
                        "last_local_retention_error")
              if r.get(k)]
    errors += [f"log dir {d} offline" for d in rlm.log_manager.offline_dirs]
    return (f"{len(rows)} tiered partition(s), {remote} remote segment(s) "
            f"({remote_bytes / 2**20:.1f} MiB), copy lag {lag} segment(s)"
            + (f"; last error {errors[0]}" if errors else ""))


def _until_idle(rlm, broker, stop: threading.Event) -> int:
    """Passes until idle (see the module docstring); the exit status."""
    passes = stalled = 0
    status = 0
    while not stop.is_set():
        summary = rlm.run_once()
        passes += 1
        if summary.made_progress or summary.errors:
            print(f"pass {passes}: {_summary_line(summary)}", file=sys.stderr, flush=True)
        status = 1 if summary.errors else 0
        if rlm.is_idle():
            break
        if summary.made_progress:
            stalled = 0
            continue
        stalled += 1
        if stalled >= PASSES_WITHOUT_PROGRESS:
            print(f"run: giving up after {stalled} passes in a row without progress"
                  + (f"; last error: {summary.errors[0]}" if summary.errors else
                     ": work is left that no pass does"), file=sys.stderr, flush=True)
            return 1
        if summary.errors:  # the failed tasks' retry backoff
            wait_ms = max(summary.retry_in_ms,
                          broker["remote.log.manager.task.retry.backoff.ms"])
        else:
            wait_ms = broker["remote.log.manager.task.interval.ms"]
        stop.wait(wait_ms / 1000)
    return status


@cli_errors
def run(args) -> int:
    broker = load_broker_config(args.config)
    if not broker["remote.log.storage.system.enable"]:
        raise ConfigError("remote.log.storage.system.enable", False,
                          "run is the RemoteLogManager (it tiers segments and expires remote "
                          "ones) and needs tiered storage on; fetch, list-offsets and status "
                          "read a broker without it", file=args.config)
    stop = threading.Event()
    previous = _install_stop_handlers(stop)
    status = 0
    try:
        with open_broker(args.config) as session:
            rlm = session.remote_log_manager()
            manager = session.log_manager
            print(f"run: {len(manager.partitions())} partition(s) in "
                  f"{', '.join(map(str, manager.log_dirs))}", file=sys.stderr, flush=True)
            if args.until_idle:
                status = _until_idle(rlm, broker, stop)
            else:
                rlm.start()
                retention_every = broker["log.retention.check.interval.ms"] / 1000
                next_cleanup = time.monotonic() + retention_every
                stamp = _store_stamp(session.store.path)
                last_line, next_report = None, time.monotonic()
                while not stop.wait(min(1.0, retention_every)):
                    if time.monotonic() >= next_report:  # progress when something changed
                        line = _status_line(rlm)
                        if line != last_line:
                            print(f"run: {line}", file=sys.stderr, flush=True)
                            last_line = line
                        next_report = time.monotonic() + 5.0
                    new_stamp = _store_stamp(session.store.path)
                    if new_stamp != stamp:
                        stamp = new_stamp
                        try:
                            session.store.read()
                            for topic in apply_topic_overrides(manager, session.store):
                                print(f"run: applied topic config of {topic}",
                                      file=sys.stderr, flush=True)
                        except ConfigError as exc:  # keep running on the last good config
                            print(f"run: topic config not applied: {exc}", file=sys.stderr,
                                  flush=True)
                    if time.monotonic() >= next_cleanup:
                        manager.cleanup_logs()
                        manager.checkpoint_log_start_offsets()
                        next_cleanup = time.monotonic() + retention_every
                    # starts moved by remote expiration survive a crash within the interval
                    manager.maybe_checkpoint_log_start_offsets()
            print(f"run: stopping ({_status_line(rlm)}): closing the remote log manager "
                  "and the logs", file=sys.stderr, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("run: stopped cleanly", file=sys.stderr, flush=True)
    return status
