"""Files that hold secrets, and the logs that may repeat them, readable by their owner only.

Passwords, keys and the logs of the processes that print them (Airflow's API server prints a
password it generates) were written with the umask's mode, 0644 in folders of 0755: every user
of the machine could read them. And a file that already existed kept its mode when new
secrets were written into it (`open(..., O_CREAT, 0o600)` sets the mode only of a file it
creates). Here a secret file is always 0600 after a write, whether it was new or not, its
folder 0700, and a log that may hold secrets is opened 0600.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TextIO

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "open_private_log", "private_dir", "tighten",
           "write_private"]  # fmt: skip

#: the owner's only: files that hold secrets, and the folders they live in
PRIVATE_FILE, PRIVATE_DIR = 0o600, 0o700


def private_dir(path: Path, mode: int = PRIVATE_DIR) -> Path:
    """`path` as a folder of mode `mode` (0700; made if missing, tightened if it was not).
    Only the folder itself: the folders above it are the user's to choose."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def tighten(path: Path) -> bool:
    """Make an existing file 0600; False when there is none."""
    try:
        Path(path).chmod(PRIVATE_FILE)
    except FileNotFoundError:
        return False
    return True


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path`, mode 0600 whether it existed or not: a new file in the same
    folder, made 0600 before anything is written to it, then renamed over `path`, so no
    reader ever sees a partial secret or a moment of a wider mode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staged = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise
    return path


def open_private_log(path: Path) -> TextIO:
    """`path` opened to append, mode 0600 (a log that existed with a wider mode is tightened
    first): the output of processes that may print a password or a connection URL."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")
