"""Linux's `prctl` settings that tie a process's life to another's, in one place.

- `PR_SET_PDEATHSIG`: the kernel sends a signal to a process when the thread that started it
  dies. A command the orchestration starts gets SIGTERM when its starter is killed outright
  (`orchestration.processes.start_group`); a stage gets it when its `dvc` dies
  (pipeline_steps/common.py).
- `PR_SET_CHILD_SUBREAPER`: orphans below a process are re-parented to it instead of init
  (`orchestration.supervise`).

Elsewhere than Linux, or with a libc that has no `prctl`, nothing is set and the callers carry
on without.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = [
    "PR_SET_CHILD_SUBREAPER",
    "PR_SET_PDEATHSIG",
    "parent_death_signal",
    "prctl_setter",
    "set_parent_death_signal",
]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PR_SET_CHILD_SUBREAPER = 36


def prctl_setter(option: int) -> Callable[[int], bool] | None:
    """`set(value)`: `prctl(option, value)` for the calling process, True when it took; None
    where `prctl` does not exist. libc is resolved here, so a `preexec_fn` that resolves it
    before the fork makes only one foreign call between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # libc's, in the process's namespace
    except (OSError, AttributeError):
        return None

    def set_value(value: int) -> bool:
        return prctl(option, value, 0, 0, 0) == 0

    return set_value


def parent_death_signal() -> Callable[[int], bool] | None:
    """`set(sig)`: the kernel sends `sig` to the calling process when its parent dies (0:
    never); None where that cannot be asked (`prctl_setter`)."""
    return prctl_setter(PR_SET_PDEATHSIG)


def set_parent_death_signal(sig: int) -> bool:
    """This process gets `sig` when its parent dies (0: never). False where that cannot be
    asked."""
    set_signal = parent_death_signal()
    return set_signal is not None and set_signal(sig)
