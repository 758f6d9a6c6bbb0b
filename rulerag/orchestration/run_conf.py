"""Validate an Airflow DAG run's conf and apply it to params.yaml like ``dvc exp run -S``.

A run's conf comes from whoever can trigger the DAG (UI, REST API, CLI), and its values end up
in params.yaml, which every stage reads and DVC interpolates into shell commands. So the conf
is checked strictly before anything is written: only known dataset names, only keys that
already exist in params.yaml, only plain YAML values, and no shell syntax in values that reach
a ``cmd``. The file is then edited in place with ruamel's round-trip mode so that its comments
(the documentation of every knob) survive, and replaced atomically so that a crash never leaves
a half-written params.yaml behind.

Expected conf::

    {"datasets": ["icews14", "nell995"], "params": {"ingest.duplicates": "error"}}

Both keys are optional; an empty conf changes nothing.
"""

from __future__ import annotations

import copy
import difflib
import functools
import io
import math
import os
import re
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken

from rulerag.params import read_params_file
from rulerag.settings import SettingsError, check_dataset_name, repeated_name, short_repr

__all__ = [
    "PARAM_KEY_RE",
    "RunConf",
    "apply_run_conf",
    "did_you_mean",
    "overridable_keys",
    "set_params",
    "validate_run_conf",
]

PARAM_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
# Strings allowed in params that reach a stage's shell command (see dvc_graph.cmd_param_keys).
SHELL_SAFE_RE = re.compile(r"^[A-Za-z0-9_.,:/=+@%-]*$")
_CONF_KEYS = ("datasets", "params", "stages", "force")
#: where secrets come from and where they are sent: only the project's owner, in params.yaml,
#: decides these; a run conf (anyone who may trigger the DAG) touching them, or a parent of
#: them, is refused, so it cannot point the key at a server of its own
PROTECTED_PARAM_KEYS = (
    "generation.api.base_url",
    "generation.api.key_env",
    "generation.api.airflow_conn_id",
)
#: the longest string a conf value may hold (a path, a model id, a prompt style...)
MAX_CONF_STRING = 4096
#: the most entries a list or mapping of the conf may hold: a value (`generation.configs`),
#: the `params` overrides, `datasets`, `stages`, `force`. params.yaml's longest list or
#: mapping holds 26 entries, and it has about 550 keys to override; a conf of a million
#: `generation.configs` entries was accepted, and every later step (the schema check, DVC's
#: foreach) walked them all
MAX_CONF_ENTRIES = 1000
_SCALARS = (str, bool, int, float, type(None))


@dataclass(frozen=True)
class RunConf:
    """A validated run conf. ``datasets`` None means: keep params.yaml's selection."""

    datasets: tuple[str, ...] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    #: dvc.yaml stage names (``ingest``, ``retrieve``...) to run; None = every stage. The
    #: others are skipped (their outputs stay as they are), e.g. to rerun only the early part.
    stages: tuple[str, ...] | None = None
    #: dvc.yaml stage names whose instances run with ``dvc repro --force``: DVC reruns them
    #: even when nothing it tracks changed (the KG mirror `ingest` reads is no DVC dependency;
    #: a changed mirror's chain forces `ingest`, and DVC reruns downstream what that changed)
    force: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        """True when applying it would leave params.yaml untouched."""
        return self.datasets is None and not self.params


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False  # NaN/inf do not round-trip through JSON or every YAML reader
    return isinstance(value, _SCALARS)


def _check_value(key: str, value: Any) -> None:
    """Scalars, or one level of list/dict holding scalars: no objects, no deep structures, no
    string longer than `MAX_CONF_STRING` (types and ranges are the schema's, see
    `validate_run_conf`)."""
    what = f"conf params['{key}']"
    if isinstance(value, list | tuple | Mapping) and len(value) > MAX_CONF_ENTRIES:
        raise ValueError(
            f"{what}: {len(value):,} entries; at most {MAX_CONF_ENTRIES:,} (a list of names, "
            "rows or sizes holds a few dozen)"
        )
    for text in _strings(value):
        if len(text) > MAX_CONF_STRING:
            raise ValueError(
                f"{what}: a string of {len(text):,} characters; at most {MAX_CONF_STRING:,}"
            )
    if _is_scalar(value):
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            if not _is_scalar(v):
                raise ValueError(
                    f"{what}[{i}]: list entries must be YAML scalars (string, number, bool,"
                    f" null), got {type(v).__name__}"
                )
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str) or not PARAM_KEY_RE.match(k) or "." in k:
                raise ValueError(f"{what}: invalid mapping key {short_repr(k)}")
            if not _is_scalar(v):
                raise ValueError(
                    f"{what}[{k!r}]: mapping values must be YAML scalars (string, number,"
                    f" bool, null), got {type(v).__name__}"
                )
        return
    raise ValueError(
        f"{what}: values must be YAML scalars, or lists/mappings of scalars;"
        f" got {type(value).__name__}"
    )


def _strings(value: Any) -> Iterable[str]:
    """The strings of a value and of the lists and mappings in it, keys too (a walk with a
    stack of its own: a deeply nested conf value must fail as too deep, not as a
    RecursionError of this walk)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            for k, v in reversed(list(item.items())):
                stack += [v, str(k)]
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))


def _lookup(params: Mapping[str, Any], key: str) -> Any:
    """Value at a dotted key of params.yaml; KeyError when any part is missing."""
    node: Any = params
    for part in key.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(key)
    return node


def _is_section(value: Any) -> bool:
    """A nested mapping: overriding its parent wholesale would silently drop settings."""
    return isinstance(value, Mapping)


def _touches(a: str, b: str) -> bool:
    """One dotted key equals the other or is a parent of it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def overridable_keys(params: Mapping[str, Any]) -> list[str]:
    """The dotted keys a run conf may override: every key of params.yaml at any depth, less
    `datasets` (the conf's own field), the keys that decide where the API key comes from or
    goes, and keys that are no dotted identifiers (no conf can name them)."""
    keys: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        children = (
            node.items()
            if isinstance(node, Mapping)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for part, value in children:
            key = f"{prefix}{part}"
            if key == "datasets" or not PARAM_KEY_RE.match(key):
                continue
            if not any(_touches(key, p) for p in PROTECTED_PARAM_KEYS):
                keys.append(key)
            walk(value, f"{key}.")

    walk(params, "")
    return keys


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for the known name closest to a mistyped `name` (difflib's
    ratio of at least 0.6), "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _key_suggestion(key: str, params: Mapping[str, Any]) -> str:
    """`did_you_mean` for a dotted key: among its siblings when its parent exists (the last
    part compared: `ingest.duplicate` -> `ingest.duplicates`, not `ingest.source`), else
    among every key a conf may override (a misspelt section)."""
    parent, _, last = key.rpartition(".")
    keys = overridable_keys(params)
    if parent:
        siblings = {k.rpartition(".")[2]: k for k in keys if k.rpartition(".")[0] == parent}
        close = difflib.get_close_matches(last, list(siblings), n=1, cutoff=0.6)
        if close:
            return f"; did you mean {siblings[close[0]]!r}?"
    return did_you_mean(key, keys)


def _listed(problems: Sequence[str]) -> str:
    """Several problems as one message, one a line."""
    return f"run conf: {len(problems)} problems:\n" + "\n".join(f"- {p}" for p in problems)


def _override_problem(
    key: Any,
    value: Any,
    params: Mapping[str, Any],
    accepted: Mapping[str, Any],
    cmd_keys: Collection[str],
) -> str | None:
    """What is wrong with overriding `key` by `value` (None: nothing), given the overrides
    `accepted` before it."""
    if not isinstance(key, str) or not PARAM_KEY_RE.match(key):
        return (
            f"run conf params: invalid key {short_repr(key)} (dotted identifiers only, e.g."
            " 'ingest.duplicates')"
        )
    if key == "datasets" or key.startswith("datasets."):
        return 'run conf params: set datasets with the "datasets" conf key'
    protected = [p for p in PROTECTED_PARAM_KEYS if _touches(key, p)]
    if protected:
        return (
            f"run conf params: {short_repr(key)} decides where the API key comes from or goes "
            f"({', '.join(protected)}); only params.yaml may set it"
        )
    try:
        current = _lookup(params, key)
    except KeyError:
        return (
            f"run conf params: unknown key {short_repr(key)}{_key_suggestion(key, params)}"
            " (only keys already in params.yaml can be overridden)"
        )
    try:
        _check_value(key, value)
    except ValueError as err:
        return str(err)
    if isinstance(current, Mapping) and (
        not isinstance(value, Mapping) or any(map(_is_section, current.values()))
    ):
        return (
            f"run conf params: {key!r} is a section of params.yaml; override its keys"
            f" one by one (e.g. '{key}.<name>')"
        )
    dropped = sorted(set(current) - set(value)) if isinstance(current, Mapping) else []
    if dropped:  # a mapping replaces the whole value: params.yaml would lose these
        return (
            f"run conf params: {key!r} would drop {', '.join(map(repr, dropped))} from "
            f"params.yaml; override its keys one by one (e.g. '{key}.{dropped[0]}')"
        )
    for other in accepted:
        if _touches(key, other):
            return f"run conf params: keys {other!r} and {key!r} overlap"
    for s in _strings(value):
        if any(_touches(key, c) for c in cmd_keys) and not SHELL_SAFE_RE.match(s):
            return (
                f"run conf params: {key!r} reaches a stage command; {s!r} may only"
                " hold letters, digits and _ . , : / = + @ % -"
            )
        if "\x00" in s:
            return f"run conf params: {key!r} holds a NUL character"
    return None


def _stage_list(
    conf: Mapping[str, Any],
    key: str,
    stage_names: Collection[str] | None,
    problems: list[str],
) -> tuple[str, ...] | None:
    """conf[key] as a tuple of dvc.yaml stage names (None when absent); what is wrong with it
    goes to `problems`."""
    raw = conf.get(key)
    if raw is None:
        return None
    if not isinstance(raw, list | tuple) or not raw or not all(isinstance(x, str) for x in raw):
        problems.append(f'run conf "{key}" must be a non-empty list of stage names')
        return None
    if len(raw) > MAX_CONF_ENTRIES:
        problems.append(
            f'run conf "{key}": {len(raw):,} stage names; at most {MAX_CONF_ENTRIES:,} '
            "(dvc.yaml has a few dozen stages)"
        )
        return None
    unknown = [] if stage_names is None else sorted(set(raw) - set(stage_names))
    for name in unknown:
        problems.append(
            f"run conf {key}: unknown stage {short_repr(name)}"
            f"{did_you_mean(name, stage_names or ())}"
            f" (dvc.yaml has {', '.join(stage_names or ())})"
        )
    return tuple(dict.fromkeys(raw))


def validate_run_conf(
    conf: Mapping[str, Any] | None,
    params: Mapping[str, Any],
    known_datasets: Collection[str],
    cmd_keys: Collection[str] = (),
    stage_names: Collection[str] | None = None,
    check: Callable[[Mapping[str, Any]], None] | None | Literal["schema"] = "schema",
) -> RunConf:
    """Check a run's conf against params.yaml and the known datasets; ValueError if bad.

    ``check`` validates the params.yaml the conf would produce: by default the project's
    schema (`rulerag.orchestration.params_check.check_params`: every section, type, range and
    dataset name), None for none (a params file of another shape, in tests).

    ``cmd_keys`` are params keys interpolated into stage commands
    (``dvc_graph.cmd_param_keys``): string values overriding them must be plain tokens, since
    DVC runs commands through a shell.
    """
    if conf is None:
        return RunConf()
    if not isinstance(conf, Mapping):
        raise ValueError(f"run conf must be a JSON object, got {type(conf).__name__}")
    if len(conf) > MAX_CONF_ENTRIES:
        raise ValueError(
            f"run conf: {len(conf):,} keys; it has at most {len(_CONF_KEYS)} "
            f"({', '.join(_CONF_KEYS)})"
        )
    problems: list[str] = []  # every problem of the conf, reported at once
    for name in sorted(str(k) for k in conf if k not in _CONF_KEYS):
        problems.append(
            f"run conf: unknown key {short_repr(name)}{did_you_mean(name, _CONF_KEYS)}"
            f" (allowed: {', '.join(_CONF_KEYS)})"
        )

    datasets: tuple[str, ...] | None = None
    if conf.get("datasets") is not None:
        raw = conf["datasets"]
        if not isinstance(raw, list | tuple) or not raw:
            problems.append(
                'run conf "datasets" must be a non-empty list of names, e.g. ["icews14"]'
            )
            raw = []
        elif len(raw) > MAX_CONF_ENTRIES:
            problems.append(
                f'run conf "datasets": {len(raw):,} names; at most {MAX_CONF_ENTRIES:,}'
            )
            raw = []
        else:  # DVC runs each dataset's stages once: a repeat would be dropped unsaid
            repeated = repeated_name(raw)
            if repeated:
                problems.append(f"run conf datasets: {repeated}")
        names: list[str] = []
        for name in raw:
            try:  # the one dataset-name rule (rulerag.settings), as params.yaml's own names
                check_dataset_name(name)
            except SettingsError as err:
                problems.append(f"run conf datasets: {err}")
                continue
            if name not in known_datasets:
                problems.append(
                    f"run conf datasets: unknown dataset {name!r}"
                    f"{did_you_mean(name, known_datasets)}"
                    f" (known: {', '.join(sorted(known_datasets))})"
                )
            elif name not in names:
                names.append(name)
        datasets = tuple(names) or None  # none valid: the schema check reads params.yaml's

    overrides: dict[str, Any] = {}
    raw_params = conf.get("params")
    if raw_params is not None and not isinstance(raw_params, Mapping):
        problems.append(
            'run conf "params" must be an object of dotted keys, e.g.'
            ' {"ingest.duplicates": "error"}'
        )
        raw_params = None
    elif raw_params is not None and len(raw_params) > MAX_CONF_ENTRIES:
        problems.append(
            f'run conf "params": {len(raw_params):,} keys; at most {MAX_CONF_ENTRIES:,} '
            "(params.yaml has about 550 keys to override)"
        )
        raw_params = None
    for key, value in (raw_params or {}).items():
        problem = _override_problem(key, value, params, overrides, cmd_keys)
        if problem:
            problems.append(problem)
        else:
            overrides[key] = copy.deepcopy(list(value) if isinstance(value, tuple) else value)
    stages = _stage_list(conf, "stages", stage_names, problems)
    force = _stage_list(conf, "force", stage_names, problems) or ()
    result = RunConf(datasets=datasets, params=overrides, stages=stages, force=force)
    # Types, ranges and section shapes: the schema every stage loads params.yaml with, applied
    # to what params.yaml would read after this conf ("three" for an int, 10**100, a list
    # where a scalar belongs fail here, naming the key, before anything is written); every
    # section's problems at once (`Params.check_all`).
    if check == "schema":
        from rulerag.orchestration.params_check import check_params

        check = functools.partial(check_params, where="params.yaml with this run conf")
    try:
        if check is not None and not result.is_empty:
            check(set_params(params, result))
    except SettingsError as err:
        problems.append(f"run conf params: {err}")
    if problems:
        raise ValueError(problems[0] if len(problems) == 1 else _listed(problems))
    return result


# ---------------------------------------------------------------------------------------------
# Applying
# ---------------------------------------------------------------------------------------------


def set_params(params: Mapping[str, Any], conf: RunConf) -> dict[str, Any]:
    """The plain-data result of applying ``conf``: what params.yaml must read as afterwards."""
    result = copy.deepcopy(dict(params))
    if conf.datasets is not None:
        result["datasets"] = list(conf.datasets)
    for key, value in conf.params.items():
        *parents, last = key.split(".")
        node: Any = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = copy.deepcopy(value)
        else:
            node[last] = copy.deepcopy(value)
    return result


def _trailing_comment(container: Any) -> tuple[Any, int] | None:
    """The comment token after a block collection's last entry, and its slot in ca.items."""
    if isinstance(container, CommentedSeq) and len(container):
        entry = container.ca.items.get(len(container) - 1)
        if entry and entry[0] is not None:
            return entry[0], 0
    if isinstance(container, CommentedMap) and len(container):
        entry = container.ca.items.get(list(container)[-1])
        if entry and len(entry) > 2 and entry[2] is not None:
            return entry[2], 2
    return None


def _set_comment(container: Any, index: Any, slot: int, token: Any) -> None:
    entry = container.ca.items.setdefault(index, [None, None, None, None])
    entry[slot] = token


def _replace_value(parent: Any, key: Any, new: Any) -> None:
    """Set ``parent[key] = new`` keeping the comments that follow the old value.

    ruamel stores the comment block after a block list/mapping on its last entry, so replacing
    the collection would drop the documentation of the next key; we move it to the new last
    entry (or, for an empty collection, after ``key`` in the parent). Flow style is kept.
    """
    old = parent[key]
    trailing = _trailing_comment(old)
    value: Any
    if isinstance(new, list):
        value = CommentedSeq(new)
    elif isinstance(new, Mapping):
        value = CommentedMap(new)
    else:
        value = new
    if isinstance(value, CommentedSeq | CommentedMap) and isinstance(
        old, CommentedSeq | CommentedMap
    ):
        if old.fa.flow_style():
            value.fa.set_flow_style()
        else:
            value.fa.set_block_style()
    if isinstance(value, CommentedMap) and isinstance(old, CommentedMap):
        # Keep the comments around keys that survive; the trailing one is re-placed below.
        last_old = list(old)[-1] if len(old) else None
        for k in value:
            if k in old.ca.items:
                entry = list(old.ca.items[k])
                if k == last_old and trailing is not None and len(entry) > 2:
                    entry[2] = None
                value.ca.items[k] = entry
    if trailing is not None:
        token, _ = trailing
        if isinstance(value, CommentedSeq) and len(value) and not value.fa.flow_style():
            _set_comment(value, len(value) - 1, 0, token)
        elif isinstance(value, CommentedMap) and len(value) and not value.fa.flow_style():
            _set_comment(value, list(value)[-1], 2, token)
        elif isinstance(parent, CommentedMap):
            _comment_before_next_key(parent, key, token)
    parent[key] = value


def _comment_before_next_key(parent: CommentedMap, key: Any, token: Any) -> None:
    """Re-attach a trailing comment block as the leading comment of the key after ``key``.

    ruamel cannot emit a comment after an empty ``{}``/``[]`` from the value's slot, so the
    lines move to the next sibling, where they were printed anyway. With no next sibling the
    comment is dropped (the values are still right; only that comment is lost).
    """
    keys = list(parent)
    index = keys.index(key)
    if index + 1 >= len(keys):
        return
    lines = str(token.value).split("\n")[1:]  # the first part ends the value's own line
    if lines and lines[-1] == "":
        lines.pop()
    tokens = [
        CommentToken(
            line.strip() + "\n", CommentMark(len(line) - len(line.lstrip()) if line else 0)
        )
        for line in lines
    ]
    entry = parent.ca.items.setdefault(keys[index + 1], [None, None, None, None])
    entry[1] = tokens + list(entry[1] or [])


def _yaml_rt() -> YAML:
    """Round-trip YAML matching params.yaml's layout (2-space maps, '  - ' lists)."""
    yaml = YAML(typ="rt", pure=True)
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap long strings or comments
    yaml.indent(mapping=2, sequence=4, offset=2)
    # ruamel writes a null as nothing (`key:`), which would rewrite every `key: null` line
    yaml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    return yaml


def apply_run_conf(params_path: str | Path, conf: RunConf) -> bool:
    """Write ``conf`` into params.yaml, keeping comments; True when the file changed.

    Like ``dvc exp run -S key=value``: ``datasets`` and each overridden key are set in place,
    everything else is left as written. The new text is written to a temporary file next to
    params.yaml and moved over it with os.replace, so readers see the old or the new file,
    never a partial one.
    """
    path = Path(params_path)
    if conf.is_empty:
        return False
    # the bounded read first (`read_params_file`: size, nesting, aliases' expansion), before
    # the round-trip loader, which sets no bound, reads the same file
    before = read_params_file(path)
    expected = set_params(before, conf)
    if expected == before:
        return False
    text = path.read_text(encoding="utf-8")
    yaml = _yaml_rt()
    doc = yaml.load(text)

    if conf.datasets is not None:
        _replace_value(doc, "datasets", list(conf.datasets))
    for key, value in conf.params.items():
        *parents, last = key.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        _replace_value(node, int(last) if isinstance(node, list) else last, value)

    buf = io.StringIO()
    yaml.dump(doc, buf)
    new_text = buf.getvalue()
    # Guard the comment surgery: the file must read back as exactly the intended values.
    reread = YAML(typ="safe", pure=True).load(new_text)
    if reread != expected:
        raise RuntimeError(f"{path}: applying the run conf would not round-trip; not written")

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(new_text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True
