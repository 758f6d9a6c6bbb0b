"""ParquetStream: the file written a frame at a time is byte for byte the one `write_parquet`
writes of the frames' concatenation, and nothing is left in place when writing fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rulerag.io import read_provenance, with_provenance, write_parquet
from rulerag.parquet_stream import ROW_GROUP_ROWS, ParquetStream


def run_blocks(sizes: list[int], seed: int = 0) -> list[pd.DataFrame]:
    """Frames shaped like a retrieval run's blocks: str ids (Arrow-backed), int32 ranks,
    float32 scores; `sizes` rows each (0: an empty block)."""
    rng = np.random.default_rng(seed)
    frames = []
    for size in sizes:
        qids = np.asarray([f"q{int(i):05d}" for i in rng.integers(0, 900, size)], object)
        frames.append(
            pd.DataFrame(
                {
                    "qid": qids,
                    "rule": np.asarray([f"r{int(i)}" for i in rng.integers(0, 30, size)], object),
                    "rank": rng.integers(1, 51, size).astype(np.int32),
                    "doc_id": np.asarray([f"d{int(i)}" for i in rng.integers(0, 10**6, size)]),
                    "score": rng.random(size).astype(np.float32),
                }
            ).astype({"qid": str, "rule": str, "doc_id": str})
        )
    return frames


def whole(path: Path, frames: list[pd.DataFrame], rows: int, meta: dict) -> bytes:
    """What `write_parquet` writes of the concatenation, with row groups of `rows`."""
    table = pa.Table.from_pandas(pd.concat(frames, ignore_index=True), preserve_index=False)
    table = table.replace_schema_metadata(with_provenance(table.schema, meta))
    pq.write_table(table, path, compression="zstd", row_group_size=rows)
    return path.read_bytes()


@pytest.mark.parametrize(
    ("sizes", "rows"),
    [
        ([700, 0, 650, 1000, 3], 512),  # groups cut inside frames, an empty frame
        ([512, 512, 512], 512),  # groups end where frames do, no short last group
        ([100], 512),  # one short group
        ([0], 512),  # no row at all: the columns only
        ([4000, 2500], 1000),  # frames longer than a group
        ([300_001, 299_999, 400_003], 500_000),  # data pages (1 MiB) cut inside frames
    ],
)
def test_the_bytes_are_those_of_the_whole_frame(
    tmp_path: Path, sizes: list[int], rows: int
) -> None:
    frames = run_blocks(sizes)
    meta = {"split": "test"}
    with ParquetStream(tmp_path / "stream.parquet", meta, row_group_rows=rows) as stream:
        for frame in frames:
            stream.write(frame)
    assert stream.rows == sum(sizes)
    written = (tmp_path / "stream.parquet").read_bytes()
    assert written == whole(tmp_path / "whole.parquet", frames, rows, meta)
    assert pq.ParquetFile(tmp_path / "stream.parquet").metadata.num_row_groups == max(
        1, -(-sum(sizes) // rows)
    )
    assert read_provenance(tmp_path / "stream.parquet") == meta
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "stream.parquet"), pd.concat(frames, ignore_index=True)
    )


def test_the_default_row_group_is_pyarrows(tmp_path: Path) -> None:
    """`write_parquet` leaves the row group size to pyarrow: ROW_GROUP_ROWS must be it, or the
    stream's files stop matching once a run passes one group."""
    frames = [pd.DataFrame({"x": np.arange(ROW_GROUP_ROWS + 5, dtype=np.int32)})]
    write_parquet(tmp_path / "whole.parquet", frames[0], {})
    meta = pq.ParquetFile(tmp_path / "whole.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        ROW_GROUP_ROWS, 5,
    ]  # fmt: skip
    with ParquetStream(tmp_path / "stream.parquet", {}) as stream:
        stream.write(frames[0].iloc[:1000])
        stream.write(frames[0].iloc[1000:].reset_index(drop=True))
    assert (tmp_path / "stream.parquet").read_bytes() == (tmp_path / "whole.parquet").read_bytes()


def test_a_failed_stream_leaves_nothing_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "run.parquet"
    path.write_bytes(b"old")
    frames = run_blocks([600, 600])
    with (
        pytest.raises(RuntimeError, match="search failed"),
        ParquetStream(path, {}, row_group_rows=512) as stream,
    ):
        stream.write(frames[0])  # one row group is in the temporary file already
        raise RuntimeError("search failed")
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "run.parquet"
    ]
    with (
        pytest.raises(ValueError, match=r"run\.parquet: a frame with columns"),
        ParquetStream(path, {}) as stream,
    ):
        stream.write(frames[0])
        stream.write(frames[1].drop(columns="score"))
    with pytest.raises(ValueError, match="no frame written"), ParquetStream(path, {}):
        pass
    assert path.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1
    with pytest.raises(ValueError, match="must be positive"):
        ParquetStream(path, {}, row_group_rows=0)
