"""A Parquet file written a frame at a time, byte for byte the file `io.write_parquet` writes of
the frames' concatenation.

A stage whose output outgrows what it needs to hold writes it as it comes: the rule-guided
retrieval run of a ×16 graph is 27.8 million rows, which the `retrieve` stage held whole until
it wrote them (6.9 GiB, with the sort that scored them). Here at most one row group is held.

Why the bytes are the same: `write_parquet(pd.concat(frames))` converts the concatenation to
Arrow and `pq.write_table` cuts it into row groups of `ROW_GROUP_ROWS` rows. A file's bytes
follow from its schema, its rows and where the row groups are cut, not from how the rows lie
in memory (Arrow chunks: checked with pages cut inside chunks), so the same cuts of the frames'
rows, with the schema of the first frame, give the same file
(tests/unit/test_parquet_stream.py compares the bytes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rulerag.io import atomic_path, with_provenance

__all__ = ["ROW_GROUP_ROWS", "ParquetStream"]

#: the rows of a row group `pq.write_table` writes when not told (Arrow's
#: `max_row_group_length`); a test checks it against pyarrow's own default
ROW_GROUP_ROWS = 1024 * 1024


class ParquetStream:
    """`with ParquetStream(path, provenance) as stream: stream.write(frame) ...`: the file
    `io.write_parquet(path, pd.concat(frames, ignore_index=True), provenance)` would write, in
    place when the block ends without error (atomically, as `write_parquet`), never when it
    fails. Every frame must have the first one's columns and types; at least one frame must be
    written (an empty one gives the file its columns)."""

    def __init__(
        self, path: Path, provenance: Mapping[str, Any], row_group_rows: int = ROW_GROUP_ROWS
    ) -> None:
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be positive, not {row_group_rows}")
        self.path = Path(path)
        self.rows = 0  # rows written so far
        self._provenance = provenance
        self._group = row_group_rows
        self._held: list[pa.Table] = []
        self._held_rows = 0
        self._schema: pa.Schema | None = None
        self._writer: pq.ParquetWriter | None = None
        self._stack = contextlib.ExitStack()
        self._tmp: Path | None = None

    def __enter__(self) -> ParquetStream:
        self._tmp = self._stack.enter_context(atomic_path(self.path))
        return self

    def write(self, frame: pd.DataFrame) -> None:
        """Add `frame`'s rows; full row groups go to the file at once."""
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self._schema is None:
            meta = with_provenance(table.schema, self._provenance)
            self._schema = table.schema.with_metadata(meta)
        elif not table.schema.equals(self._schema, check_metadata=False):
            raise ValueError(
                f"{self.path}: a frame with columns {table.schema} after {self._schema}"
            )
        self._held.append(table)
        self._held_rows += table.num_rows
        self.rows += table.num_rows
        while self._held_rows >= self._group:
            self._flush(self._group)

    def _flush(self, rows: int) -> None:
        """Write the first `rows` held rows as one row group (`rows` <= a group)."""
        assert self._schema is not None and self._tmp is not None
        window = pa.concat_tables(self._held)
        head = window.slice(0, rows)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self._tmp, self._schema, compression="zstd")
        self._writer.write_table(head, self._group)  # the file's metadata: the writer's schema
        rest = window.slice(rows)
        self._held = [rest] if rest.num_rows else []
        self._held_rows -= rows

    def _finish(self) -> None:
        """The last, short row group (or the empty table when no row came) and the footer."""
        try:
            if self._schema is None:
                raise ValueError(f"{self.path}: no frame written (write an empty one)")
            if self._held_rows or self._writer is None:
                self._flush(self._held_rows)
        finally:
            if self._writer is not None:
                self._writer.close()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if kind is None:
            with self._stack:  # the file goes in place only when its footer is written
                self._finish()
            return
        if self._writer is not None:
            self._writer.close()
        self._stack.__exit__(kind, error, trace)  # removes the temporary file
