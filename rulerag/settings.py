"""One strict way from a `params.yaml` section to a typed settings object.

Every stage reads its knobs through `load_settings(SettingsClass, params["section"],
"section")`. The settings class (a frozen dataclass next to the code it configures) is the one
place each default lives; params.yaml shows every field (a test checks that no knob is hidden).

Strict, because a typo in params.yaml must not silently fall back to a default:

* an unknown key fails, naming the key, its section and the known keys;
* a value of the wrong type fails, naming the key and the value (pydantic validates and
  converts, so `"2e-5"`, which a YAML 1.1 reader leaves a string, still becomes a float; a
  bool, an infinite or NaN real and a string for an integer are refused);
* nested dataclasses (and `dict[str, Dataclass]`, `Dataclass | None`) are checked the same way.

Numbers carry their range in their type (`Count`, `Positive`, `Fraction`...): `test_size: -5`
or `10**100` fails like a wrong type does, and the Airflow run conf is checked with the same
classes (`rulerag.params_schema`). A test checks that every numeric knob has a range.

A key that is a Python keyword (`mine_rules.import`) is a field with a trailing underscore
whose annotation names the key: `import_: Annotated[dict[str, X], param_key("import")]`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from annotated_types import Ge, Gt, Le
from pydantic import AfterValidator, AllowInfNan, BeforeValidator, Strict

from rulerag.errors import InputError
from rulerag.redact import redact_url

__all__ = [
    "DATASET_NAME_RE",
    "Count",
    "DatasetName",
    "NAME_RE",
    "Name",
    "Fraction",
    "NonNegative",
    "Positive",
    "PositiveReal",
    "Seed",
    "STRICT_INT",
    "SettingsError",
    "apply_profile",
    "check_dataset_name",
    "check_name",
    "deep_merge",
    "load_settings",
    "param_key",
    "settings_fields",
]

T = TypeVar("T")

#: the largest integer any knob takes (a count, a size, a step): what is bigger is a mistake
MAX_INT = 2**31 - 1


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a yes/no value, not a number")
    return value


#: Numbers are taken as numbers only: `true` is no count (YAML reads it as a bool, which
#: pydantic would otherwise turn into 1), "3" is no count, and `.inf` / `.nan` are no rate. A
#: real may still be written as a string ("2e-5", as YAML 1.1 readers leave it).
STRICT_INT = Strict()
FINITE = (BeforeValidator(_no_bool), AllowInfNan(False))
#: a count or size where 0 means "none" or "all" (each field's comment says which)
Count = Annotated[int, STRICT_INT, Ge(0), Le(MAX_INT)]
#: a count or size of at least one
Positive = Annotated[int, STRICT_INT, Ge(1), Le(MAX_INT)]
#: a random seed (numpy takes 0 .. 2**32 - 1)
Seed = Annotated[int, STRICT_INT, Ge(0), Le(2**32 - 1)]
#: a share, probability, confidence or ratio in [0, 1]
Fraction = Annotated[float, *FINITE, Ge(0.0), Le(1.0)]
#: a real that may be 0 (a threshold, a decay, a back-off)
NonNegative = Annotated[float, *FINITE, Ge(0.0)]
#: a real above 0 (a learning rate, a temperature, a time-out)
PositiveReal = Annotated[float, *FINITE, Gt(0.0)]


class SettingsError(InputError):
    """A params.yaml section that does not fit its settings class. `keys`: the dotted keys
    whose values are wrong (`generation.test_queries`), where the loader knows them (a rule
    between sections, or a file that is no mapping, names none)."""

    def __init__(self, message: str, keys: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.keys = tuple(keys)


#: The one name rule, for every name that becomes part of a DVC stage's name (datasets, indexes,
#: encoders, grid rows, variants: dvc.yaml's foreach / matrix items), a folder (data/<name>/), an
#: MLflow experiment or an Airflow task id: a letter, then letters, digits or '_' (at most 64).
#: No '-' either: a matrix stage's name joins its items with '-' (`index@icews14-minilm`), and
#: the stage script reads its items back from that name (`pipeline_steps.common`).
DATASET_NAME_RE = NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def check_name(name: object, what: str = "name") -> str:
    """`name` if it follows the name rule, else SettingsError saying the rule."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SettingsError(
            f"invalid {what} {str(name)[:80]!r}: a {what} is a letter followed by letters, "
            "digits or '_' (at most 64), since it becomes part of a stage's name, a folder "
            "(data/<name>/) and an argument of DVC's commands"
        )
    return name


def check_dataset_name(name: object) -> str:
    """`name` if it is a valid dataset name (the name rule), else SettingsError."""
    return check_name(name, "dataset name")


def _validator(what: str) -> AfterValidator:
    def check(name: str) -> str:
        try:
            return check_name(name, what)
        except SettingsError as err:  # pydantic reports a ValueError as this field's error
            raise ValueError(str(err)) from None

    return AfterValidator(check)


#: a dataset name as a settings field's type (the name rule)
DatasetName = Annotated[str, _validator("dataset name")]
#: any other name that reaches a stage's name: an index, an encoder, a grid row, a variant
Name = Annotated[str, _validator("name")]


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """`base` with `override` merged in; nested mappings merge, anything else replaces."""
    import copy

    out = copy.deepcopy(dict(base))
    for key, value in (override or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_profile(section: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """The effective params section `name`: its chosen `profile`'s overrides merged over it
    (it keeps its `profiles`, so the result loads as its settings class). `cpu` is the
    section itself; an unknown profile fails, listing the known ones."""
    section = dict(section or {})
    profiles = section.get("profiles") or {}
    chosen = section.get("profile") or "cpu"
    if chosen not in profiles and chosen != "cpu":
        raise SettingsError(f"{name}.profile {chosen!r} is not one of {sorted(profiles)}")
    merged = deep_merge({k: v for k, v in section.items() if k != "profiles"}, profiles.get(chosen))
    merged["profiles"] = profiles
    return merged


def load_settings(cls: type[T], values: Mapping[str, Any] | None, section: str) -> T:
    """`values` (a params.yaml section, None = all defaults) as an instance of `cls`."""
    values = {} if values is None else values
    if not isinstance(values, Mapping):
        raise SettingsError(f"params.yaml: {section} must be a mapping, not {values!r}")
    _check_keys(cls, values, section)
    import pydantic

    try:
        return _adapter(cls).validate_python(dict(values))
    except pydantic.ValidationError as err:
        errors = [(_where(section, e["loc"]), e) for e in err.errors()]
        problems = []
        for where, error in errors:
            if any(other.startswith(f"{where}.") for other, _ in errors):
                continue  # a union's branch that failed at the whole value: the deeper one says it
            # a URL's credentials never reach a message (rulerag.redact)
            msg = redact_url(_shorten(error["msg"], 300))
            got = redact_url(_shorten(repr(error.get("input"))))
            problems.append(f"{where}: {msg} (got {got})")
        keys = tuple(dict.fromkeys(where for where, _error in errors))
        raise SettingsError("params.yaml: " + "; ".join(dict.fromkeys(problems)), keys) from None


#: what pydantic puts into an error's location for a union's branch (not a params key)
_BRANCH_TAGS = frozenset({"int", "float", "str", "bool", "none", "list", "tuple", "dict"})


def _where(section: str, loc: tuple[Any, ...]) -> str:
    """An error's location as params.yaml's dotted key: `build_benchmark.corpus.filter.x`, not
    `...filter.dict[str,literal[...]].x` (the branch of a union pydantic tried)."""
    parts = [
        str(part)
        for part in loc
        if not (
            isinstance(part, str)
            and (
                "[" in part
                or part in _BRANCH_TAGS
                or part.startswith(("constrained-", "function-"))
            )
        )
    ]
    return ".".join([section, *parts])


def _shorten(text: str, limit: int = 80) -> str:
    """A value as an error message shows it: a 1 MB string must not become a 1 MB message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def settings_fields(cls: type) -> dict[str, Any]:
    """params.yaml key (the field's name, or the key `param_key` gives it) -> resolved type of
    each field of a settings dataclass."""
    hints = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    return {
        _alias(extras[f.name]) or f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init
    }


def param_key(key: str) -> Any:
    """`Annotated` metadata reading a field from params.yaml key `key` (for keys that are
    Python keywords: `import_: Annotated[dict[str, X], param_key("import")]`)."""
    import pydantic

    return pydantic.Field(alias=key)


def _alias(annotation: Any) -> str | None:
    for meta in getattr(annotation, "__metadata__", ()):
        alias = getattr(meta, "alias", None)
        if isinstance(alias, str):
            return alias
    return None


@functools.cache
def _adapter(cls: type) -> Any:
    import pydantic

    return pydantic.TypeAdapter(cls)


def _dataclass_in(annotation: Any) -> type | None:
    """The dataclass an annotation holds (`X`, `X | None`), else None."""
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(annotation) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None


def _check_keys(cls: type, values: Mapping[str, Any], section: str) -> None:
    fields = settings_fields(cls)
    unknown = sorted(str(k) for k in values if k not in fields)
    if unknown:
        raise SettingsError(
            f"params.yaml: {section}: unknown key {', '.join(repr(k) for k in unknown)} "
            f"(known: {', '.join(sorted(fields))})",
            tuple(f"{section}.{k}" for k in unknown),
        )
    for name, annotation in fields.items():
        value = values.get(name)
        if not isinstance(value, Mapping):
            continue
        nested = _dataclass_in(annotation)
        if nested is not None:
            _check_keys(nested, value, f"{section}.{name}")
        elif typing.get_origin(annotation) in (dict, Mapping, typing.Mapping):
            args = typing.get_args(annotation)
            inner = _dataclass_in(args[1]) if len(args) == 2 else None
            if inner is not None:
                for key, item in value.items():
                    if isinstance(item, Mapping):
                        _check_keys(inner, item, f"{section}.{name}.{key}")
