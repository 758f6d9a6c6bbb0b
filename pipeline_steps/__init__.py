"""One module per DVC stage: parse arguments, read params, call rulerag, write, log."""

import os


def parent_of(pid: int) -> int | None:
    """`pid`'s parent as Linux's /proc shows it; None elsewhere, or once `pid` is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rpartition(b")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


#: (parent, grandparent) of this process when the stage started: dvc, or the `$SHELL -c` dvc
#: ran the command in and dvc. Read first thing, before a stage's imports (seconds where they
#: load torch), so that a stage whose dvc died meanwhile still sees it (`common.run_stage`).
STARTED_BY: tuple[int, int | None] = (os.getppid(), parent_of(os.getppid()))
