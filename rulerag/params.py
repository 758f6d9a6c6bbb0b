"""params.yaml, read once into one typed, frozen `Params`, with every rule between sections.

Each section is loaded strictly by its settings class, which lives beside the code it configures
(`rulerag.settings.load_settings`: unknown keys, types, ranges, choices). What no single
section can check lives here, once, for every reader:

* the stages (`pipeline_steps.common.stage_inputs` calls `load_params`),
* `make run`'s check before DVC starts (`rulerag.orchestration.params_check`),
* an Airflow run conf, checked as the params.yaml it would produce (`run_conf.validate_run_conf`).

The rules between sections (`cross_section_problems`):

* `generation.max_rules` ≤ `build_benchmark.rule_selection.top_n` (the benchmark selects at
  most top_n rules per query; asking for more would silently get fewer),
* every `qa.rows` entry is a grid row that untrained retrieval and the base generator can
  answer,
* `generalisation` trains an RGFT query encoder, so `generation.retriever` must be dense when
  it runs on any dataset,
* `export.datasets` are datasets of the run, and `export.retriever` is an encoder of
  `retrieve.finetune` (export reads its fine-tuned query encoder),
* on the run's static datasets only, `apply_rules.aggregation: nrnoisy_or`; with static rules
  with constants, an `apply_rules.discrimination_bound`; and `mine_rules.splits` without test
  (`apply_rules` applies a static KG's rules to those splits and ranks its test facts),
* every dataset name (`datasets`, `qa.datasets`, `generalisation.datasets`, `ingest.custom`)
  follows the one rule of `rulerag.settings.check_dataset_name`, and `datasets` /
  `generalisation.datasets` name KGs the registry or `ingest.custom` knows.

The library below `pipeline_steps/` receives a section's settings (or a part of one), never the
mapping; `Params.section_values` gives a section as written, only for provenance and MLflow.

Sections load when first read, and their loaders are imported by name then: DVC reruns a stage
when a module it imports changes (dvc.yaml's code deps are each stage's import closure), so a
stage that reads `ingest` must not import the generation code just to type-check the file. A
stage reads the sections it needs, each checked strictly with every rule it takes part in;
`check_all` (params_check, the Airflow conf validator) reads them all. A rule runs when a stage
reads a section whose value it constrains (`generation.max_rules`: the generation stages), so a
stage that only builds the benchmark does not load the generation settings to check it.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rulerag.settings import (
    SettingsError,
    check_dataset_name,
    read_settings_yaml,
    repeated_name,
    short_repr,
)

if TYPE_CHECKING:  # the section types, imported when a section is read (see the docstring)
    from rulerag.benchmark.settings import BuildBenchmarkSettings
    from rulerag.experiments.settings import GeneralisationSettings
    from rulerag.export.settings import ExportSettings
    from rulerag.generation.r2ag.settings import R2AGSettings
    from rulerag.generation.settings import GenerationSettings
    from rulerag.kg.settings import IngestSettings
    from rulerag.qa.settings import QASettings
    from rulerag.retrieval.settings import (
        IndexSettings,
        RetrieveSettings,
        TrainRetrieverSettings,
    )
    from rulerag.rule_retrieval.settings import RuleRetrievalSettings
    from rulerag.rules.settings import ApplySettings, MineRulesSettings
    from rulerag.serving.settings import ServeSettings

__all__ = [
    "OTHER_KEYS",
    "RULES",
    "SECTIONS",
    "Params",
    "load_params",
    "parse_params",
    "read_params_file",
    "section_loader",
]

#: params.yaml section -> "module:loader" of its settings class (imported when read)
SECTIONS: dict[str, str] = {
    "ingest": "rulerag.kg.settings:ingest_settings",
    "mine_rules": "rulerag.rules.settings:mine_rules_settings",
    "build_benchmark": "rulerag.benchmark.settings:build_benchmark_settings",
    "index": "rulerag.retrieval.settings:index_settings",
    "train_retriever": "rulerag.retrieval.settings:train_retriever_settings",
    "retrieve": "rulerag.retrieval.settings:retrieve_settings",
    "generation": "rulerag.generation.settings:generation_settings",
    "r2ag": "rulerag.generation.r2ag.settings:r2ag_settings",
    "apply_rules": "rulerag.rules.settings:apply_rules_settings",
    "rule_retrieval": "rulerag.rule_retrieval.settings:rule_retrieval_settings",
    "qa": "rulerag.qa.settings:qa_settings",
    "generalisation": "rulerag.experiments.settings:generalisation_settings",
    "export": "rulerag.export.settings:export_settings",
    "serve": "rulerag.serving.settings:serve_settings",
}
#: top-level keys that are not a stage's section
OTHER_KEYS = ("datasets",)


def section_loader(section: str) -> Callable[[Any], Any]:
    """The function that reads `section` into its settings object."""
    module, _, name = SECTIONS[section].partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Params:
    """The whole of params.yaml, each section as its settings, checked across sections."""

    datasets: tuple[str, ...] = field(
        metadata={
            "help": (
                "Datasets that `dvc repro` builds: each foreach stage runs once per name here. "
                "Known names: icews14, yago, wiki, fb15k237, nell995 (rulerag/kg/registry.py) and "
                "any key of ingest.custom below. The default is the paper's first benchmark, "
                "RuleQA-I."
            )
        },
    )
    #: the file as plain data (deep-copied; never handed to the library)
    _values: Mapping[str, Any] = field(repr=False, compare=False)
    where: str = "params.yaml"
    #: whether reading a section runs its rules (`_rules_beside` reads them without, then
    #: runs the ones it can)
    _rules: bool = field(default=True, repr=False, compare=False)

    @cached_property
    def ingest(self) -> IngestSettings:
        return self._section("ingest")

    @cached_property
    def mine_rules(self) -> MineRulesSettings:
        return self._section("mine_rules")

    @cached_property
    def build_benchmark(self) -> BuildBenchmarkSettings:
        return self._section("build_benchmark")

    @cached_property
    def index(self) -> IndexSettings:
        return self._section("index")

    @cached_property
    def train_retriever(self) -> TrainRetrieverSettings:
        return self._section("train_retriever")

    @cached_property
    def retrieve(self) -> RetrieveSettings:
        return self._section("retrieve")

    @cached_property
    def generation(self) -> GenerationSettings:
        return self._section("generation")

    @cached_property
    def r2ag(self) -> R2AGSettings:
        return self._section("r2ag")

    @cached_property
    def apply_rules(self) -> ApplySettings:
        return self._section("apply_rules")

    @cached_property
    def rule_retrieval(self) -> RuleRetrievalSettings:
        return self._section("rule_retrieval")

    @cached_property
    def qa(self) -> QASettings:
        return self._section("qa")

    @cached_property
    def generalisation(self) -> GeneralisationSettings:
        return self._section("generalisation")

    @cached_property
    def export(self) -> ExportSettings:
        return self._section("export")

    @cached_property
    def serve(self) -> ServeSettings:
        return self._section("serve")

    def section_values(self, section: str) -> Any:
        """A section as params.yaml writes it (a deep copy): what outputs record as their
        provenance and MLflow logs as params, so that these read like the file."""
        if section not in self._values:
            raise KeyError(f"params.yaml has no section {section!r}")
        return copy.deepcopy(self._values[section])

    def known_datasets(self) -> list[str]:
        """Every KG a run may name: the registry's and `ingest.custom`'s."""
        return self.ingest.known_datasets()

    def check_all(self) -> Params:
        """Read every section, so that every rule between them is checked too; the problems
        of every section are reported at once (a Trigger form with two bad overrides in two
        sections used to hear of the first only), with the rules a bad value kept from
        running (`_rules_beside`)."""
        problems: list[str] = []
        keys: list[str] = []
        for section in SECTIONS:
            try:
                getattr(self, section)
            except SettingsError as err:
                problems.append(str(err))
                keys.extend(err.keys)
        if problems:
            problems += [f"{self.where}: {p}" for p in self._rules_beside(keys)]
            raise SettingsError("; ".join(dict.fromkeys(problems)), tuple(keys))
        return self

    def _rules_beside(self, bad: list[str]) -> list[str]:
        """The problems of the rules between sections that a bad value elsewhere in a section
        they read kept from running (a section with an error loads no settings, so
        `generation.max_rules` > `top_n` went unsaid while `generation.test_queries` was
        wrong): every section read again with the `bad` keys left at their defaults, and each
        rule that reads none of those keys run on it. Nothing when that cannot be done (a
        problem without a key, or one left after the bad keys are dropped)."""
        if not bad:
            return []
        values = copy.deepcopy(dict(self._values))
        for key in bad:
            _drop_key(values, key)
        view = Params(self.datasets, values, self.where, _rules=False)
        try:
            for section in SECTIONS:
                getattr(view, section)
        except (SettingsError, ValueError, TypeError, KeyError):
            return []  # SettingsError is a ValueError; a loader may trip on a dropped key
        said = self.__dict__.get("_said", set())
        return [
            problem
            for rule in RULES
            if not any(_touches(read, key) for read in rule.reads for key in bad)
            for problem in rule.check(view)
            if problem not in said
        ]

    def _section(self, section: str) -> Any:
        settings = section_loader(section)(self._values[section])
        self.__dict__[section] = settings  # cached before the rules below read it back
        if not self._rules:
            return settings
        problems = [p for rule in RULES if section in rule.sections for p in rule.check(self)]
        if problems:
            self.__dict__.setdefault("_said", set()).update(problems)
            raise SettingsError(f"{self.where}: " + "; ".join(problems))
        return settings


def read_params_file(path: str | Path) -> dict[str, Any]:
    """params.yaml as plain data, parsed as DVC parses it (ruamel, YAML 1.2, safe), within the
    bounds of `rulerag.settings.read_settings_yaml` (its size, its nesting, its aliases'
    expansion: a 1.4 KB alias bomb is refused here, naming the file and line)."""
    from ruamel.yaml.error import YAMLError

    try:
        data = read_settings_yaml(path)
    except YAMLError as err:
        raise SettingsError(f"{path}: not valid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of sections, not {type(data).__name__}")
    return data


def load_params(path: str | Path) -> Params:
    """Read a params file (`parse_params`); sections are checked as they are read."""
    return parse_params(read_params_file(path), str(path))


def parse_params(
    values: Mapping[str, Any], where: str = "params.yaml", *, check_all: bool = False
) -> Params:
    """`values` (a params.yaml as plain data) as `Params`: every section present, the dataset
    names valid; with `check_all`, every section loaded and every rule checked (else each
    section when first read). SettingsError names the first problem's key."""
    _require_sections(values, where)
    datasets = values["datasets"]
    if not isinstance(datasets, list) or not datasets:
        raise SettingsError(f"{where}: datasets must be a non-empty list of names")
    names = tuple(check_dataset_name(name) for name in datasets)
    repeated = repeated_name(names)
    if repeated:
        raise SettingsError(f"{where}: datasets: {repeated}", ("datasets",))
    params = Params(
        datasets=names,
        _values=copy.deepcopy(dict(values)),
        where=where,
    )
    return params.check_all() if check_all else params


# ---------------------------------------------------------------------------------------------
# The rules between sections: each names the sections it reads and returns its problems.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A check across sections, run when one of `sections` (those whose stages use the value
    it constrains) is read, and by `check_all`. `reads`: the dotted keys (or whole sections)
    whose values it looks at, so that `check_all` can still run it when another key of those
    sections is wrong."""

    sections: tuple[str, ...]
    check: Callable[[Params], list[str]]
    reads: tuple[str, ...]


def _touches(a: str, b: str) -> bool:
    """One dotted key equals the other or is a parent of it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _drop_key(values: dict[str, Any], key: str) -> None:
    """Remove a dotted key from nested mappings (its default stands in; a whole section
    becomes all defaults); a key that is not there, or runs through a list, is left alone."""
    if key in SECTIONS:
        values[key] = {}
        return
    *parents, last = key.split(".")
    if not parents:
        return
    node: Any = values
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _max_rules(params: Params) -> list[str]:
    """The benchmark selects at most `top_n` rules per query: asking for more is an error,
    not a silent cap."""
    max_rules = params.generation.max_rules
    top_n = params.build_benchmark.rule_selection.top_n
    if max_rules is not None and max_rules > top_n:
        return [
            f"generation.max_rules is {max_rules}, but the benchmark selects at most "
            f"build_benchmark.rule_selection.top_n = {top_n} rules per query; lower max_rules "
            "(null takes every selected rule) or raise top_n and rebuild"
        ]
    return []


def _qa_rows(params: Params) -> list[str]:
    """`qa.rows` are grid rows a QA set can answer (`qa.settings.check_qa_rows`)."""
    generation = params.generation
    try:
        params.qa.check_rows(generation.grid, generation.decoding)
    except SettingsError as err:
        return [str(err)]
    return []


def _qa_rule_bank(params: Params) -> list[str]:
    """qa_rag reads `qa.rule_bank`'s mined bank, which only a dataset of the run has."""
    qa = params.qa
    if qa.datasets and qa.rule_bank not in params.datasets:
        return [
            f"qa.rule_bank {qa.rule_bank!r} is not in datasets ({', '.join(params.datasets)}): "
            "qa_rag reads its mined rule bank"
        ]
    return []


def _generalisation_dense(params: Params) -> list[str]:
    """Generalisation trains an RGFT query encoder for `generation.retriever`."""
    if params.generalisation.datasets and params.generation.retriever == "bm25":
        return [
            "generalisation.datasets is set, but generalisation trains an RGFT query encoder "
            "for generation.retriever, which is bm25; choose a dense retriever or clear "
            "generalisation.datasets"
        ]
    return []


def _known_datasets(params: Params) -> list[str]:
    """`datasets` and `generalisation.datasets` name KGs the registry or `ingest.custom` has."""
    known = params.known_datasets()
    problems = []
    for key, names in (
        ("datasets", params.datasets),
        ("generalisation.datasets", params.generalisation.datasets),
    ):
        problems += [
            f"{key}: unknown dataset {name!r} (known: {', '.join(known)})"
            for name in names
            if name not in known
        ]
    return problems


def _export_retriever(params: Params) -> list[str]:
    """`export` reads the pipeline's outputs for each of its datasets and its retriever's
    fine-tuned query encoder, which only an encoder of `retrieve.finetune` gets (dvc.yaml's
    train_retriever instances)."""
    export, finetune = params.export, params.retrieve.finetune
    problems = [
        f"export.datasets: {name!r} is not in datasets ({', '.join(params.datasets)}): export "
        "reads the outputs the pipeline makes for it"
        for name in export.datasets
        if name not in params.datasets
    ]
    if export.datasets and export.retriever not in finetune:
        problems.append(
            f"export.retriever {export.retriever!r} is not in retrieve.finetune "
            f"({', '.join(finetune)}): export reads its fine-tuned query encoder"
        )
    return problems


def _served_row(params: Params) -> list[str]:
    """`package_model` packs a row the grid runs (its figures decide the `champion` alias)
    and answers with it live: a local generator (the base model or a trained variant),
    greedy decoding, no chain and no rule-derived evidence."""
    generation, name = params.generation, params.serve.row
    if name is None:
        return []
    if name not in generation.configs:
        return [
            f"serve.row {name!r} is not in generation.configs ({', '.join(generation.configs)}): "
            "package_model packs a row the grid runs (serve.row: null switches it off)"
        ]
    row = generation.grid[name]  # generation.configs are grid rows (GenerationSettings)
    why = None
    if row.generator in ("api", "symbolic"):
        why = f"its generator is {row.generator!r}, not a local model"
    elif row.trained and row.generator not in generation.train.variants:
        why = f"its adapter {row.generator!r} is not in generation.train.variants"
    elif row.method is not None:
        why = f"it is a {row.method} chain"
    elif (row.decoding or generation.decoding) != "generate":
        why = "it ranks candidates (decoding: rank)"
    elif row.evidence:
        why = "it adds rule-derived evidence"
    if why:
        return [
            f"serve.row {name!r} cannot be served: {why}; pick a row like rulerag_ft (or null: "
            "package_model registers nothing)"
        ]
    return []


def _run_datasets_of_kind(params: Params, kind: str) -> list[str]:
    """The run's datasets (`datasets`) of one kind, "temporal" or "static"; an unknown name is
    `_known_datasets`' to report, not this one's."""
    known = params.known_datasets()
    return [n for n in params.datasets if n in known and params.ingest.kind(n) == kind]


def _nrnoisy_static(params: Params) -> list[str]:
    """`apply_rules.aggregation: nrnoisy_or` (SAFRAN) clusters static rules only
    (`application.NRNOISY_TEMPORAL` says why); a temporal dataset of the run would stop
    apply_rules at its start."""
    if params.apply_rules.aggregation != "nrnoisy_or":
        return []
    temporal = _run_datasets_of_kind(params, "temporal")
    if temporal:
        return [
            "apply_rules.aggregation: nrnoisy_or (SAFRAN's non-redundant noisy-or) clusters "
            "static rules by the triples they infer on the training graph; a temporal rule's "
            f"predictions depend on the query time, and datasets {', '.join(temporal)} are "
            "temporal: use noisy_or or max"
        ]
    return []


def _constants_bounded(params: Params) -> list[str]:
    """Static rules with constants are read backwards too (`application`): r(X, c) <= s(X, A)
    answers r(?, c) with every X that has an s-fact, thousands on FB15k-237, for each of
    hundreds of thousands of rules. AnyBURL and SAFRAN bound that set; without a bound one
    apply_rules run on FB15k-237 needs more than 24 GB (docs/results.md), so a static dataset of
    the run with rules with constants, mined or imported from AnyBURL, needs
    `apply_rules.discrimination_bound`."""
    if params.apply_rules.discrimination_bound:
        return []
    static = _run_datasets_of_kind(params, "static")
    imported = params.mine_rules.import_
    kinds = list(params.mine_rules.static.constants.kinds)
    sources = (
        (f"mine_rules.static.constants.kinds {kinds}", static if kinds else []),
        (
            "AnyBURL's rules imported (mine_rules.import)",
            [d for d in static if d in imported and imported[d].format == "anyburl"],
        ),
    )
    return [
        f"apply_rules.discrimination_bound: 0 (no bound) with {what} on static datasets "
        f"{', '.join(datasets)}: a backward-read rule with constants predicts every entity "
        "its body holds for; set a bound (AnyBURL's and SAFRAN's: 1000)"
        for what, datasets in sources
        if datasets
    ]


def _static_history(params: Params) -> list[str]:
    """A static KG's link prediction (`apply_rules`) ranks the test facts and applies the
    rules to the splits they were learned from (`mine_rules.splits`, AnyBURL's and SAFRAN's
    training graph): rules learned from the test facts would read their own answers."""
    if "test" not in params.mine_rules.splits:
        return []
    static = _run_datasets_of_kind(params, "static")
    if static:
        return [
            f"mine_rules.splits {list(params.mine_rules.splits)} holds test, which apply_rules "
            f"evaluates on static datasets {', '.join(static)}: the rules would be applied to "
            "the facts they are asked for; learn them from train (and valid)"
        ]
    return []


_KINDS = ("datasets", "ingest")  # which of the run's datasets are static or temporal
RULES: tuple[Rule, ...] = (
    Rule(
        ("generation",), _max_rules,
        reads=("generation.max_rules", "build_benchmark.rule_selection.top_n"),
    ),
    Rule(("qa",), _qa_rows, reads=("qa", "generation.grid", "generation.decoding")),
    Rule(("qa",), _qa_rule_bank, reads=("qa.datasets", "qa.rule_bank", "datasets")),
    Rule(
        ("generalisation",), _generalisation_dense,
        reads=("generalisation.datasets", "generation.retriever"),
    ),
    Rule(
        ("generalisation",), _known_datasets,
        reads=("datasets", "generalisation.datasets", "ingest"),
    ),
    Rule(("export",), _export_retriever, reads=("export", "datasets", "retrieve.finetune")),
    Rule(("serve",), _served_row, reads=("serve.row", "generation")),
    Rule(("apply_rules",), _nrnoisy_static, reads=("apply_rules.aggregation", *_KINDS)),
    Rule(
        ("apply_rules", "mine_rules"), _constants_bounded,
        reads=(
            "apply_rules.discrimination_bound", "mine_rules.static.constants",
            "mine_rules.import", *_KINDS,
        ),
    ),
    Rule(("apply_rules", "mine_rules"), _static_history, reads=("mine_rules.splits", *_KINDS)),
)  # fmt: skip


def _require_sections(values: Mapping[str, Any], where: str) -> None:
    """Every stage section present and a mapping, no unknown top-level key."""
    if not isinstance(values, Mapping):
        raise SettingsError(f"{where}: expected a mapping of sections, not {type(values).__name__}")
    missing = [s for s in (*SECTIONS, *OTHER_KEYS) if s not in values]
    if missing:
        raise SettingsError(
            f"{where}: missing section {', '.join(map(repr, missing))} (every stage reads its "
            "own; the project's params.yaml shows each with its defaults)"
        )
    empty = [s for s in SECTIONS if not isinstance(values[s], Mapping)]
    if empty:
        raise SettingsError(
            f"{where}: section {', '.join(map(repr, empty))} must be a mapping of its keys "
            f"(got {', '.join(short_repr(values[s]) for s in empty)})"
        )
    unknown = sorted(str(k) for k in values if k not in SECTIONS and k not in OTHER_KEYS)
    if unknown:
        raise SettingsError(
            f"{where}: unknown top-level key {', '.join(map(short_repr, unknown))} "
            f"(known: {', '.join([*OTHER_KEYS, *SECTIONS])})"
        )
