"""The dataset registry: each dataset's name, mirror folder, source formats and public files.

A dataset may be available in several formats (ICEWS14 as TLogic's named TSV or xERTE's id
files); its sources are tried in order, or the one params name. Checksums are the sha256 of the
published files (taken from the project's reference mirror); unknown ones are None and not
verified. Users' own KGs are added through params.yaml (`ingest.custom`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rulerag.kg import readers
from rulerag.kg.download import RemoteFile
from rulerag.kg.errors import UnknownDatasetError
from rulerag.kg.schema import KnowledgeGraph
from rulerag.settings import check_dataset_name

if TYPE_CHECKING:  # the settings import the registry (its KGs), not the other way round
    from rulerag.kg.settings import CustomKG, IngestSettings

Reader = Callable[[Path], KnowledgeGraph]


@dataclass(frozen=True)
class Source:
    """One way to obtain a dataset: the files it needs and the reader that understands them."""

    name: str
    reader: Reader
    #: paths relative to the dataset folder that must exist for this source to be usable
    required: tuple[str, ...]
    #: public files to download (names relative to the dataset folder); empty = mirror only
    remote: tuple[RemoteFile, ...] = ()


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset: where it sits in a mirror and how to read it."""

    name: str
    mirror_dir: str
    kind: str  # "temporal" or "static"
    description: str
    sources: tuple[Source, ...]
    #: the RuleRAG paper's Table 1 row for the benchmark built from this KG (for comparison)
    paper: Mapping[str, int] = field(default_factory=dict)
    #: a user's KG lives at its own path instead of under the mirror root
    local_path: Path | None = None


def _github(repo: str, branch: str, folder: str, files: Mapping[str, str | None], into: str):
    base = f"https://raw.githubusercontent.com/{repo}/{branch}/{folder}"
    return tuple(RemoteFile(f"{into}/{name}", f"{base}/{name}", sha) for name, sha in files.items())


def _archive(url: str, into: str, members: Mapping[str, tuple[str, str | None]]):
    return tuple(
        RemoteFile(f"{into}/{name}", url, sha, member) for name, (member, sha) in members.items()
    )


_TLOGIC_ICEWS14 = {
    "train.txt": "e66100f4d1a11198fad0120e3596981494dfe0c3f930211608a10377a7af3a1a",
    "valid.txt": "ce4862c7bc517f322b33742909a1e1e893a950b2ce290c6e14348611736ed9a2",
    "test.txt": "7ecf0f159445aadacddd03198a8aa363c9b803671ae7f38edd32ee5520a925f6",
    "entity2id.json": "01c47a9e02dfedd9b33a6d1df9d035ff10f50dd810841b93604b73658f6c6ba1",
    "relation2id.json": "e75f5a29973228261f2a7b291cd2f716f84ce00fe2c82ce7f10163d5c76adb8a",
}
_RENET_WIKI = {
    "valid.txt": "d9fb60e43b9e6ed970c6c63f1252d2bb5b3ed60eb1384a51e4b771d624350663",
    "test.txt": "3e70736c25102f85faac7e0763263d67b113a3698e71efac72bb4dc2f84c9d79",
    "entity2id.txt": "307628d198b9369b650d46bb88980b38ed0957a9e8148227c94907f9b2804f01",
    "relation2id.txt": "50e6d3c632dde882c8a84aece1eda1f640f4a79a184033eb0941c10dad90e517",
}
_TKGF_WIKI = {
    "valid.txt": "95f47263e8f129ebe160404b636ea2870079e50d444513dc59a6518efe57950e",
    "test.txt": "478d3323e70cb2f4d3f3049a2ed4cb87a0bb899e00960ded4e08aff1028f0090",
    "entity2id.txt": "665189315726f2c33697bb2a65575a192e79bac6a86425de64837b7f7bc5f4aa",
    "relation2id.txt": "d6ac94cadd3ec114b4237b1269639b4182acb939377b8cd1eefab53efcab55e3",
}
#: Calendar year of time step 0 in RE-Net's yearly KGs (their files hold only the step).
#: YAGO: the first step of a <wasBornIn> fact is the subject's birth year (entity2id.txt's
#: start date) minus 1830 for 3,129 of 3,340 births; <diedIn> agrees for 1,623 of 1,643.
#: WIKI: labelled facts place 2016 at step 230 (Donald Trump, Time Person of the Year), 2017 at
#: 231 (President of the United States), 2004/2005 at 218/219 (his Emmy nominations), 2001 at
#: 215 (Democratic Party member), so step 0 is 1786 and test (steps 222-231) is 2008-2017.
YEAR_ORIGIN = {"yago": 1830, "wiki": 1786}
_RENET_YAGO: dict[str, str | None] = dict.fromkeys(
    ("train.txt", "valid.txt", "test.txt", "entity2id.txt", "relation2id.txt")
)
_CONVE_FB = {
    "train.txt": "6e4c2782169af21e9743f3b1d200886f5d595bf6bc504ec1351720949c5cdfae",
    "valid.txt": "cf6309010852f6a8d47a45df830a426415d1ee6f7a3970a8376ff1fb81db4a5c",
    "test.txt": "5711cf41623ceb4eacc50eb6108a3ca6565c7492e3caaf82a3e355cc660d1574",
}
_KBGAT_NELL = {
    "entity2id.txt": "6821124da1003c68d20f863dfba58a64d883e51f666e4697e28381f0d4eb3cfb",
    "relation2id.txt": "5d4cf6540f2519edd962c80190d1feb33b001ad47c9dd1692c4bdc256bb3a760",
}
_PP413 = "https://raw.githubusercontent.com/pp413/Knowledge_embedding_benchmark_datasets/main"

DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            name="icews14",
            mirror_dir="icews14",
            kind="temporal",
            description="ICEWS14: political events of 2014, daily timestamps",
            sources=(
                Source(
                    "tlogic",
                    partial(readers.read_tlogic, subdir="TLogic_icews14"),
                    ("TLogic_icews14/train.txt",),
                    _github(
                        "liu-yushan/TLogic",
                        "main",
                        "data/icews14",
                        _TLOGIC_ICEWS14,
                        "TLogic_icews14",
                    ),
                ),
                Source(
                    "xerte",
                    partial(readers.read_xerte, subdir="xERTE_ICEWS14_forecasting"),
                    ("xERTE_ICEWS14_forecasting/entity2id.txt",),
                ),
            ),
            paper={"rules": 557, "corpus": 77508, "f_r": 6594, "f_g": 7440, "test": 1559},
        ),
        DatasetSpec(
            name="yago",
            mirror_dir="yago",
            kind="temporal",
            description="YAGO (RE-Net version): yearly time steps",
            sources=(
                Source(
                    "renet",
                    partial(
                        readers.read_renet,
                        subdir="RE-Net_YAGO",
                        year_origin=YEAR_ORIGIN["yago"],
                    ),
                    ("RE-Net_YAGO/entity2id.txt",),
                    _github("INK-USC/RE-Net", "master", "data/YAGO", _RENET_YAGO, "RE-Net_YAGO"),
                ),
            ),
            paper={"rules": 99, "corpus": 243633, "f_r": 28153, "f_g": 22765, "test": 1864},
        ),
        DatasetSpec(
            name="wiki",
            mirror_dir="wiki",
            kind="temporal",
            description="WIKI: Wikidata facts, yearly (1786-2017); labels from TKGF, else Q/P ids",
            sources=(
                Source(
                    "tkgf",
                    partial(readers.read_tkgf, year_origin=YEAR_ORIGIN["wiki"]),
                    ("TKGF_WIKI/entity2id.txt",),
                    _github(
                        "waltbai/TKG-forecasting-datasets", "main", "WIKI", _TKGF_WIKI, "TKGF_WIKI"
                    )
                    + _github("INK-USC/RE-Net", "master", "data/WIKI", _RENET_WIKI, "RE-Net_WIKI"),
                ),
                Source(
                    "renet",
                    partial(
                        readers.read_renet, subdir="RE-Net_WIKI", year_origin=YEAR_ORIGIN["wiki"]
                    ),
                    ("RE-Net_WIKI/entity2id.txt",),
                    _github("INK-USC/RE-Net", "master", "data/WIKI", _RENET_WIKI, "RE-Net_WIKI"),
                ),
            ),
            paper={"rules": 78, "corpus": 584364, "f_r": 50996, "f_g": 62375, "test": 2065},
        ),
        DatasetSpec(
            name="fb15k237",
            mirror_dir="fb15k-237",
            kind="static",
            description="FB15k-237: Freebase subset, names from mid2name",
            sources=(
                Source(
                    "conve",
                    readers.read_fb15k237,
                    ("ConvE_FB15k-237/train.txt", "pp413_FB15k-237/FB15k_mid2name.txt"),
                    _archive(
                        "https://raw.githubusercontent.com/TimDettmers/ConvE/master/FB15k-237.tar.gz",
                        "ConvE_FB15k-237",
                        {name: (name, sha) for name, sha in _CONVE_FB.items()},
                    )
                    + _archive(
                        f"{_PP413}/FB15k-237.zip",
                        "pp413_FB15k-237",
                        {
                            "FB15k_mid2name.txt": (
                                "FB15k-237/FB15k_mid2name.txt",
                                "4da94b8059a83bc7e08c832f573d34221d38e85030576e332a0d0e9726d13d73",
                            ),
                            "rel2text.txt": (
                                "FB15k-237/rel2text.txt",
                                "d1b18b97393c2ebd08a99d048544a639aec6b352c1824a122366e2f8ced14e02",
                            ),
                        },
                    ),
                ),
            ),
            paper={"rules": 367, "corpus": 49088, "f_r": 8082, "f_g": 9645, "test": 1233},
        ),
        DatasetSpec(
            name="nell995",
            mirror_dir="nell-995",
            kind="static",
            description="NELL-995: NELL concepts, relations split into words",
            sources=(
                Source(
                    "pp413",
                    readers.read_nell,
                    ("pp413_NELL-995/train.txt",),
                    _archive(
                        f"{_PP413}/NELL-995.zip",
                        "pp413_NELL-995",
                        {
                            "train.txt": (
                                "NELL-995/train.txt",
                                "826606112803d19cef310b45a908e6793d89c0ce99fed60d71a9c2095b71d8f6",
                            ),
                            "valid.txt": (
                                "NELL-995/valid.txt",
                                "9c02548083036fd7ccc4ccec649a633fc3a58c544a0d28496cd751c35fef23a8",
                            ),
                            "test.txt": (
                                "NELL-995/test.txt",
                                "09984fa351609e449a4bef5dc45d8c358eb12e4e6aae4e11b9af9ba19b96e0ef",
                            ),
                        },
                    )
                    + _github(
                        "deepakn97/relationPrediction",
                        "master",
                        "data/NELL-995",
                        _KBGAT_NELL,
                        "KBGAT_NELL-995",
                    ),
                ),
            ),
            paper={"rules": 234, "corpus": 18177, "f_r": 4351, "f_g": 4764, "test": 815},
        ),
    )
}


def custom_spec(name: str, config: CustomKG) -> DatasetSpec:
    """A dataset from params.yaml `ingest.custom.<name>`: the generic TSV/CSV reader."""
    reader = partial(
        readers.read_generic, delimiter=config.delimiter, time_format=config.time_format
    )
    return DatasetSpec(
        name=name,
        mirror_dir=name,
        kind="temporal" if config.time_format else "static",
        description=f"user KG at {config.path}",
        sources=(Source("generic", reader, ()),),
        local_path=Path(config.path).expanduser(),
    )


def known_datasets(ingest: IngestSettings | None = None) -> list[str]:
    """Every dataset name a run may choose: the registry plus `ingest.custom`'s KGs."""
    custom = ingest.custom if ingest is not None else {}
    return list(DATASETS) + [name for name in custom if name not in DATASETS]


def get_spec(name: str, ingest: IngestSettings | None = None) -> DatasetSpec:
    """Look a dataset up by name (`ingest.custom` first); unknown names list what is known, and
    a name that is not an identifier is refused (it becomes data/<name>/ and a command
    argument)."""
    check_dataset_name(name)
    custom = ingest.custom if ingest is not None else {}
    if name in custom:
        return custom_spec(name, custom[name])
    if name in DATASETS:
        return DATASETS[name]
    known = ", ".join(known_datasets(ingest))
    raise UnknownDatasetError(f"unknown dataset {name!r}; known datasets: {known}")
