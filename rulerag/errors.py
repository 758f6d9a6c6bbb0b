"""The one base class for "your input is wrong" errors.

A stage fails in one of two ways: a bug (a traceback, for us) or input the user can fix (a
params.yaml key, a KG file, an imported rule file, a truncated stage output). The second kind
derives from `InputError`; the stage wrapper (`pipeline_steps.common.run_stage`) prints its
message, which names the file, line or key, records the MLflow run as FAILED and exits 2,
without a traceback.
"""

from __future__ import annotations

__all__ = ["InputError", "OutputIntegrityError", "StorageError"]


class InputError(ValueError):
    """Input the user can fix; the message names the file, line, field or key."""


class OutputIntegrityError(InputError):
    """A stage output that a later stage reads is not what its writer recorded (cut short,
    edited, or from another run): rerun the stage that wrote it."""


class StorageError(InputError):
    """The disk refused a stage's read or write (no space left, a read-only or unwritable
    folder): nothing in the code to fix, so one line naming the file, not a traceback."""
