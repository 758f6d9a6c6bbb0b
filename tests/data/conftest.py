"""Real benchmarks built from the KG mirror with the project's default params (ingest ->
mine_rules -> build_benchmark in a temporary folder), once per test session and dataset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rulerag.benchmark.build import build_benchmark, table1
from rulerag.kg.registry import DATASETS
from rulerag.params import load_params
from rulerag.rules.bank import rules_frame, select_bank
from rulerag.rules.mining import mine
from tests.helpers import PROJECT, ingest_into


@dataclass
class RealBenchmark:
    name: str
    kg: Any
    bank: pd.DataFrame
    bench: Any
    folder: Path


@pytest.fixture(scope="session")
def real_benchmark(
    kg_mirror: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], RealBenchmark]:
    built: dict[str, RealBenchmark] = {}

    def get(name: str) -> RealBenchmark:
        if name not in built:
            params = load_params(PROJECT / "params.yaml")
            out = tmp_path_factory.mktemp(name)
            kg, _ = ingest_into(DATASETS[name], out, data_dir=kg_mirror, download_dir=out / "dl")
            train = kg.facts[kg.facts["split"] == "train"]
            settings = params.mine_rules
            rules = mine(train, len(kg.entities), len(kg.relations), kg.temporal, settings)
            names = kg.relations.set_index("id")["name"].to_dict()
            bank = select_bank(rules_frame(rules, names), settings.bank)
            paper = DATASETS[name].paper
            config = params.build_benchmark.for_dataset(name, paper)
            bench = build_benchmark(kg, bank, config)
            print(f"\n{name}\n{table1(bench.stats, paper)}")
            built[name] = RealBenchmark(name, kg, bank, bench, out)
        return built[name]

    return get
