"""One trainer per cell: two grid processes over one results root (several on one machine,
jobs on a shared disk) must not train the same cell at once, nor redo a cell another process
finished after this one made its to-do list. A process training a cell holds an exclusive
flock on the cell's lock file; the kernel drops it when the process exits or is killed, so a
killed grid never leaves a stale lock and resuming needs no manual step. The file also names
the holder (host, pid, start time) for the message of the process that finds it taken. The
same kind of lock as data/prepare.py's `preparing`, which waits where this one skips; like it,
without POSIX locks (Windows) there is none: one process per results root is the user's job."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # no POSIX locks
    fcntl = None

LOCK = "training.lock"  # in a cell's directory; left in place (a lock is the flock, not the file)


class CellLock:
    """try_take() -> None (this process holds the cell until release()) or the holder."""

    def __init__(self, out: Path) -> None:
        self.path = out / LOCK
        self._fd: int | None = None

    def try_take(self) -> str | None:
        if fcntl is None:
            return None
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _named(fd)
            os.close(fd)
            return holder
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        self._fd = fd
        return None

    def holder(self) -> str | None:
        """Who holds the cell now (None: nobody), without taking it or creating the file."""
        if fcntl is None or not self.path.is_file():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # refused while a trainer holds it
        except BlockingIOError:
            return _named(fd)
        finally:
            os.close(fd)
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _named(fd: int) -> str:
    """The holder a lock file names, in words."""
    try:
        held = json.loads(os.read(fd, 4096) or b"{}")
    except ValueError:  # its holder is writing it right now
        held = {}
    return f"{held.get('host', '?')} pid {held.get('pid', '?')} since {held.get('since', '?')}"
