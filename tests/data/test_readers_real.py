"""Each reader on the real KG files of the local mirror: sizes match the mirror's README, names
are readable, times are dates, and ingestion is byte-for-byte deterministic."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import ingest_into
from rulerag.kg import readers
from rulerag.kg.ingest import repair
from rulerag.kg.registry import DATASETS
from rulerag.kg.schema import KnowledgeGraph, days_to_iso

pytestmark = pytest.mark.data

# (train, valid, test, entities, relations) from ../shared/kg/README.md
README_SIZES = {
    "icews14": (63_685, 13_823, 13_222, 7_128, 230),
    "fb15k237": (272_115, 17_535, 20_466, 14_541, 237),
    "nell995": (149_678, 543, 3_992, 75_492, 200),
    "wiki": (None, 67_538, 63_110, 12_554, 24),
}


def _sizes(kg: KnowledgeGraph) -> tuple:
    counts = kg.facts["split"].value_counts()
    return tuple(counts.get(s) for s in ("train", "valid", "test"))


@pytest.fixture(scope="module")
def loaded(kg_mirror: Path) -> dict[str, KnowledgeGraph]:
    out = {}
    for name in README_SIZES:
        spec = DATASETS[name]
        out[name] = spec.sources[0].reader(kg_mirror / spec.mirror_dir)
    out["icews14-xerte"] = readers.read_xerte(kg_mirror / "icews14")
    return out


@pytest.mark.parametrize("name", list(README_SIZES))
def test_sizes_match_readme(loaded: dict[str, KnowledgeGraph], name: str) -> None:
    kg = loaded[name]
    train, valid, test, n_ent, n_rel = README_SIZES[name]
    read = kg.lines_read
    assert (read.get("train"), read["valid"], read["test"]) == (train, valid, test)
    assert _sizes(kg) == (train, valid, test)  # readers keep every line; repair() drops
    assert len(kg.entities) == n_ent
    assert len(kg.relations) == n_rel
    assert kg.entities["id"].is_unique and kg.relations["id"].is_unique
    used = set(kg.facts["head"]) | set(kg.facts["tail"])
    assert used <= set(kg.entities["id"])


def test_icews14_train_has_63685_facts_after_repair(loaded: dict[str, KnowledgeGraph]) -> None:
    kg = loaded["icews14"]
    facts = kg.facts.copy()
    dropped = repair(
        KnowledgeGraph(
            facts, kg.entities, kg.relations, "day", "day", lines_read=dict(kg.lines_read)
        )
    )
    assert dropped == {"train": 0, "valid": 0, "test": 0}
    assert (kg.facts["split"] == "train").sum() == 63_685


def test_icews14_names_and_dates(loaded: dict[str, KnowledgeGraph]) -> None:
    for key in ("icews14", "icews14-xerte"):
        kg = loaded[key]
        assert "Citizen (Nigeria)" in set(kg.entities["name"])
        assert not kg.entities["name"].str.contains("_").any()
        assert kg.facts["time"].notna().all()
        assert days_to_iso(kg.facts["time"].min()) == "2014-01-01"
        assert days_to_iso(kg.facts["time"].max()) == "2014-12-31"
        assert kg.time_unit == "day"


def test_tlogic_and_xerte_hold_the_same_facts(loaded: dict[str, KnowledgeGraph]) -> None:
    """The two ICEWS14 formats differ in ids and spelling only: by name, the facts coincide."""

    def named(kg: KnowledgeGraph) -> pd.DataFrame:
        ent = kg.entities.set_index("id")["name"]
        rel = kg.relations.set_index("id")["name"]
        frame = pd.DataFrame(
            {
                "h": kg.facts["head"].map(ent),
                "r": kg.facts["relation"].map(rel),
                "t": kg.facts["tail"].map(ent),
                "time": kg.facts["time"],
                "split": kg.facts["split"],
            }
        )
        return frame.sort_values(list(frame.columns)).reset_index(drop=True)

    a, b = named(loaded["icews14"]), named(loaded["icews14-xerte"])
    assert a.equals(b)


def test_fb15k237_mids_map_to_names(loaded: dict[str, KnowledgeGraph]) -> None:
    kg = loaded["fb15k237"]
    by_key = kg.entities.set_index("key")["name"]
    assert by_key["/m/027rn"] == "Dominican Republic"
    assert not kg.entities["name"].str.startswith("/m/").any()
    assert kg.facts["time"].isna().all() and kg.time_unit is None
    rel = kg.relations.set_index("key")["name"]
    assert rel["/people/person/profession"] == "people person profession"


def test_nell_concepts_become_readable(loaded: dict[str, KnowledgeGraph]) -> None:
    kg = loaded["nell995"]
    ent = kg.entities.set_index("key")
    assert ent.loc["concept_personcanada_matthew_bellamy", "name"] == "matthew bellamy"
    assert ent.loc["concept_personcanada_matthew_bellamy", "type"] == "personcanada"
    rel = kg.relations.set_index("key")["name"]
    assert rel["concept:proxyfor"] == "proxy for"
    assert rel["concept:athleteplaysforteam"] == "athlete plays for team"


def test_wiki_has_no_train_split_and_says_so(loaded: dict[str, KnowledgeGraph]) -> None:
    kg = loaded["wiki"]
    assert "train" not in kg.lines_read
    assert any("'train' is not in the source" in note for note in kg.notes)
    assert kg.time_unit == "year" and kg.time_granularity == "year"
    valid, test = (kg.facts.loc[kg.facts["split"] == s, "time"] for s in ("valid", "test"))
    assert (valid.min(), valid.max(), test.min(), test.max()) == (1997, 2007, 2008, 2017)


def test_wiki_labels_name_every_entity_once_and_match_renet_ids(
    kg_mirror: Path, loaded: dict[str, KnowledgeGraph]
) -> None:
    """TKGF's labels over RE-Net's ids: the same facts, readable names, shared labels told
    apart by their Wikidata id, Q-ids as keys."""
    kg = loaded["wiki"]
    renet = readers.read_renet(kg_mirror / "wiki", "RE-Net_WIKI", year_origin=1786)
    columns = ["head", "relation", "tail", "time", "split"]
    assert kg.facts[columns].equals(renet.facts[columns])
    names = kg.entities.set_index("id")["name"]
    assert names.is_unique
    assert names[0] == "Uzhhorod" and kg.entities.set_index("id")["key"][0].startswith("Q")
    assert names.str.match(r".+ \(Q\d+\)$").sum() == 73  # 32 labels shared by 73 ids
    assert list(kg.relations["name"][:2]) == [
        "capital of",
        "located in the administrative territorial entity",
    ]


def test_renet_yago_entity_lines_with_dates(tmp_path: Path) -> None:
    """YAGO's entity2id carries start/end dates, <bracketed> names and camelCase relations;
    with the year of step 0 times are years."""
    folder = tmp_path / "RE-Net_YAGO"
    folder.mkdir()
    (folder / "entity2id.txt").write_text(
        "<Albuquerque,_New_Mexico>\t0\t1706-##-##\t####-##-##\n<Boston>\t1\t1822-03-04\t####-##-##\n"
    )
    (folder / "relation2id.txt").write_text("<isLocatedIn>\t0\n")
    (folder / "train.txt").write_text("0\t0\t1\t5\t0\n")
    (folder / "valid.txt").write_text("1\t0\t0\t6\t0\n")
    (folder / "test.txt").write_text("0\t0\t1\t7\t0\n")
    kg = readers.read_renet(tmp_path, "RE-Net_YAGO")
    assert list(kg.entities["name"]) == ["Albuquerque, New Mexico", "Boston"]
    assert list(kg.relations["name"]) == ["is located in"]
    assert list(kg.facts["time"]) == [5, 6, 7] and kg.time_unit == "index"
    years = DATASETS["yago"].sources[0].reader(tmp_path)
    assert list(years.facts["time"]) == [1835, 1836, 1837] and years.time_unit == "year"


@pytest.mark.parametrize("name", ["icews14", "nell995"])
def test_ingest_twice_gives_identical_parquet(kg_mirror: Path, tmp_path: Path, name: str) -> None:
    outs = []
    for run in ("a", "b"):
        out = tmp_path / run
        ingest_into(DATASETS[name], out, data_dir=kg_mirror, download_dir=tmp_path / "dl")
        outs.append(out)
    for fname in ("facts.parquet", "entities.parquet", "relations.parquet"):
        assert (outs[0] / fname).read_bytes() == (outs[1] / fname).read_bytes(), fname
    assert not list(outs[0].glob(".ingest-*")), "staging folder left behind"
