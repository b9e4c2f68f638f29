"""What `dump-log` and its index, snapshot and checkpoint dumpers (engine.cli._dump_aux)
share: the context a run writes to and collects problems in, and the naming rules of a
partition directory's files. Both import this module; neither imports the other's caller."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TextIO

__all__ = ["DumpContext", "base_offset_of", "partition_dir_files_of_kind"]


@dataclass
class DumpContext:
    out: TextIO
    print_data_log: bool = False
    verify: bool = False
    as_json: bool = False
    max_decompressed_bytes: int = 256 * 1024 * 1024
    problems: list[str] = field(default_factory=list)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def line(self, text: str) -> None:
        if not self.as_json:
            self.out.write(text + "\n")


def base_offset_of(path: str) -> int:
    """The base offset in a segment file's 20-digit name (0 when the name has none)."""
    stem = os.path.basename(path).split(".")[0]
    return int(stem) if stem.isdigit() else 0


def partition_dir_files_of_kind(directory: str, suffix: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory)
                  if n.endswith(suffix) and n[:-len(suffix)].isdigit())
