"""Runs the record decoder's fuzz target (tests/fuzz/fuzz_records.py) as a real libFuzzer
process for a bounded time, under a resident-memory limit, and requires a clean exit.

A crash, a hang (-timeout), an exception other than KafkaEngineError, an error without a
position, disagreeing decode paths or RSS past -rss_limit_mb all make libFuzzer stop with a
non-zero status and write the input to `crash-*`/`timeout-*`/`oom-*`, shown below on failure.
The long run is the command in fuzz_records.py's docstring.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import atheris  # noqa: F401  (test extras: a missing fuzzer fails the suite)
import crc32c  # noqa: F401
import pytest
from subprocess_support import run_with_fresh_peak_rss
from suite_counts import count_at_least

FUZZ_SECONDS = count_at_least("ENGINE_FUZZ_SMOKE_SECONDS", 45)
SCRIPT = Path(__file__).resolve().parent / "fuzz" / "fuzz_records.py"


@pytest.mark.slow
def test_fuzz_records_runs_clean(tmp_path):
    corpus = tmp_path / "corpus"
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    cmd = [sys.executable, str(SCRIPT), f"-max_total_time={FUZZ_SECONDS}",
           "-rss_limit_mb=512", "-timeout=10", "-print_final_stats=1",
           f"-artifact_prefix={artifacts}/", str(corpus)]
    proc = run_with_fresh_peak_rss(cmd, timeout=FUZZ_SECONDS + 120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    found = sorted(p.name for p in artifacts.iterdir())
    detail = "\n".join(line for line in out.splitlines()
                       if not line.startswith("INFO: Instrumenting"))[-6000:]
    for name in found:
        data = (artifacts / name).read_bytes()
        detail += f"\n{name}: {data[:4096].hex()}"
    assert proc.returncode == 0 and not found, detail
    runs = re.search(r"Done (\d+) runs in", out)
    assert runs, detail
    assert int(runs.group(1)) > 1000, detail  # it really fuzzed
    # it was seeded: the corpus holds the valid batches the target writes when it is empty
    assert len(list(corpus.iterdir())) >= 10
