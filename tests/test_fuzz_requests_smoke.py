"""Runs the request decoder's fuzz target (tests/fuzz/fuzz_requests.py) as a real libFuzzer
process for a bounded time, under a resident-memory limit, and requires a clean exit: a
crash, a hang, an exception other than the codec's typed errors, an error without a
position, a request that does not survive re-encoding, or RSS past the limit (a lying length
or count that allocates) stop libFuzzer with a non-zero status and an artifact shown below.
The long run is the command in fuzz_requests.py's docstring."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import atheris  # noqa: F401  (test extras: a missing fuzzer fails the suite)
import pytest
from subprocess_support import run_with_fresh_peak_rss
from suite_counts import count_at_least

FUZZ_SECONDS = count_at_least("ENGINE_FUZZ_SMOKE_SECONDS", 30)
SCRIPT = Path(__file__).resolve().parent / "fuzz" / "fuzz_requests.py"


@pytest.mark.slow
def test_fuzz_requests_runs_clean(tmp_path):
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
        detail += f"\n{name}: {(artifacts / name).read_bytes()[:4096].hex()}"
    assert proc.returncode == 0 and not found, detail
    runs = re.search(r"Done (\d+) runs in", out)
    assert runs and int(runs.group(1)) > 1000, detail
    assert len(list(corpus.iterdir())) >= 100  # seeded with every API and version
