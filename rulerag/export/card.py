"""The dataset card (README.md of the Hugging Face folder): what each config holds, where the
KG came from and under which license, how to cite, and how this copy was built.

Licenses are those the source repositories state (../shared/kg/README.md records them); where a
source states none, the card says so instead of guessing. Citations are the paper's own
references for the KGs (RuleRAG arXiv version, Section 2 and its bibliography).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from rulerag import markdown
from rulerag.export.huggingface import CHECKSUMS, ConfigTable, config_split

__all__ = ["KG_SOURCES", "KGSource", "card_markdown", "kg_source"]


@dataclass(frozen=True)
class KGSource:
    """Where a RuleQA set's KG comes from: its name, the files' repositories and licenses, and
    the KG's citation as the RuleRAG paper gives it."""

    benchmark: str
    kg: str
    sources: tuple[tuple[str, str], ...]  # (repository, license as it states it)
    citation: str


_UNSTATED = "no license stated in the repository"
KG_SOURCES: dict[str, KGSource] = {
    "icews14": KGSource(
        "RuleQA-I",
        "ICEWS14",
        (("github.com/liu-yushan/TLogic (data/icews14)", "Apache-2.0"),),
        "García-Durán, Dumančić and Niepert. Learning sequence encoders for temporal knowledge "
        "graph completion. EMNLP 2018, pp. 4816-4821.",
    ),
    "yago": KGSource(
        "RuleQA-Y",
        "YAGO",
        (("github.com/INK-USC/RE-Net (data/YAGO)", _UNSTATED),),
        "Mahdisoltani, Biega and Suchanek. YAGO3: A knowledge base from multilingual "
        "Wikipedias, 2013. https://hal-imt.archives-ouvertes.fr/hal-01699874/",
    ),
    "wiki": KGSource(
        "RuleQA-W",
        "WIKI",
        (
            ("github.com/waltbai/TKG-forecasting-datasets (WIKI, Wikidata labels)", "CC0-1.0"),
            ("github.com/INK-USC/RE-Net (data/WIKI)", _UNSTATED),
        ),
        "Leblay and Chekol. Deriving validity time in knowledge graph. Companion Proceedings "
        "of The Web Conference 2018, pp. 1771-1776. doi:10.1145/3184558.3191639",
    ),
    "fb15k237": KGSource(
        "RuleQA-F",
        "FB15k-237",
        (
            ("github.com/TimDettmers/ConvE (FB15k-237.tar.gz)", "MIT"),
            ("github.com/pp413/Knowledge_embedding_benchmark_datasets (names)", "Apache-2.0"),
        ),
        "Toutanova and Chen. Observed versus latent features for knowledge base and text "
        "inference. 3rd Workshop on Continuous Vector Space Models and their "
        "Compositionality, 2015, pp. 57-66.",
    ),
    "nell995": KGSource(
        "RuleQA-N",
        "NELL-995",
        (
            ("github.com/pp413/Knowledge_embedding_benchmark_datasets (NELL-995)", "Apache-2.0"),
            ("github.com/deepakn97/relationPrediction (ids)", _UNSTATED),
        ),
        "Xiong, Hoang and Wang. DeepPath: A reinforcement learning method for knowledge graph "
        "reasoning. EMNLP 2017, pp. 564-573.",
    ),
}

RULERAG_CITATION = (
    "Chen et al. RuleRAG: Rule-Guided Retrieval-Augmented Generation with Language Models for "
    "Question Answering (arXiv version). Code: github.com/chenzhongwu20/RuleRAG_ICL_FT"
)

_CONFIG_TEXT = {
    "corpus": "the documents D: each KG link of the corpus splits as one sentence "
    "(`contents`), with its ids (`head`, `relation`, `tail`, `time`) and split",
    "rules": "the rule bank R: mined rules (`text` is the form prompts show), confidences",
    "test": "the test queries Q with their answers and selected rules (`rule_ids`)",
    "f_r": "F_R, retriever fine-tuning: one item per (query, rule) with its oracle documents "
    "(`oracle_doc_ids`, ids of `corpus`)",
    "f_g": "F_G, generator fine-tuning: queries with answers and selected rules",
}


def kg_source(dataset: str) -> KGSource:
    """The dataset's source record; a KG the project does not ship (a user's own) gets one
    that says its license is its owner's."""
    if dataset in KG_SOURCES:
        return KG_SOURCES[dataset]
    return KGSource(
        f"RuleQA ({dataset})",
        dataset,
        (("a user's own KG (params.yaml ingest.custom)", "the KG owner's license"),),
        "(the KG owner's citation)",
    )


def card_markdown(
    dataset: str,
    header: Mapping[str, Any],
    tables: Sequence[ConfigTable],
    stats: Mapping[str, Any],
    build: Mapping[str, Any],
) -> str:
    """README.md: the YAML header, then the card's text. `build` holds `command`, `commit`
    and `params` (the sections the benchmark and the export were made with)."""
    source = kg_source(dataset)
    fmt = str(build["format"])
    lines = [
        "---",
        yaml.safe_dump(dict(header), sort_keys=False, allow_unicode=True).rstrip(),
        "---",
        "",
        f"# {source.benchmark}: RuleQA built from {source.kg}",
        "",
        f"RuleQA benchmark of the RuleRAG paper for the {source.kg} knowledge graph, as the",
        "`rulerag` project's `build_benchmark` stage builds it (the paper's data link is gone;",
        "its code has no builder). Load a config with",
        "",
        "```python",
        "from datasets import load_dataset",
        f'test = load_dataset("path/to/this/folder", "test", split="{config_split("test")}")',
        "```",
        "",
        "## Configs",
        "",
    ]
    lines += markdown.table_lines(
        ["config", "split", "rows", "file", "what it holds"],
        [
            [
                f"`{table.name}`",
                config_split(table.name),
                f"{table.rows:,}",
                f"`{table.filename(fmt)}`",
                _CONFIG_TEXT.get(table.name, ""),
            ]
            for table in tables
        ],
        align="llrll",
    )
    paper = stats.get("paper") or {}
    lines += [
        "",
        "Features are in the YAML header above (`dataset_info`). "
        f"`{CHECKSUMS}` lists the sha256 of every file (`sha256sum -c {CHECKSUMS}`).",
        "",
        "## Sizes beside the paper's Table 1",
        "",
        *markdown.table_lines(
            [None, "this build", "paper (Table 1)"],
            [
                [label, f"{stats[key]:,}", _number(paper.get(key))]
                for key, label in (
                    ("rules", "rules"),
                    ("corpus", "corpus"),
                    ("f_r", "F_R"),
                    ("f_g", "F_G"),
                    ("test", "test"),
                )
            ],
            align="lrr",
        ),
        "",
        "Why sizes differ from the paper's: the project's docs/results.md (Benchmark sizes).",
        "",
        "## Source KG and licenses",
        "",
        f"{source.kg}, from:",
        "",
    ]
    lines += [f"- {repository}: {license_}" for repository, license_ in source.sources]
    lines += [
        "",
        "The benchmark's own files carry the terms of the KG they are derived from; the card's",
        "`license: other` says so. Check the KG's original terms before redistributing.",
        "",
        "## Citation",
        "",
        f"- The benchmark and method: {RULERAG_CITATION}",
        f"- The KG: {source.citation}",
        "",
        "## How this copy was built",
        "",
        f"- Command: `{build['command']}`",
        f"- Commit: `{build.get('commit') or 'unknown (not a git checkout)'}`",
        "- Params (params.yaml sections):",
        "",
        "```yaml",
        yaml.safe_dump(dict(build["params"]), sort_keys=True, allow_unicode=True).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def _number(value: Any) -> str:
    return f"{int(value):,}" if value is not None else "-"
