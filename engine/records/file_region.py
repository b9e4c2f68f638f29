"""`FileRegion`: record bytes that stay in their file until they are sent (Kafka's
FileRecords slice handed to the socket as a Netty FileRegion).

A region is bytes [position, position + nbytes) of a segment file together with `view`, the
same bytes as a view of the file's mapping. A plain TCP socket sends it with sendfile (the
bytes go from the page cache to the socket, never through the process); any other transport
(TLS) writes `view`. The region owns a descriptor of its own (a dup taken while the segment
was open), so the segment may be closed, deleted or replaced by the time the region is
sent: the descriptor still names the file the bytes were read from. sendfile with an
explicit offset leaves the descriptor's file position alone, and the log writes by position,
so a shared file description is never disturbed. `close` releases the descriptor (garbage
collection does too).
"""

from __future__ import annotations

import io

__all__ = ["FileRegion"]


class FileRegion:
    """Bytes [position, position + nbytes) of `file` (an io.FileIO the region owns), and
    `view`, the same bytes from the file's mapping."""

    __slots__ = ("file", "position", "view")

    def __init__(self, fd: int, position: int, view: memoryview) -> None:
        self.file = io.FileIO(fd, "rb", closefd=True)
        self.position = position
        self.view = view

    @property
    def nbytes(self) -> int:
        return self.view.nbytes

    @property
    def closed(self) -> bool:
        return self.file.closed

    def close(self) -> None:
        self.file.close()

    def __repr__(self) -> str:
        return f"FileRegion(fd {self.file.fileno() if not self.closed else None}, " \
               f"position {self.position}, {self.nbytes} bytes)"
