"""params.yaml against the settings classes: every stage section loads strictly, shows every
knob its class has (no hidden defaults), and a typo in it fails naming the key and section."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import annotated_types
import pytest
import yaml

from rulerag import params as params_module
from rulerag.benchmark.settings import BuildBenchmarkSettings, build_benchmark_settings
from rulerag.experiments.settings import GeneralisationSettings, generalisation_settings
from rulerag.export.settings import ExportSettings, export_settings
from rulerag.generation.r2ag.settings import R2AGSettings, r2ag_settings
from rulerag.generation.settings import GenerationSettings, generation_settings
from rulerag.kg.settings import IngestSettings, ingest_settings
from rulerag.orchestration import params_check
from rulerag.qa.settings import QASettings, qa_settings
from rulerag.retrieval.settings import (
    IndexSettings,
    RetrieveSettings,
    TrainRetrieverSettings,
    index_settings,
    retrieve_settings,
    train_retriever_settings,
)
from rulerag.rule_retrieval.settings import RuleRetrievalSettings, rule_retrieval_settings
from rulerag.rules.settings import (
    ApplySettings,
    MineRulesSettings,
    apply_rules_settings,
    mine_rules_settings,
)
from rulerag.serving.settings import ServeSettings, serve_settings
from rulerag.settings import SettingsError, settings_fields

PARAMS_FILE = Path(__file__).resolve().parents[2] / "params.yaml"
PARAMS: dict[str, Any] = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))

#: section -> (its settings class, the loader the stages call)
SECTIONS: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "ingest": (IngestSettings, ingest_settings),
    "mine_rules": (MineRulesSettings, mine_rules_settings),
    "build_benchmark": (BuildBenchmarkSettings, build_benchmark_settings),
    "index": (IndexSettings, index_settings),
    "train_retriever": (TrainRetrieverSettings, train_retriever_settings),
    "retrieve": (RetrieveSettings, retrieve_settings),
    "generation": (GenerationSettings, generation_settings),
    "rule_retrieval": (RuleRetrievalSettings, rule_retrieval_settings),
    "r2ag": (R2AGSettings, r2ag_settings),
    "apply_rules": (ApplySettings, apply_rules_settings),
    "qa": (QASettings, qa_settings),
    "generalisation": (GeneralisationSettings, generalisation_settings),
    "export": (ExportSettings, export_settings),
    "serve": (ServeSettings, serve_settings),
}
#: top-level keys that are not a stage's section
NOT_SECTIONS = {"datasets"}


def nested_class(annotation: Any) -> type | None:
    """The settings dataclass a field holds (`X`, `X | None`), else None."""
    if isinstance(annotation, type) and hasattr(annotation, "__dataclass_fields__"):
        return annotation
    found = [a for a in typing.get_args(annotation) if hasattr(a, "__dataclass_fields__")]
    is_union = typing.get_origin(annotation) in (typing.Union, type(int | None))
    return found[0] if is_union and len(found) == 1 else None


def entry_class(annotation: Any) -> type | None:
    """The dataclass of a `dict[str, X]` field's entries (user-named, e.g. index.dense.<name>)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (dict, Mapping) and len(args) == 2:
        return nested_class(args[1])
    return None


def section_text(section: str) -> str:
    """The lines of params.yaml from `section:` to the next top-level key, comments included."""
    text = PARAMS_FILE.read_text(encoding="utf-8")
    match = re.search(rf"^{section}:\n(.*?)(?=^\S)", text + "\nEND", re.MULTILINE | re.DOTALL)
    assert match, f"no section {section} in params.yaml"
    return match.group(1)


def hidden_knobs(cls: type, values: Mapping[str, Any], where: str, text: str) -> list[str]:
    """Fields of `cls` (and of its nested settings) that params.yaml does not show."""
    missing = []
    for key, annotation in settings_fields(cls).items():
        if key not in values:
            missing.append(f"{where}.{key}")
            continue
        nested = nested_class(annotation)
        if nested is not None and isinstance(values[key], Mapping):
            missing += hidden_knobs(nested, values[key], f"{where}.{key}", text)
        entries = entry_class(annotation)
        if entries is not None:
            # user-named entries need not repeat every default, but each knob is documented
            for name in settings_fields(entries):
                if not re.search(rf"\b{name}\b", text):
                    missing.append(f"{where}.{key}.<name>.{name}")
    return missing


def test_every_top_level_key_is_a_known_section() -> None:
    assert set(PARAMS) == set(SECTIONS) | NOT_SECTIONS


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_section_loads_strictly(section: str) -> None:
    cls, load = SECTIONS[section]
    assert isinstance(load(PARAMS[section]), cls)


def test_every_generation_profile_loads() -> None:
    profiles = PARAMS["generation"]["profiles"]
    assert profiles
    for name in profiles:
        assert generation_settings({**PARAMS["generation"], "profile": name}).profile == name


def test_every_dense_encoder_resolves() -> None:
    settings = index_settings(PARAMS["index"])
    encoders = {*PARAMS["retrieve"]["indexes"], *PARAMS["retrieve"]["finetune"]} - {"bm25"}
    assert encoders
    for name in encoders:
        assert settings.encoder(name).max_length > 0
        assert train_retriever_settings(PARAMS["train_retriever"], name).train_config(
            settings.encoder(name).max_length, True
        )


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_no_hidden_knobs(section: str) -> None:
    cls, _ = SECTIONS[section]
    missing = hidden_knobs(cls, PARAMS[section], section, section_text(section))
    assert not missing, "params.yaml does not show " + ", ".join(missing)


def nested_sections(cls: type, values: Mapping[str, Any], where: str) -> list[tuple[str, ...]]:
    """Paths (from the section) of every nested settings mapping, the section itself first."""
    paths: list[tuple[str, ...]] = [()]
    for key, annotation in settings_fields(cls).items():
        nested = nested_class(annotation)
        if nested is not None and isinstance(values.get(key), Mapping):
            for path in nested_sections(nested, values[key], f"{where}.{key}"):
                paths.append((key, *path))
    return paths


def with_typo(values: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out = dict(values)
    if not path:
        out["no_such_knob"] = 1
    else:
        out[path[0]] = with_typo(values[path[0]], path[1:])
    return out


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_unknown_key_fails_naming_key_and_section(section: str) -> None:
    cls, load = SECTIONS[section]
    paths = nested_sections(cls, PARAMS[section], section)
    assert paths
    for path in paths:
        where = ".".join((section, *path))
        with pytest.raises(SettingsError, match=rf"{re.escape(where)}: unknown key 'no_such_knob'"):
            load(with_typo(PARAMS[section], path))


def test_export_max_rules_is_generations_now() -> None:
    """The export's rules per prompt are generation.max_rules: an export.max_rules left in a
    params.yaml is an unknown key whose error names the key that says it now."""
    from rulerag.export.settings import export_settings

    with pytest.raises(
        SettingsError,
        match=r"export: unknown key 'max_rules' .*"
        r"'max_rules' is generation\.max_rules now",
    ):
        export_settings({**PARAMS["export"], "max_rules": 2})


def test_unknown_key_in_a_per_encoder_override_fails_naming_it() -> None:
    section = {**PARAMS["train_retriever"], "overrides": {"minilm": {"batch_sise": 8}}}
    assert train_retriever_settings(section, "mpnet") == train_retriever_settings(section)
    with pytest.raises(SettingsError, match="train_retriever.overrides.minilm: unknown key"):
        train_retriever_settings(section, "minilm")
    good = {**PARAMS["train_retriever"], "overrides": {"minilm": {"batch_size": 8}}}
    assert train_retriever_settings(good, "minilm").batch_size == 8
    assert (
        train_retriever_settings(good, "mpnet").batch_size
        == PARAMS["train_retriever"]["batch_size"]
    )


def test_bad_values_fail_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"mine_rules\.temporal\.walks_per_relation"):
        mine_rules_settings({"temporal": {"walks_per_relation": "many"}})
    with pytest.raises(SettingsError, match=r"retrieve.*splits.*'valid'"):
        retrieve_settings({"splits": ["test", "valid"]})
    with pytest.raises(SettingsError, match=r"index\.sparse.*backend"):
        index_settings({"sparse": {"backend": "lucene"}})
    with pytest.raises(SettingsError, match=r"train_retriever.*positives"):
        train_retriever_settings({"positives": "all"})
    with pytest.raises(SettingsError, match=r"mine_rules\.import\.x.*format"):
        mine_rules_settings({"import": {"x": {"format": "safran", "path": "/r"}}})


# --------------------------------------------------------------------------------------------
# One schema: sections, ranges, the whole file
# --------------------------------------------------------------------------------------------


def test_the_schema_is_the_stages_loaders() -> None:
    """rulerag.params names the loaders the stages read their sections with, for every one."""
    assert set(params_module.SECTIONS) == set(SECTIONS)
    for section, (_, load) in SECTIONS.items():
        assert params_module.section_loader(section) is load


def leaf_fields(cls: type, where: str, seen: set[type]) -> list[tuple[str, Any, Any]]:
    """(dotted name, type, type with extras) of every knob under `cls` that is no nested
    settings class (each class visited once)."""
    if cls in seen:
        return []
    seen.add(cls)
    out = []
    plain_types = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        plain = plain_types[f.name]
        nested = nested_class(plain) or entry_class(plain)
        if nested is not None:
            out += leaf_fields(nested, f"{where}.{f.name}", seen)
        else:
            out.append((f"{where}.{f.name}", plain, extras[f.name]))
    return out


def numeric_fields(cls: type, where: str, seen: set[type]) -> list[tuple[str, Any]]:
    """(dotted name, annotation with extras) of every int/float knob under `cls`."""
    return [
        (name, extra)
        for name, plain, extra in leaf_fields(cls, where, seen)
        if re.search(r"\b(int|float)\b", str(plain))
    ]


def bounded(annotation: Any) -> bool:
    """Every int/float inside the annotation carries a lower bound (ints an upper one too) and
    refuses what is no number of its kind (a bool, an int's string, a non-finite real)."""
    import pydantic

    if typing.get_origin(annotation) is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        if base not in (int, float):
            return True  # a name (DatasetName) as a dict key
        lower = any(isinstance(m, annotated_types.Ge | annotated_types.Gt) for m in meta)
        upper = any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in meta)
        refuses = [True, "3"] if base is int else [True, float("inf"), float("nan")]
        adapter = pydantic.TypeAdapter(annotation)
        strict = all(_refused(adapter, value) for value in refuses)
        return lower and (upper or base is not int) and strict
    if annotation in (int, float):
        return False
    return all(bounded(a) for a in typing.get_args(annotation) if a is not type(None))


def _refused(adapter: Any, value: Any) -> bool:
    import pydantic

    try:
        adapter.validate_python(value)
    except pydantic.ValidationError:
        return True
    return False


def test_every_numeric_knob_has_a_range() -> None:
    """`test_size: -5` or `top_n_per_head: -2` used to be accepted (and 10**100 from a conf)."""
    seen: set[type] = set()
    fields = [
        f for section, (cls, _) in SECTIONS.items() for f in numeric_fields(cls, section, seen)
    ]
    assert len(fields) > 80
    assert [name for name, annotation in fields if not bounded(annotation)] == []


@pytest.mark.parametrize(
    ("section", "values", "where"),
    [
        ("build_benchmark", {"test_size": -5}, "build_benchmark.test_size"),
        ("mine_rules", {"bank": {"top_n_per_head": -2}}, "mine_rules.bank.top_n_per_head"),
        ("mine_rules", {"static": {"max_atoms": 4}}, "mine_rules.static.max_atoms"),
        ("retrieve", {"top_k": 10**100}, "retrieve.top_k"),
        ("train_retriever", {"heldout_fraction": 1.5}, "train_retriever.heldout_fraction"),
        ("build_benchmark", {"rule_selection": {"top_n": "three"}}, "rule_selection.top_n"),
        ("retrieve", {"top_k": [5]}, "retrieve.top_k"),
        ("retrieve", {"top_k": True}, "retrieve.top_k"),
        ("train_retriever", {"lr": float("inf")}, "train_retriever.lr"),
        ("train_retriever", {"temperature": float("nan")}, "train_retriever.temperature"),
        ("build_benchmark", {"seed": "12"}, "build_benchmark.seed"),
        ("train_retriever", {"lr": True}, "train_retriever.lr"),
    ],
)
def test_out_of_range_values_fail_naming_the_key(
    section: str, values: dict[str, Any], where: str
) -> None:
    _, load = SECTIONS[section]
    with pytest.raises(SettingsError, match=re.escape(where)):
        load(values)


def test_a_huge_value_is_shortened_in_the_message() -> None:
    with pytest.raises(SettingsError) as caught:
        retrieve_settings({"rule_query": "x" * 1_000_000})
    assert len(str(caught.value)) < 600 and "characters)" in str(caught.value)


def test_the_whole_file_is_checked() -> None:
    params_check.check_params(PARAMS)
    missing = {k: v for k, v in PARAMS.items() if k != "build_benchmark"}
    with pytest.raises(SettingsError, match="missing section 'build_benchmark'"):
        params_check.check_params(missing)
    with pytest.raises(SettingsError, match="'build_benchmark' must be a mapping"):
        params_check.check_params({**PARAMS, "build_benchmark": None})
    with pytest.raises(SettingsError, match="unknown top-level key 'build_benchmarks'"):
        params_check.check_params({**PARAMS, "build_benchmarks": {}})
    with pytest.raises(SettingsError, match="unknown dataset 'icews15'"):
        params_check.check_params({**PARAMS, "datasets": ["icews15"]})
    with pytest.raises(SettingsError, match=r"build_benchmark\.test_size"):
        params_check.check_params(
            {**PARAMS, "build_benchmark": {**PARAMS["build_benchmark"], "test_size": -5}}
        )


@pytest.mark.parametrize("name", ["x;touch pwned", "../../x", "my kg", "a/b", "", "mykg\n"])
def test_dataset_names_must_be_identifiers(name: str) -> None:
    """A name reaches DVC's shell commands and becomes data/<name>/."""
    custom = {name: {"path": "/tmp"}}
    params = {**PARAMS, "datasets": [name], "ingest": {**PARAMS["ingest"], "custom": custom}}
    with pytest.raises(SettingsError, match="dataset name"):
        params_check.check_params(params)


def test_the_command_line_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert params_check.main([str(PARAMS_FILE)]) == 0
    broken = tmp_path / "params.yaml"
    broken.write_text(yaml.safe_dump({**PARAMS, "retrieve": {**PARAMS["retrieve"], "top_k": 0}}))
    assert params_check.main([str(broken)]) == 2
    assert "retrieve.top_k" in capsys.readouterr().err


def test_stages_refuse_a_params_file_without_a_section(tmp_path: Path) -> None:
    partial = tmp_path / "params.yaml"
    partial.write_text(yaml.safe_dump({k: v for k, v in PARAMS.items() if k != "retrieve"}))
    with pytest.raises(SettingsError, match="missing section 'retrieve'"):
        params_module.load_params(partial)
    params = params_module.load_params(PARAMS_FILE)
    assert params.datasets == tuple(PARAMS["datasets"])
    assert params.section_values("generation") == PARAMS["generation"]


# --------------------------------------------------------------------------------------------
# One typed Params: sections as settings, the rules between sections
# --------------------------------------------------------------------------------------------


def test_params_gives_every_section_as_its_settings_class() -> None:
    params = params_module.parse_params(PARAMS, check_all=True)
    for section, (cls, load) in SECTIONS.items():
        assert isinstance(getattr(params, section), cls)
        assert getattr(params, section) == load(PARAMS[section])
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.datasets = ("yago",)  # type: ignore[misc]
    copy = params.section_values("generation")
    copy["model"] = "changed"
    assert params.section_values("generation")["model"] == PARAMS["generation"]["model"]


def with_values(**sections: Mapping[str, Any]) -> dict[str, Any]:
    """PARAMS with some keys of some sections replaced."""
    out = dict(PARAMS)
    for section, values in sections.items():
        out[section] = {**PARAMS[section], **values}
    return out


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            with_values(generation={"max_rules": 5}),
            r"generation\.max_rules is 5, but .*rule_selection\.top_n = 3",
        ),
        (with_values(qa={"rows": ["rulerag_ft"]}), r"qa\.rows: 'rulerag_ft' cannot answer"),
        (with_values(qa={"rows": ["no_such_row"]}), r"qa\.rows: 'no_such_row' is not a"),
        (
            with_values(generation={"retriever": "bm25"}, generalisation={"datasets": ["icews14"]}),
            r"generalisation trains an RGFT query encoder",
        ),
        (
            with_values(generalisation={"datasets": ["icews15"]}),
            r"generalisation\.datasets: unknown dataset 'icews15'",
        ),
        (
            with_values(qa={"datasets": ["toyqa"], "rule_bank": "yago"}),
            r"qa\.rule_bank 'yago' is not in datasets",
        ),
        (
            with_values(export={"datasets": ["icews14"], "retriever": "mpnet"}),
            r"export\.retriever 'mpnet' is not in retrieve\.finetune \(minilm\)",
        ),
        (
            with_values(export={"datasets": ["yago"]}),
            r"export\.datasets: 'yago' is not in datasets \(icews14\)",
        ),
    ],
)
def test_rules_between_sections(values: dict[str, Any], message: str) -> None:
    """Each rule fails the whole-file check and every stage reading one of its sections."""
    with pytest.raises(SettingsError, match=message):
        params_check.check_params(values)
    rule = next(r for r in params_module.RULES if _fails(r, values))
    for section in rule.sections:
        with pytest.raises(SettingsError, match=message):
            getattr(params_module.parse_params(values), section)


def _fails(rule: params_module.Rule, values: dict[str, Any]) -> bool:
    try:
        return bool(rule.check(params_module.parse_params(values)))
    except SettingsError:
        return True


def test_a_stage_reads_only_its_sections() -> None:
    """A stage that reads `ingest` loads no other section (the others may be broken for it,
    and their modules are not among its DVC deps)."""
    values = with_values(generation={"prompt_style": "no_such_style"})
    params = params_module.parse_params(values)
    assert params.ingest.duplicates == PARAMS["ingest"]["duplicates"]
    with pytest.raises(SettingsError, match="prompt_style"):
        params.generation  # noqa: B018
    with pytest.raises(SettingsError, match="prompt_style"):
        params_check.check_params(values)


def string_fields(cls: type, where: str, seen: set[type]) -> list[str]:
    """Dotted names of every plain `str` knob under `cls` (a Literal, a DatasetName: not plain)."""
    return [name for name, _, extra in leaf_fields(cls, where, seen) if extra in (str, str | None)]


#: knobs whose value is free text, not a choice: names of models, encoders, folders, profiles
#: (checked against their section's `profiles`), retrieval configurations and grid generators
#: (checked against what the grid and the variants define), strptime formats
FREE_TEXT = {
    "ingest.custom.path", "ingest.custom.time_format",
    "build_benchmark.rule_selection.encoder", "build_benchmark.rule_selection.retriever",
    "index.sparse.stemmer", "index.dense.model", "index.dense.query_model",
    "index.dense.doc_model",
    "generation.profile", "generation.model", "generation.retriever", "generation.dtype",
    "generation.api.base_url", "generation.api.model",
    "generation.api.airflow_conn_id", "generation.grid.name", "generation.grid.retrieval",
    "generation.grid.generator", "generation.train.variants.retrieval",
    "generation.train.deepspeed",
    "r2ag.profile", "r2ag.encoder", "r2ag.variants.retrieval",
    "rule_retrieval.profile", "rule_retrieval.llm.model", "rule_retrieval.llm.dtype",
    "rule_retrieval.llm.quantization",
    "mine_rules.import_.path",
    "qa.dir", "qa.retriever",
}  # fmt: skip


def test_every_choice_knob_is_a_literal() -> None:
    """A knob with a fixed set of values says so in its type (pydantic then names the choices
    in the error); a new plain-string knob must be a Literal or be listed as free text."""
    seen: set[type] = set()
    found = {f for section, (cls, _) in SECTIONS.items() for f in string_fields(cls, section, seen)}
    assert found - FREE_TEXT == set(), "make these Literals, or list them in FREE_TEXT"
    assert FREE_TEXT - found == set(), "FREE_TEXT names knobs that are no longer plain strings"


def test_choice_constants_follow_their_literals() -> None:
    from rulerag.generation.r2ag.features import FEATURES
    from rulerag.generation.r2ag.settings import Feature

    assert typing.get_args(Feature) == FEATURES
    with pytest.raises(SettingsError, match=r"index\.faiss\.kind: Input should be 'flat'"):
        index_settings({"faiss": {"kind": "annoy"}})
    with pytest.raises(SettingsError, match=r"generation\.grid\.x\.decoding: Input should be"):
        generation_settings({"grid": {"x": {"retrieval": "rg", "decoding": "beam"}}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            with_values(
                build_benchmark={"corpus": {"splits": ["train"], "filter": {"x": "nonee"}}}
            ),
            r"build_benchmark\.corpus\.filter\.x: Input should be 'none'",
        ),
        (with_values(ingest={"duplicates": "maybe"}), r"ingest\.duplicates: Input should be"),
        (
            with_values(ingest={"source": {"nell995": "foo"}}),
            r"source\.nell995: 'foo' is not one of nell995's sources",
        ),
        (
            with_values(ingest={"custom": {"nell995": {"path": "/kg"}}}),
            r"custom: \['nell995'\] already name KGs of the registry",
        ),
        (
            with_values(mine_rules={"temporal": {"transition": "foo"}}),
            r"mine_rules\.temporal\.transition: Input should be 'exp' or 'unif'",
        ),
        (
            with_values(generation={"configs": ["standard_rag", "no_such_row"]}),
            r"configs: \['no_such_row'\] are not rows of grid",
        ),
        (
            with_values(build_benchmark={"strata": {"count": 3, "weights": [1]}}),
            r"weights: 1 weights for 3 strata",
        ),
        (
            with_values(build_benchmark={"strata": {"count": 3, "weights": [0, 0, 0]}}),
            r"weights: all zero would draw no test query",
        ),
        (
            with_values(build_benchmark={"corpus": {"splits": ["test"], "filter": "none"}}),
            r"build_benchmark\.corpus\.splits\.0: Input should be 'train' or 'valid'",
        ),
        (with_values(retrieve={"top_k": True}), r"retrieve\.top_k: Input should be a valid int"),
        (
            with_values(train_retriever={"lr": float("inf")}),
            r"train_retriever\.lr: Input should be a finite number",
        ),
        (
            with_values(generation={"max_rules": 10}),
            r"generation\.max_rules is 10, but .*\.top_n = 3",
        ),
    ],
)
def test_values_that_used_to_pass_the_check_fail_it_naming_the_key(
    values: dict[str, Any], message: str
) -> None:
    """Each passed `params_check` before and failed later (a traceback, an empty output, a
    silently replaced KG): the whole-file check now refuses it with the key."""
    with pytest.raises(SettingsError, match=message):
        params_check.check_params(values)


def test_a_duplicate_key_fails_the_command_line_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = PARAMS_FILE.read_text(encoding="utf-8") + "\ndatasets: [icews14]\n"
    duplicated = tmp_path / "params.yaml"
    duplicated.write_text(text, encoding="utf-8")
    assert params_check.main([str(duplicated)]) == 2
    assert 'found duplicate key "datasets"' in capsys.readouterr().err


def test_rule_retrievals_analyzer_is_auto_by_default() -> None:
    """`auto` picks BM25's analysis by the rule library's script (issue 28, part 7): it is
    the settings' default, params.yaml's value, and its comment names it."""
    assert RuleRetrievalSettings().analyzer == "auto"
    assert PARAMS["rule_retrieval"]["analyzer"] == "auto"
    (line,) = [s for s in section_text("rule_retrieval").splitlines() if "analyzer:" in s]
    assert "auto (by the rules' script)" in line
    from rulerag.retrieval.sparse import ANALYZERS
    from rulerag.rule_retrieval.settings import ANALYZER_CHOICES

    assert tuple(ANALYZER_CHOICES) == ("auto", *ANALYZERS)  # the Literal follows BM25's analyzers
    assert rule_retrieval_settings({"analyzer": "cjk"}).analyzer == "cjk"
    with pytest.raises(SettingsError, match="rule_retrieval.analyzer"):
        rule_retrieval_settings({"analyzer": "french"})


def test_apply_rules_aggregation_is_checked_against_the_datasets() -> None:
    """nrnoisy_or (SAFRAN) clusters static rules only: a temporal dataset of the run is
    refused before any stage runs; an unknown aggregation is refused naming the key."""
    section = {**PARAMS["apply_rules"], "aggregation": "nrnoisy_or"}
    static = {**PARAMS, "apply_rules": section, "datasets": ["fb15k237", "nell995"]}
    params_check.check_params(static)
    with pytest.raises(SettingsError, match=r"apply_rules\.aggregation.*icews14 are temporal"):
        params_check.check_params({**static, "datasets": ["fb15k237", "icews14"]})
    with pytest.raises(SettingsError, match=r"apply_rules.*aggregation.*nrnoisy"):
        params_check.check_params(
            {**PARAMS, "apply_rules": {**PARAMS["apply_rules"], "aggregation": "nrnoisy"}}
        )


def test_static_rules_with_constants_need_a_discrimination_bound() -> None:
    """Read backwards, a rule with constants predicts every entity its body holds for: a static
    dataset with them needs apply_rules.discrimination_bound; a temporal one does not."""
    mine = {**PARAMS["mine_rules"]}
    mine["static"] = {**mine["static"], "constants": {**mine["static"]["constants"],
                                                      "kinds": ["ac1", "ac2", "zero"]}}  # fmt: skip
    unbounded = {**PARAMS, "mine_rules": mine, "datasets": ["fb15k237", "icews14"],
                 "apply_rules": {**PARAMS["apply_rules"], "discrimination_bound": 0}}  # fmt: skip
    with pytest.raises(SettingsError, match=r"discrimination_bound.*fb15k237"):
        params_check.check_params(unbounded)
    params_check.check_params({**unbounded, "datasets": ["icews14"]})
    bounded = {**unbounded["apply_rules"], "discrimination_bound": 1000}
    params_check.check_params({**unbounded, "apply_rules": bounded})


def test_imported_anyburl_rules_need_a_discrimination_bound() -> None:
    """AnyBURL's imported rules have constants too: a static dataset importing them needs the
    bound; an AMIE import or a dataset outside the run does not."""
    mine = {**PARAMS["mine_rules"], "import": {"fb15k237": {"format": "anyburl", "path": "r"}}}
    unbounded = {**PARAMS, "mine_rules": mine, "datasets": ["fb15k237", "icews14"],
                 "apply_rules": {**PARAMS["apply_rules"], "discrimination_bound": 0}}  # fmt: skip
    with pytest.raises(SettingsError, match=r"discrimination_bound.*AnyBURL.*fb15k237"):
        params_check.check_params(unbounded)
    params_check.check_params({**unbounded, "datasets": ["icews14"]})
    amie = {**mine, "import": {"fb15k237": {"format": "amie", "path": "r"}}}
    params_check.check_params({**unbounded, "mine_rules": amie})
    bounded = {**unbounded["apply_rules"], "discrimination_bound": 1000}
    params_check.check_params({**unbounded, "apply_rules": bounded})


def test_static_rules_are_not_learned_from_the_test_facts() -> None:
    """apply_rules applies a static KG's rules to mine_rules.splits and ranks its test facts:
    rules learned from test are refused before any stage runs; a temporal run is not concerned."""
    mine = {**PARAMS["mine_rules"], "splits": ["train", "test"]}
    leaky = {**PARAMS, "mine_rules": mine, "datasets": ["nell995", "icews14"]}
    with pytest.raises(SettingsError, match=r"mine_rules\.splits.*test.*nell995"):
        params_check.check_params(leaky)
    params_check.check_params({**leaky, "datasets": ["icews14"]})
    params_check.check_params({**leaky, "mine_rules": {**mine, "splits": ["train", "valid"]}})


def test_a_rule_between_sections_is_reported_beside_a_bad_value_of_its_section() -> None:
    """A section with a bad value loads no settings, so its rules could not run: check_all
    runs them again with the bad keys at their defaults, unless a rule reads one of those
    (then it says nothing rather than something about a value the user did not write)."""
    values = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))

    def problems(**changes: Any) -> str:
        changed = {**values, "generation": {**values["generation"]}}
        changed["build_benchmark"] = {
            **values["build_benchmark"],
            "rule_selection": {**values["build_benchmark"]["rule_selection"]},
        }
        for key, value in changes.items():
            section, _, rest = key.partition("__")
            node = changed[section]
            *parents, last = rest.split("__")
            for part in parents:
                node = node[part]
            node[last] = value
        with pytest.raises(SettingsError) as caught:
            params_module.parse_params(changed, check_all=True)
        return str(caught.value)

    beside = problems(generation__max_rules=9, generation__test_queries=-1)
    assert "generation.test_queries: Input should be greater than or equal to 1" in beside
    assert "generation.max_rules is 9, but the benchmark selects at most" in beside
    assert beside.count("generation.max_rules is 9") == 1
    # the rule reads top_n, which is wrong: it is not run on top_n's default
    unsaid = problems(generation__max_rules=9, build_benchmark__rule_selection__top_n="x")
    assert "rule_selection.top_n: Input should be a valid integer" in unsaid
    assert "max_rules is 9" not in unsaid
    # said once when its sections are fine
    once = problems(generation__max_rules=9)
    assert once.count("generation.max_rules is 9") == 1


def test_every_rule_reads_keys_params_yaml_has() -> None:
    values = yaml.safe_load(PARAMS_FILE.read_text(encoding="utf-8"))
    for rule in params_module.RULES:
        assert rule.reads, rule.check.__name__
        for key in rule.reads:
            node: Any = values
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, (rule.check.__name__, key)
                node = node[part]
