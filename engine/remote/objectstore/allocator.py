"""glibc's malloc settings for reading objects: freed response buffers are reused, not
unmapped and mapped again.

Every ranged GET's answer is one fresh allocation of the chunk's size (8 MiB by default),
made in one of obstore's runtime threads. glibc serves a request that large with a new
mapping (its dynamic mmap threshold stays at the size of the largest mapping freed, so a
request of that same size still gets one), and the kernel faults in and zeroes every page
of it: about an eighth of a cold remote read's CPU was `exc_page_fault` under the copy of
each chunk (bench/RESULTS.md). With the mmap threshold above the chunk size, buffers come
from the malloc heaps and a freed one is reused by the next GET; with a higher trim
threshold, those heaps are not given back to the kernel after every free.

`tune_for_object_reads()` sets both once per process, when the first ObjectStore is built:
`M_MMAP_THRESHOLD` 32 MiB (glibc's largest) and `M_TRIM_THRESHOLD` 256 MiB, so up to
that much freed memory may stay in a heap instead of returning to the system. It changes
nothing when the process runs on another C library, or when the operator chose for
themselves: any of `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or `GLIBC_TUNABLES`
in the environment (`MALLOC_TRIM_THRESHOLD_=131072`, glibc's default, keeps glibc's
behaviour).

Thread-safety: `tune_for_object_reads` may be called from any number of threads.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_for_object_reads"]

log = logging.getLogger(__name__)

MiB = 1 << 20
MMAP_THRESHOLD = 32 * MiB  # glibc refuses more than half its 64 MiB heap size
TRIM_THRESHOLD = 256 * MiB
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")

_lock = threading.Lock()
_done: bool | None = None


def tune_for_object_reads() -> bool:
    """Sets glibc's mmap and trim thresholds once (see the module docstring); True when
    this process runs with them."""
    global _done
    with _lock:
        if _done is None:
            _done = _apply()
        return _done


def _apply() -> bool:
    if any(name in os.environ for name in _OPERATOR_SETTINGS):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 on success; the trim threshold first, as glibc fixes the mmap
    # threshold (no longer dynamic) once either is set
    done = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and \
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    if not done:
        log.debug("mallopt refused the object-read thresholds")
    return done
