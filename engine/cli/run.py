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
  then the same clean shutdown. A signal stops it after the current pass.

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

__all__ = ["run"]


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
    remote = sum(r.get("remote_segments", 0) for r in rows)
    remote_bytes = sum(r.get("remote_size_bytes", 0) for r in rows)
    lag = sum(r.get("copy_lag_segments", 0) for r in rows)
    errors = [f"{r['topic']}-{r['partition']}: {r[k]}" for r in rows
              for k in ("last_copy_error", "last_expiration_error") if r.get(k)]
    return (f"{len(rows)} tiered partition(s), {remote} remote segment(s) "
            f"({remote_bytes / 2**20:.1f} MiB), copy lag {lag} segment(s)"
            + (f"; last error {errors[0]}" if errors else ""))


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
                passes = 0
                while not stop.is_set():
                    summary = rlm.run_once()
                    passes += 1
                    if (summary.copied_segments or summary.deleted_remote_segments
                            or summary.deleted_local_segments or summary.errors):
                        print(f"pass {passes}: {_summary_line(summary)}", file=sys.stderr,
                              flush=True)
                    status = 1 if summary.errors else 0
                    if rlm.is_idle():
                        break
                    if summary.errors:  # back off as the RLM's retry does
                        stop.wait(broker["remote.log.manager.task.retry.backoff.ms"] / 1000)
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
