"""The tokens that carry dvc.lock entries between the Kubeflow pipeline's tasks. The graph the
compiler reads, `prepare`, `run_stage` and `collect` on the project:
tests/pipeline/test_kfp_run_state.py."""

from __future__ import annotations

import pytest

from rulerag.orchestration.kfp_tasks import StateError, pack_entries, unpack_entries

ENTRY = {
    "cmd": "python -m pipeline_steps.ingest",
    "params": {"params.yaml": {"ingest": {"duplicates": "keep", "note": 'a "quoted" {value}'}}},
    "outs": [{"path": "data/icews14/kg", "hash": "md5", "md5": "0123abcd.dir", "size": 12}],
}


def test_tokens_carry_entries_as_plain_words() -> None:
    """KFP pastes a token into strings (kfp.local: into the JSON it hands the executor), so a
    token holds no quote, brace, backslash or space; several join with spaces."""
    first = pack_entries({"ingest@icews14": ENTRY})
    second = pack_entries({"ingest@wiki": {**ENTRY, "cmd": "other"}})
    for token in (first, second):
        assert not set(token) & set("\"'{}\\ \n"), token
    assert pack_entries({}) == ""
    both = unpack_entries(f"{first}  {second} ")
    assert both == {"ingest@icews14": ENTRY, "ingest@wiki": {**ENTRY, "cmd": "other"}}
    assert unpack_entries("") == {}
    with pytest.raises(StateError, match="not a dvc.lock entry token"):
        unpack_entries("{{$.inputs.parameters['x']}}")
    with pytest.raises(StateError, match="does not decode"):
        unpack_entries(first[:-5])
