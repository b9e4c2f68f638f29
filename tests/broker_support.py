"""The engine broker harness the tests share: one set of broker property templates, a broker
dir built from them (two log dirs, a filesystem tier, `server.properties`), and the engine's
commands run in this process for reference views and set-up.

`engine_in_process(...)` is `python -m engine ...` without a new interpreter: the same
argument parsing, the same command and the same output text. Tests of a command's process
(exit status on signals, what a child prints when it dies, a second process on the same log
dirs) start the real subprocess instead.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["FS_TIERED", "SERVE", "SMALL_SEGMENTS", "broker_dirs", "broker_properties",
           "broker_template",
           "engine_in_process", "orders_broker", "write_broker"]

#: a tiered broker over the filesystem tier with 4 KiB segments: segments roll every few
#: batches and reach the tier at once (the CLI tests)
SMALL_SEGMENTS = {"log.segment.bytes": 4096, "log.retention.ms": -1,
                  "log.local.retention.bytes": 8192,
                  "remote.log.manager.task.interval.ms": 100}
#: what `serve` tests run: 64 KiB segments, a split history (twice that kept locally), every
#: topic tiered, an ephemeral listener and no group rebalance delay
SERVE = {"remote.storage.enable": "true", "log.segment.bytes": 65536, "log.retention.ms": -1,
         "log.local.retention.bytes": 131072, "remote.log.manager.task.interval.ms": 100,
         "log.retention.check.interval.ms": 1000, "listeners": "PLAINTEXT://127.0.0.1:0",
         "group.initial.rebalance.delay.ms": 0}
#: the crash loops: every closed segment tiered and deleted locally at once, retries at once
FS_TIERED = {"log.segment.bytes": 4096, "log.retention.ms": -1, "log.local.retention.bytes": 1,
             "remote.storage.enable": "true", "remote.log.manager.task.retry.backoff.ms": 1}


def broker_dirs(base: Path, names=("d1", "d2", "tier")) -> dict[str, Path]:
    """`base/d1`, `base/d2` (the log dirs) and `base/tier`, made."""
    dirs = {k: Path(base) / k for k in names}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return dirs


def broker_properties(dirs: Mapping[str, object], settings: Mapping[str, object] = SMALL_SEGMENTS,
                      rsm: Mapping[str, str] | None = None, extra: str = "") -> str:
    """A broker file's text: tiering on over the log dirs `d1` and `d2`, the filesystem tier
    in `dirs["tier"]` (or the RSM properties `rsm`, full names), then `settings`, then the
    `extra` lines."""
    lines = {"log.dirs": ",".join(str(dirs[k]) for k in ("d1", "d2") if k in dirs),
             "remote.log.storage.system.enable": "true"}
    lines.update(rsm if rsm is not None else {"rsm.config.dirs": str(dirs["tier"])})
    lines.update({k: str(v) for k, v in settings.items()})
    return "".join(f"{k}={v}\n" for k, v in lines.items()) + extra


#: the dirs of a template: `broker_template(...).format(d1=..., d2=..., tier=...)`
_TEMPLATE_DIRS = {"d1": "{d1}", "d2": "{d2}", "tier": "{tier}"}


def broker_template(settings: Mapping[str, object] = SMALL_SEGMENTS) -> str:
    """`broker_properties` with `{d1}`, `{d2}` and `{tier}` left to `str.format`."""
    return broker_properties(_TEMPLATE_DIRS, settings)


def write_broker(base: Path, settings: Mapping[str, object] = SMALL_SEGMENTS,
                 rsm: Mapping[str, str] | None = None, extra: str = ""
                 ) -> tuple[str, dict[str, Path]]:
    """The broker dirs under `base` and `base/server.properties` over them. Returns the
    file's path and the dirs."""
    dirs = broker_dirs(base)
    path = Path(base) / "server.properties"
    path.write_text(broker_properties(dirs, settings, rsm, extra))
    return str(path), dirs


def orders_broker(base: Path, extra: str = "") -> tuple[str, dict[str, Path]]:
    """`write_broker` with SMALL_SEGMENTS and `extra`, and topic `orders` (two partitions)
    created and shut down cleanly (the CLI tests' broker)."""
    from engine.log.log_manager import LogManager

    path, dirs = write_broker(base, SMALL_SEGMENTS, extra=extra)
    with LogManager([dirs["d1"], dirs["d2"]]) as manager:
        for p in (0, 1):
            manager.get_or_create_log("orders", p)
    return path, dirs


def engine_in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`python -m engine ARGS` run here, stdout and stderr captured as text; with `check`,
    a non-zero status fails with the command's stderr."""
    from engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    done = subprocess.CompletedProcess([sys.executable, "-m", "engine", *args], code,
                                       out.getvalue(), err.getvalue())
    assert not check or code == 0, (args, done.stderr)
    return done
