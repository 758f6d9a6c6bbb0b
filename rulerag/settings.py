"""One strict way from a `params.yaml` section to a typed settings object.

Every stage reads its knobs through `load_settings(SettingsClass, params["section"],
"section")`. The settings class (a frozen dataclass next to the code it configures) is the one
place each default lives; params.yaml shows every field (a test checks that no knob is hidden).

Strict, because a typo in params.yaml must not silently fall back to a default:

* an unknown key fails, naming the key, its section and the known keys (and the closest
  one: "did you mean 'seed'?"); pydantic's `extra="forbid"` finds it, at any depth, for every
  class `load_settings` reads (`SETTINGS_CONFIG`), so no settings class declares it itself;
* a value of the wrong type fails, naming the key and the value (pydantic validates and
  converts, so `"2e-5"`, which a YAML 1.1 reader leaves a string, still becomes a float; a
  bool, an infinite or NaN real and a string for an integer are refused);
* nested dataclasses (and `dict[str, Dataclass]`, `Dataclass | None`) are checked the same way.

Numbers carry their range in their type (`Count`, `Positive`, `Fraction`...): `test_size: -5`
or `10**100` fails like a wrong type does, and the Airflow run conf is checked with the same
classes (`rulerag.orchestration.run_conf`, through `rulerag.params`). A test checks that every
numeric knob has a range.

A knob's help text lives once, in its field (peft's style: `field(default=..., metadata={"help":
"..."})`, read by `settings_help`); a section's, in its settings class's `HELP: ClassVar[str]`.
params.yaml's comment on that key (at the end of its line, or the block right above it) is the
same text, written and checked by `tests/support/sync_params_help.py`
(tests/unit/test_params_help.py); a help with line breaks (a list, an example) keeps them there.

A key that is a Python keyword (`mine_rules.import`) is a field with a trailing underscore
whose annotation names the key: `import_: Annotated[dict[str, X], param_key("import")]`.

Sizes are bounded before anything is built from a value (issue 45: a 1.4 KB alias bomb took
minutes and gigabytes, a 20 MB model name 93 s): a settings file is read within
`MAX_YAML_CHARS` characters and `MAX_YAML_NODES` values with its aliases expanded
(`read_settings_yaml`), every string of a section within `MAX_SETTINGS_STRING` characters, a
list of names that becomes DVC stage instances holds each name once (`UniqueNames`), and an
error message shows a value through `short_repr`, never the whole of it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import reprlib
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from annotated_types import Ge, Gt, Le
from pydantic import AfterValidator, AllowInfNan, BeforeValidator, Strict

from rulerag.errors import InputError
from rulerag.redact import redact_url

__all__ = [
    "DATASET_NAME_RE",
    "MAX_SETTINGS_STRING",
    "MAX_YAML_CHARS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "NOT_A_PARAM",
    "Count",
    "DatasetName",
    "NAME_RE",
    "Name",
    "Fraction",
    "NonNegative",
    "Positive",
    "PositiveReal",
    "Seed",
    "SETTINGS_CONFIG",
    "STRICT_INT",
    "SettingsError",
    "apply_profile",
    "check_dataset_name",
    "check_name",
    "deep_merge",
    "is_param",
    "load_settings",
    "param_key",
    "read_settings_yaml",
    "settings_fields",
    "settings_help",
    "short_repr",
    "UniqueDatasetNames",
    "UniqueNames",
    "repeated_name",
]

T = TypeVar("T")

#: the largest integer any knob takes (a count, a size, a step): what is bigger is a mistake
MAX_INT = 2**31 - 1
#: the longest string any settings value (or key) may be: a name, a path, a model id, a URL,
#: a prompt style. params.yaml's longest is 66 characters; a 20 MB model name passed every
#: check after 93 s and reached each stage (issue 45)
MAX_SETTINGS_STRING = 4096
#: the most characters a settings YAML file (params.yaml, dvc.yaml, a vars file) may hold:
#: the project's are about 45 KB, and ruamel's pure-Python reader takes seconds a megabyte
MAX_YAML_CHARS = 1 << 20
#: the most values (scalars, lists, mappings; a key counts too) such a file may hold once its
#: aliases are expanded: params.yaml holds about 1,000, dvc.yaml 1,700; 1.4 KB of nested
#: aliases (`&b [*a, *a, ...]`) hold billions, and every reader after the YAML loader
#: (pydantic, repr, the deepcopy of a merged profile) walks them all
MAX_YAML_NODES = 100_000
#: the deepest nesting such a file may have (params.yaml's and dvc.yaml's is 8): deeper,
#: ruamel's composer recurses into a Python RecursionError instead of a YAML error
MAX_YAML_DEPTH = 50


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
        shown = repr(name[:80]) if isinstance(name, str) else short_repr(name)
        raise SettingsError(
            f"invalid {what} {shown}: a {what} is a letter followed by letters, "
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


def repeated_name(names: Iterable[Any]) -> str | None:
    """What is wrong with a list of names that holds one twice (None: each is there once):
    DVC makes one stage instance of each name of such a list (`datasets`,
    `generation.configs`, `retrieve.indexes`: a foreach / matrix item) and drops a repeat
    without a word, so the run would do less than params.yaml says."""
    seen: set[Any] = set()
    for name in names:
        try:
            if name in seen:
                return (
                    f"{short_repr(name)} is listed twice: DVC runs one stage instance per name "
                    "and would drop the repeat without a word; list each name once"
                )
            seen.add(name)
        except TypeError:  # an unhashable entry: the entry's own check says what is wrong
            continue
    return None


def _no_repeats(names: tuple[Any, ...]) -> tuple[Any, ...]:
    problem = repeated_name(names)
    if problem:  # pydantic reports a ValueError as this field's error, naming its key
        raise ValueError(problem)
    return names


#: a list of names each of which becomes a DVC stage instance (a foreach / matrix item): each
#: name at most once (`repeated_name`)
UniqueNames = Annotated[tuple[Name, ...], AfterValidator(_no_repeats)]
#: the same for dataset names
UniqueDatasetNames = Annotated[tuple[DatasetName, ...], AfterValidator(_no_repeats)]


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


def load_settings(
    cls: type[T],
    values: Mapping[str, Any] | None,
    section: str,
    *,
    given: Mapping[str, Any] | None = None,
) -> T:
    """`values` (a params.yaml section, None = all defaults) as an instance of `cls`. A key of
    a field params.yaml does not set (`NOT_A_PARAM`), at any depth, is refused as unknown;
    `given` holds the caller's values of such fields of `cls` (their defaults otherwise)."""
    values = {} if values is None else values
    if not isinstance(values, Mapping):
        raise SettingsError(f"params.yaml: {section} must be a mapping, not {short_repr(values)}")
    _check_strings(values, section)
    values, hidden = _params_only(cls, values, ())
    import pydantic

    errors: list[Any] = []
    try:
        loaded = _adapter(cls).model_validate({"value": {**values, **(given or {})}}).value
    except pydantic.ValidationError as err:
        errors = list(err.errors())
    # a key of a field that params.yaml does not set is as unknown as a key of no field
    errors += [{"type": "extra_forbidden", "loc": ("value", *loc)} for loc in hidden]
    if errors:
        raise _settings_error(cls, section, errors) from None
    return loaded


def _settings_error(cls: type, section: str, raw: list[Any]) -> SettingsError:
    """pydantic's errors (and the unknown keys `_params_only` found) as one SettingsError."""
    errors = [(_where(section, e["loc"][1:]), e) for e in raw]
    # the keys above another error's: a union's branch that failed at the whole value, the
    # deeper error says it (a set, not a scan of every other error for each: a list of
    # 100,000 wrong entries made that 10**10 comparisons)
    parents = {
        ".".join(parts[:i])
        for parts in (where.split(".") for where, _ in errors)
        for i in range(1, len(parts))
    }
    problems = []
    unknown: dict[str, list[tuple[Any, ...]]] = {}  # where -> locations of unknown keys
    for where, error in errors:
        if error["type"] in _UNKNOWN_KEY:
            parent = where.rpartition(".")[0]
            if parent not in unknown:
                problems.append(parent)  # its place among the problems, said below
            unknown.setdefault(parent, []).append(error["loc"][1:])
            continue
        if where in parents:
            continue
        # a URL's credentials never reach a message (rulerag.redact)
        msg = redact_url(_shorten(error["msg"], 300))
        got = redact_url(short_repr(error.get("input")))
        problems.append(f"{where}: {msg} (got {got})")
    problems = [
        _unknown_keys(cls, p, unknown[p]) if p in unknown else p for p in dict.fromkeys(problems)
    ]
    keys = tuple(dict.fromkeys(where for where, _error in errors))
    return SettingsError("params.yaml: " + _joined(problems), keys)


#: the most problems one message lists (the keys of all of them stay in `SettingsError.keys`)
MAX_LISTED_PROBLEMS = 20


def _joined(problems: list[str]) -> str:
    """Problems as one message, at most `MAX_LISTED_PROBLEMS` of them: a list of a thousand
    wrong entries is one mistake, not a thousand-line message."""
    shown = "; ".join(problems[:MAX_LISTED_PROBLEMS])
    more = len(problems) - MAX_LISTED_PROBLEMS
    return f"{shown}; and {more:,} more like them" if more > 0 else shown


def _check_strings(values: Mapping[str, Any], section: str) -> None:
    """Every string of a section (a value, an entry, a key, at any depth) within
    `MAX_SETTINGS_STRING` characters; SettingsError naming the first longer one's key and
    length. Checked on the raw values, before pydantic and the settings classes see them, so
    that every field is bounded, `Any`-typed ones (`profiles`) too."""
    stack: list[tuple[str, Any]] = [(section, values)]
    seen: set[int] = set()  # a value shared by YAML aliases is checked once
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_SETTINGS_STRING:
                raise SettingsError(
                    f"params.yaml: {where}: too long ({len(value):,} characters); at most "
                    f"{MAX_SETTINGS_STRING:,} (a name, a path, a model id, a URL)",
                    (where,),
                )
            continue
        if not isinstance(value, Mapping | list | tuple) or id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and len(key) > MAX_SETTINGS_STRING:
                    raise SettingsError(
                        f"params.yaml: {where} has a key of {len(key):,} characters "
                        f"({short_repr(key, 40)}); at most {MAX_SETTINGS_STRING:,}",
                        (where,),
                    )
                stack.append((f"{where}.{key}", item))
        else:
            stack.extend((f"{where}.{i}", item) for i, item in enumerate(value))


#: what pydantic puts into an error's location for a union's branch (not a params key)
_BRANCH_TAGS = frozenset({"int", "float", "str", "bool", "none", "list", "tuple", "dict"})


def _where(section: str, loc: tuple[Any, ...]) -> str:
    """An error's location as params.yaml's dotted key: `build_benchmark.corpus.filter.x`, not
    `...filter.dict[str,literal[...]].x` (the branch of a union pydantic tried)."""
    parts = [str(part) for part in loc if not (isinstance(part, str) and _branch_tag(part))]
    return ".".join([section, *parts])


def _branch_tag(part: str) -> bool:
    """Whether a part of a pydantic error location names a union's branch, not a key."""
    return "[" in part or part in _BRANCH_TAGS or part.startswith(("constrained-", "function-"))


def _shorten(text: str, limit: int = 80) -> str:
    """A value as an error message shows it: a 1 MB string must not become a 1 MB message."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr, with small limits, for any value an error message shows."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdeque = 6
        self.maxdict = self.maxset = self.maxfrozenset = 6
        self.maxstring = self.maxother = 80
        self.maxlong = 40

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 512:  # repr of a 10**5000 raises (the digit limit), or is slow
            return f"<an integer of {x.bit_length():,} bits>"
        return super().repr_int(x, level)


_SHORT_REPR = _ShortRepr()


def short_repr(value: object, limit: int = 80) -> str:
    """`repr(value)` within about `limit` characters, without building the whole of it first:
    `_shorten(repr(value))` turned the expansion of a YAML alias bomb (billions of entries)
    into one string before cutting it (issue 45). A long string shows its start and length,
    a container its first entries (reprlib)."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    return _shorten(_SHORT_REPR.repr(value), limit)


def read_settings_yaml(path: str | Path) -> Any:
    """A YAML file of settings (params.yaml, dvc.yaml, a vars file) as plain data, parsed as
    DVC parses it (ruamel's safe loader, YAML 1.2: `on` / `yes` stay strings), within bounds
    that YAML loaders do not set themselves: at most `MAX_YAML_CHARS` characters, nesting
    `MAX_YAML_DEPTH` deep and `MAX_YAML_NODES` values with its aliases and merge keys expanded
    (`_bounded_composer`). SettingsError, naming the file, for a file beyond them or a value
    Python refuses (an integer of 5,000 digits); ruamel's YAMLError for a file that is not
    YAML, as before."""
    from ruamel.yaml import YAML

    with open(path, encoding="utf-8") as handle:
        text = handle.read(MAX_YAML_CHARS + 1)
    if len(text) > MAX_YAML_CHARS:
        raise SettingsError(
            f"{path}: more than {MAX_YAML_CHARS:,} characters; a settings file is a few "
            "dozen kilobytes (params.yaml about 45 KB): is this the right file?"
        )
    yaml = YAML(typ="safe", pure=True)
    yaml.Composer = _bounded_composer()
    yaml.max_depth = MAX_YAML_DEPTH
    try:
        return yaml.load(text)
    except _AliasBomb as err:
        raise SettingsError(f"{path}: {err}") from None
    except ValueError as err:  # a constructor's int() or float() on what Python refuses
        raise SettingsError(f"{path}: not valid YAML: {_shorten(str(err), 300)}") from None


class _AliasBomb(Exception):
    """A YAML document larger than `MAX_YAML_NODES` values once expanded, or an alias inside
    the collection it names."""


@functools.cache
def _bounded_composer() -> type:
    """ruamel's Composer, counting the values of each node with its aliases expanded (a class
    made when first needed: ruamel is imported only by what reads YAML)."""
    from ruamel.yaml.composer import Composer
    from ruamel.yaml.events import AliasEvent
    from ruamel.yaml.nodes import MappingNode, SequenceNode

    class BoundedComposer(Composer):  # type: ignore[misc]
        """Sizes are counted while composing, once per node: an alias adds the size of the
        node it names without copying it, so the count costs what the file's text does even
        when its expansion is astronomic, and the document is refused at the first node
        whose expansion passes `MAX_YAML_NODES`, before anything is constructed."""

        def __init__(self, loader: Any = None) -> None:
            super().__init__(loader)
            self.sizes: dict[int, int] = {}  # id(node) -> values in it, aliases expanded

        def compose_node(self, parent: Any, index: Any) -> Any:
            alias = self.parser.check_event(AliasEvent)
            node = super().compose_node(parent, index)
            if alias:
                if id(node) not in self.sizes:  # named inside itself: still being composed
                    raise _AliasBomb(
                        f"line {node.start_mark.line + 1}: alias *{node.anchor} inside the "
                        "collection it names makes a structure without end; write it out"
                    )
                return node
            size = 1
            if isinstance(node, SequenceNode):
                size += sum(self.sizes[id(child)] for child in node.value)
            elif isinstance(node, MappingNode):
                size += sum(self.sizes[id(k)] + self.sizes[id(v)] for k, v in node.value)
            if size > MAX_YAML_NODES:
                raise _AliasBomb(
                    f"line {node.start_mark.line + 1}: this value holds more than "
                    f"{MAX_YAML_NODES:,} values once its aliases (*name) and merge keys (<<) "
                    "are expanded, where a whole settings file holds a few thousand: write "
                    "the values out, or alias only scalars and small collections"
                )
            self.sizes[id(node)] = size
            return node

    return BoundedComposer


#: a settings field's metadata (`field(default=..., metadata=NOT_A_PARAM)`, or with help:
#: `metadata={"param": False, ...}`) when params.yaml does not set it: its value comes from
#: elsewhere (the data, a caller); `settings_fields` and `settings_help` leave it out, and
#: `load_settings` refuses its key as unknown
NOT_A_PARAM: Mapping[str, Any] = types.MappingProxyType({"param": False})


def is_param(f: dataclasses.Field[Any]) -> bool:
    """Whether params.yaml sets a settings field (an init field not marked `NOT_A_PARAM`)."""
    return f.init and f.metadata.get("param", True)


def settings_fields(cls: type) -> dict[str, Any]:
    """params.yaml key (the field's name, or the key `param_key` gives it) -> resolved type of
    each field of a settings dataclass that params.yaml sets (`is_param`)."""
    hints = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    return {
        _alias(extras[f.name]) or f.name: hints[f.name]
        for f in dataclasses.fields(cls)
        if is_param(f)
    }


def settings_help(cls: type) -> dict[str, str]:
    """params.yaml key -> help text of each field of a settings dataclass that has one
    (`metadata={"help": ...}`)."""
    extras = typing.get_type_hints(cls, include_extras=True)
    return {
        _alias(extras[f.name]) or f.name: f.metadata["help"]
        for f in dataclasses.fields(cls)
        if is_param(f) and "help" in f.metadata
    }


@functools.cache
def _keyed_fields(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Any]]:
    """params.yaml key -> (field, resolved type) of every init field of a settings dataclass,
    those params.yaml does not set included."""
    hints = typing.get_type_hints(cls)
    extras = typing.get_type_hints(cls, include_extras=True)
    return {
        _alias(extras[f.name]) or f.name: (f, hints[f.name])
        for f in dataclasses.fields(cls)
        if f.init
    }


def _params_only(
    cls: type, values: Mapping[str, Any], loc: tuple[Any, ...]
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """`values` without the keys of fields params.yaml does not set (`NOT_A_PARAM`), in
    nested settings and `dict[str, X]` entries too, and the locations of those keys."""
    kept: dict[str, Any] = {}
    hidden: list[tuple[Any, ...]] = []
    fields = _keyed_fields(cls)
    for key, value in values.items():
        found = fields.get(key) if isinstance(key, str) else None
        if found is None:  # not a field: pydantic says so
            kept[key] = value
            continue
        f, annotation = found
        if not is_param(f):
            hidden.append((*loc, key))
            continue
        nested = _dataclass_in(annotation)
        args = typing.get_args(annotation)
        is_dict = typing.get_origin(annotation) in (dict, Mapping) and len(args) == 2
        entries = _dataclass_in(args[1]) if is_dict else None
        if nested is not None and isinstance(value, Mapping):
            value, more = _params_only(nested, value, (*loc, key))
            hidden += more
        elif entries is not None and isinstance(value, Mapping):
            value = dict(value)
            for name, entry in value.items():
                if isinstance(entry, Mapping):
                    value[name], more = _params_only(entries, entry, (*loc, key, name))
                    hidden += more
        kept[key] = value
    return kept, hidden


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


#: the pydantic config every settings class is read with: a key it has no field for is an
#: error (at any depth: a nested settings dataclass without a config of its own takes its
#: parent's). The stdlib dataclasses are read as the one field of a model that carries it, so
#: that no class has to declare it (and none can forget to).
SETTINGS_CONFIG: Any = {"extra": "forbid"}


@functools.cache
def _adapter(cls: type) -> Any:
    """A model of one field, `value: cls`, read with `SETTINGS_CONFIG`."""
    import pydantic

    return pydantic.create_model(
        f"{cls.__name__}Section",
        __config__=pydantic.ConfigDict(**SETTINGS_CONFIG),
        value=(cls, ...),
    )


def _dataclass_in(annotation: Any) -> type | None:
    """The dataclass an annotation holds (`X`, `X | None`), else None."""
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(annotation) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None


#: pydantic's error types for a key the settings class has no field for
_UNKNOWN_KEY = frozenset({"unexpected_keyword_argument", "extra_forbidden"})


def _unknown_keys(cls: type, where: str, locations: list[tuple[Any, ...]]) -> str:
    """The problem of the unknown keys of one mapping (`where`: its dotted key), as the
    error says it: the keys, the known ones and, for each near one, "did you mean"."""
    import difflib

    names = [str(loc[-1]) for loc in locations]
    target = _class_at(cls, locations[0][:-1])
    known = sorted(settings_fields(target))
    moved: Mapping[str, str] = getattr(target, "MOVED_KEYS", {})
    guesses = [
        (name, close[0])
        for name in names
        if name not in moved
        for close in [difflib.get_close_matches(name, known, n=1, cutoff=0.75)]
        if close
    ]
    if len(names) == 1 and guesses:
        hint = f"; did you mean {guesses[0][1]!r}?"
    else:
        hint = "".join(f"; {name!r}: did you mean {close!r}?" for name, close in guesses)
    hint += "".join(f"; {name!r} is {moved[name]} now" for name in names if name in moved)
    return (
        f"{where}: unknown key {', '.join(short_repr(n) for n in names)} "
        f"(known: {', '.join(known)}){hint}"
    )


def _class_at(cls: type, loc: tuple[Any, ...]) -> type:
    """The settings dataclass at a pydantic error location under `cls` (the mapping an
    unknown key was found in): through nested dataclasses, `X | None` and `dict[str, X]`'s
    entries, skipping the tags pydantic adds for a union's branches."""
    parts = [p for p in loc if not (isinstance(p, str) and _branch_tag(p))]
    while parts:
        annotation = settings_fields(cls)[str(parts.pop(0))]
        nested = _dataclass_in(annotation)
        if nested is None:  # dict[str, X]: the next part is the entry's name
            nested = _dataclass_in(typing.get_args(annotation)[1])
            parts.pop(0)
        assert nested is not None, f"no settings class at {loc} under {cls.__name__}"
        cls = nested
    return cls
