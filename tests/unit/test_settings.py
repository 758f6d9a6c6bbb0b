"""The strict params.yaml section loader: unknown keys and bad values fail, naming them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import pytest

from rulerag.settings import (
    NOT_A_PARAM,
    SettingsError,
    load_settings,
    param_key,
    settings_fields,
    settings_help,
)


@dataclass(frozen=True)
class Inner:
    walks: int = 200
    lr: float = 1e-5
    lengths: tuple[int, ...] = (1, 2, 3)


@dataclass(frozen=True)
class Outer:
    seed: int = 12
    inner: Inner = field(default_factory=Inner)
    maybe: Inner | None = None
    named: dict[str, Inner] = field(default_factory=dict)
    label: str | None = None


def test_defaults_and_values_are_typed() -> None:
    assert load_settings(Outer, None, "x") == Outer()
    got = load_settings(Outer, {"inner": {"lr": "1e-4", "lengths": [1]}, "seed": 3}, "x")
    assert got.inner == Inner(walks=200, lr=1e-4, lengths=(1,))
    assert got.seed == 3
    got = load_settings(Outer, {"named": {"a": {"walks": 5}}, "maybe": {}}, "x")
    assert got.named == {"a": Inner(walks=5)}
    assert got.maybe == Inner()


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"sead": 1}, "mine_rules: unknown key 'sead'"),
        ({"inner": {"walk": 1}}, "mine_rules.inner: unknown key 'walk'"),
        ({"maybe": {"x": 1}}, "mine_rules.maybe: unknown key 'x'"),
        ({"named": {"a": {"y": 1}}}, "mine_rules.named.a: unknown key 'y'"),
    ],
)
def test_unknown_keys_fail_naming_key_and_section(values, named) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(Outer, values, "mine_rules")
    assert named in str(err.value)
    assert "known:" in str(err.value)


def test_bad_values_fail_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"mine_rules\.inner\.walks: .*'many'"):
        load_settings(Outer, {"inner": {"walks": "many"}}, "mine_rules")
    with pytest.raises(SettingsError, match="must be a mapping"):
        load_settings(Outer, [1, 2], "mine_rules")


@dataclass(frozen=True)
class Keyword:
    seed: int = 1
    import_: Annotated[dict[str, Inner], param_key("import")] = field(default_factory=dict)


def test_a_keyword_key_reads_into_its_underscored_field() -> None:
    assert set(settings_fields(Keyword)) == {"seed", "import"}
    got = load_settings(Keyword, {"import": {"a": {"walks": 3}}}, "mine_rules")
    assert got.import_ == {"a": Inner(walks=3)}
    assert load_settings(Keyword, None, "mine_rules") == Keyword()
    with pytest.raises(SettingsError, match="mine_rules.import.a: unknown key 'x'"):
        load_settings(Keyword, {"import": {"a": {"x": 1}}}, "mine_rules")
    with pytest.raises(SettingsError, match="mine_rules: unknown key 'import_'"):
        load_settings(Keyword, {"import_": {}}, "mine_rules")


@dataclass(frozen=True)
class Hidden:
    """A field params.yaml does not set (its value from the data, or a caller)."""

    walks: int = field(default=200, metadata={"help": "walks"})
    temporal: bool | None = field(default=True, metadata=NOT_A_PARAM)
    ties: str = field(default="last", metadata={"param": False, "help": "not shown"})


@dataclass(frozen=True)
class HoldsHidden:
    inner: Hidden = field(default_factory=Hidden)
    named: dict[str, Hidden] = field(default_factory=dict)


def test_a_field_params_yaml_does_not_set_is_no_key() -> None:
    assert set(settings_fields(Hidden)) == {"walks"}
    assert settings_help(Hidden) == {"walks": "walks"}
    assert load_settings(Hidden, {"walks": 3}, "x") == Hidden(walks=3)
    assert load_settings(Hidden, {}, "x", given={"temporal": None}).temporal is None
    with pytest.raises(SettingsError) as err:
        load_settings(Hidden, {"temporal": False}, "apply_rules")
    assert "apply_rules: unknown key 'temporal' (known: walks)" in str(err.value)
    assert err.value.keys == ("apply_rules.temporal",)
    for values, named in [
        ({"inner": {"ties": "first"}}, "x.inner: unknown key 'ties'"),
        ({"named": {"a": {"temporal": True}}}, "x.named.a: unknown key 'temporal'"),
    ]:
        with pytest.raises(SettingsError, match=named):
            load_settings(HoldsHidden, values, "x")
    # said beside the other problems of the section, not instead of them
    with pytest.raises(SettingsError) as err:
        load_settings(Hidden, {"walks": "many", "ties": "first"}, "x")
    assert "x.walks:" in str(err.value) and "x: unknown key 'ties'" in str(err.value)


def test_unknown_keys_are_pydantics_extra_forbid_with_a_did_you_mean() -> None:
    """No hand-written key check: every class load_settings reads forbids extra keys (its
    nested classes too), and the message names the keys, the known ones and the closest."""
    from rulerag.settings import SETTINGS_CONFIG

    assert SETTINGS_CONFIG == {"extra": "forbid"}
    with pytest.raises(SettingsError) as err:
        load_settings(Outer, {"sead": 1, "inner": {"walk": 1, "lenghts": [1]}}, "mine_rules")
    message = str(err.value)
    assert "mine_rules: unknown key 'sead' (known: inner, label, maybe, named, seed); " in message
    assert "did you mean 'seed'?" in message
    assert "mine_rules.inner: unknown key 'walk', 'lenghts' (known: lengths, lr, walks)" in message
    assert "'walk': did you mean 'walks'?; 'lenghts': did you mean 'lengths'?" in message
    assert set(err.value.keys) == {
        "mine_rules.sead",
        "mine_rules.inner.walk",
        "mine_rules.inner.lenghts",
    }


def test_an_unknown_key_is_said_beside_a_bad_value() -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(Outer, {"seed": "x", "named": {"a": {"y": 1}}}, "s")
    assert "s.seed: " in str(err.value)
    assert "s.named.a: unknown key 'y' (known: lengths, lr, walks)" in str(err.value)
