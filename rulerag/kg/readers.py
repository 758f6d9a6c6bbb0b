"""Readers for every KG source format the pipeline supports.

Each reader takes the dataset's folder (laid out as in the local mirror, e.g.
`<RULERAG_DATA_DIR>/icews14/`) and returns a `KnowledgeGraph` in canonical form, raising
`KGFormatError` with file and line for anything it cannot read. Ids come from the source's own
id maps where it has them (so they stay stable across tools), else from sorted identifiers.
A `line` column records where each fact came from; ingestion uses it for duplicate reports and
drops it before writing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from rulerag.io import sha256_file
from rulerag.kg import names
from rulerag.kg.errors import KGFormatError
from rulerag.kg.lines import Row, read_id_map, read_json_map, read_rows, regular_file
from rulerag.kg.schema import EPOCH, SPLITS, KnowledgeGraph, TimeUnit, make_facts, make_vocab

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class _FactBuilder:
    """Collects facts split by split, remembering the file and line each came from."""

    def __init__(self) -> None:
        self.heads: list[int] = []
        self.relations: list[int] = []
        self.tails: list[int] = []
        self.times: list[int | None] = []
        self.splits: list[str] = []
        self.lines: list[int] = []
        self.split_files: dict[str, Path] = {}
        self.lines_read: dict[str, int] = {}
        self.inputs: dict[str, str] = {}

    def add(self, split: str, head: int, rel: int, tail: int, time: int | None, line: int) -> None:
        self.heads.append(head)
        self.relations.append(rel)
        self.tails.append(tail)
        self.times.append(time)
        self.splits.append(split)
        self.lines.append(line)

    def record_input(self, root: Path, path: Path) -> None:
        self.inputs[path.relative_to(root).as_posix()] = sha256_file(path)

    def finish(
        self,
        entities: pd.DataFrame,
        relations: pd.DataFrame,
        time_unit: TimeUnit | None,
        granularity: str | None,
        notes: list[str],
    ) -> KnowledgeGraph:
        if not self.heads:
            files = ", ".join(str(p) for p in self.split_files.values()) or "no split file"
            raise KGFormatError(
                next(iter(self.split_files.values()), Path(".")).parent,
                f"no facts in any split (read {files}: headers or nothing else); a KG with "
                "no facts would replace the one built before",
            )
        notes = notes + [
            f"split '{split}' ({self.split_files[split]}) has no facts (a header or nothing "
            f"else): ingested as 0 {split} facts"
            for split, read in self.lines_read.items()
            if read == 0 and split in self.split_files
        ]
        facts = make_facts(self.heads, self.relations, self.tails, self.times, self.splits)
        facts["line"] = pd.array(self.lines, dtype="int32")
        kg = KnowledgeGraph(
            facts=facts,
            entities=entities,
            relations=relations,
            time_unit=time_unit,
            time_granularity=granularity,
            notes=notes,
            lines_read=dict(self.lines_read),
            inputs=dict(sorted(self.inputs.items())),
            split_files=dict(self.split_files),
        )
        return kg


def find_split_files(
    folder: Path, suffixes: tuple[str, ...] = (".txt",)
) -> tuple[dict[str, Path], list[str]]:
    """Locate train/valid/test files; missing splits become notes, none at all is an error.

    A split name that holds something other than a regular file (a folder, a symlink to itself
    or to nothing) is an error, not a missing split: skipping it would ingest a smaller KG. So
    is a split found under two suffixes (`train.tsv` beside `train.csv`): one would be ignored.
    """
    found: dict[str, Path] = {}
    for split in SPLITS:
        present = [
            folder / f"{split}{suffix}"
            for suffix in suffixes
            if regular_file(folder / f"{split}{suffix}", optional=True)
        ]
        if len(present) > 1:
            raise KGFormatError(
                folder,
                f"split '{split}' is in {' and '.join(p.name for p in present)} "
                f"({', '.join(str(p) for p in present)}): keep one file per split, the "
                "other would be ignored",
            )
        if present:
            found[split] = present[0]
    if not found:
        wanted = ", ".join(f"{s}{{{','.join(suffixes)}}}" for s in SPLITS)
        raise KGFormatError(folder, f"no split files found (looked for {wanted})")
    notes = [
        f"split '{s}' is not in the source ({folder}); ingested the splits that exist"
        for s in SPLITS
        if s not in found
    ]
    return found, notes


def _lookup(mapping: dict[str, int], key: str, path: Path, line: int, what: str, src: str) -> int:
    try:
        return mapping[key]
    except KeyError:
        raise KGFormatError(path, f"{what} {key!r} is not in {src}", line) from None


#: an integer as a KG file may write it: ASCII digits with one optional leading minus. Not
#: `str.isdigit`, which takes superscripts (`²`, that `int` then refuses) and other scripts'
#: digits (`٢٠٠٠`, that `int` reads as 2000): a file that says something else is refused.
_INTEGER = re.compile(r"-?[0-9]+")
_Dtype = np.dtype | pd.api.extensions.ExtensionDtype
#: the dtypes the canonical KG stores ids and times in (`schema.make_vocab`, `make_facts`):
#: a value beyond them would end in an `OverflowError` when the columns are built
_ID_DTYPE = make_vocab([], [], []).dtypes["id"]
_TIME_DTYPE = make_facts([], [], [], [], []).dtypes["time"]


def _int_field(value: str, path: Path, line: int, what: str, dtype: _Dtype = _ID_DTYPE) -> int:
    """`value` as an integer that fits `dtype` (the column it is stored in: an id's by
    default); anything else is a `KGFormatError` naming the file, line and value."""
    if not _INTEGER.fullmatch(value):
        raise KGFormatError(
            path,
            f"{what} {value!r} is not an integer (ASCII digits 0-9, with one optional leading '-')",
            line,
        )
    bounds = np.iinfo(getattr(dtype, "numpy_dtype", dtype))
    # more digits than any int64 has never fits (and `int` refuses over 4,300 digits)
    fits = len(value.lstrip("-").lstrip("0")) <= len(str(bounds.max))
    if not fits or not bounds.min <= int(value) <= bounds.max:
        shown = repr(value) if len(value) <= 40 else f"{value[:20]!r}... ({len(value)} chars)"
        raise KGFormatError(
            path,
            f"{what} {shown} is outside the range the KG stores it in ({bounds.dtype}: "
            f"{bounds.min} to {bounds.max})",
            line,
        )
    return int(value)


class _DateParser:
    """Parses YYYY-MM-DD strictly into days since 1970-01-01, memoised (few distinct days)."""

    def __init__(self, fmt: str | None = None) -> None:
        self.fmt = fmt
        self.cache: dict[str, int] = {}

    def __call__(self, value: str, path: Path, line: int) -> int:
        days = self.cache.get(value)
        if days is not None:
            return days
        try:
            if self.fmt is None:
                if not _ISO_DATE.match(value):
                    raise ValueError("not YYYY-MM-DD")
                date = dt.date.fromisoformat(value)
            else:
                date = dt.datetime.strptime(value, self.fmt).date()
        except ValueError as err:
            want = self.fmt or "YYYY-MM-DD"
            raise KGFormatError(path, f"unparsable date {value!r} ({want}): {err}", line) from None
        days = (date - EPOCH).days
        self.cache[value] = days
        return days


def _name(key: str, to_name: Callable[[str], str]) -> str:
    """The readable name of `key`, or the key itself where that name would be empty (`___`,
    `<>`, `concept:`): an entity without a name cannot be shown in a prompt or matched."""
    return to_name(key) or key


def _vocab_from_map(mapping: dict[str, int], to_name: Callable[[str], str]) -> pd.DataFrame:
    keys = list(mapping)
    return make_vocab([mapping[k] for k in keys], [_name(k, to_name) for k in keys], keys)


def _vocab_sorted(keys: set[str], to_name: Callable[[str], str]) -> tuple[pd.DataFrame, dict]:
    ordered = sorted(keys)
    mapping = {k: i for i, k in enumerate(ordered)}
    labels = [_name(k, to_name) for k in ordered]
    return make_vocab(list(range(len(ordered))), labels, ordered), mapping


def _each_split(
    root: Path, folder: Path, columns: tuple[int, ...], builder: _FactBuilder, **kw: object
) -> tuple[list[tuple[str, Path, list[Row]]], list[str]]:
    files, notes = find_split_files(folder)
    out = []
    for split, path in files.items():
        rows = read_rows(path, columns, **kw)  # type: ignore[arg-type]
        builder.split_files[split] = path
        builder.lines_read[split] = len(rows)
        builder.record_input(root, path)
        out.append((split, path, rows))
    return out, notes


def _id_maps(
    root: Path, folder: Path, builder: _FactBuilder, columns: tuple[int, ...]
) -> dict[str, dict[str, int]]:
    """`entity2id.txt` and `relation2id.txt` of an id-based format (xERTE, RE-Net)."""
    maps = {}
    for kind in ("entity", "relation"):
        path = folder / f"{kind}2id.txt"
        maps[kind] = read_id_map(path, columns=columns)  # says if it is missing or no file
        builder.record_input(root, path)
    return maps


def _id_triple(
    fields: list[str], known: dict[str, set[int]], path: Path, line: int
) -> tuple[int, int, int]:
    """The subject, relation and object ids of a line, each checked against its id map."""
    s, r, o = (_int_field(v, path, line, "id") for v in fields[:3])
    for value, kind in ((s, "entity"), (r, "relation"), (o, "entity")):
        if value not in known[kind]:
            raise KGFormatError(path, f"{kind} id {value} is not in {kind}2id.txt", line)
    return s, r, o


def read_tlogic(root: Path, subdir: str = "TLogic_icews14") -> KnowledgeGraph:
    """TLogic's named temporal TSV: `subject<TAB>relation<TAB>object<TAB>YYYY-MM-DD`.

    Names are written with `_` for spaces; `entity2id.json` / `relation2id.json` (when present)
    give the ids TLogic itself uses.
    """
    folder = root / subdir
    builder = _FactBuilder()
    maps: dict[str, dict[str, int] | None] = {}
    for kind in ("entity", "relation"):
        path = folder / f"{kind}2id.json"
        # optional, but a folder or broken symlink there is an error, not "no map"
        maps[kind] = read_json_map(path) if regular_file(path, optional=True) else None
        if maps[kind] is not None:
            builder.record_input(root, path)
    per_split, notes = _each_split(root, folder, (4,), builder)
    ent_keys = {f[i] for _, _, rows in per_split for _, f in rows for i in (0, 2)}
    rel_keys = {f[1] for _, _, rows in per_split for _, f in rows}
    vocabs = {}
    for kind, keys in (("entity", ent_keys), ("relation", rel_keys)):
        mapping = maps[kind]
        if mapping is None:
            vocabs[kind], maps[kind] = _vocab_sorted(keys, names.readable)
        else:
            vocabs[kind] = _vocab_from_map(mapping, names.readable)
    ents, rels = maps["entity"], maps["relation"]
    assert ents is not None and rels is not None
    parse_date = _DateParser()
    for split, path, rows in per_split:
        for line, (s, r, o, t) in rows:
            builder.add(
                split,
                _lookup(ents, s, path, line, "entity", "entity2id.json"),
                _lookup(rels, r, path, line, "relation", "relation2id.json"),
                _lookup(ents, o, path, line, "entity", "entity2id.json"),
                parse_date(t, path, line),
                line,
            )
    return builder.finish(vocabs["entity"], vocabs["relation"], "day", "day", notes)


def read_xerte(
    root: Path, subdir: str = "xERTE_ICEWS14_forecasting", origin: str = "2014-01-01"
) -> KnowledgeGraph:
    """xERTE's id files: `s<TAB>r<TAB>o<TAB>t_hours<TAB>-1`, day = t/24 counted from `origin`.

    `entity2id.txt` / `relation2id.txt` hold `name<TAB>id` with natural names.
    """
    folder = root / subdir
    builder = _FactBuilder()
    maps = _id_maps(root, folder, builder, (2,))
    known = {kind: set(m.values()) for kind, m in maps.items()}
    start = (dt.date.fromisoformat(origin) - EPOCH).days
    per_split, notes = _each_split(root, folder, (4, 5), builder)
    for split, path, rows in per_split:
        for line, fields in rows:
            s, r, o = _id_triple(fields, known, path, line)
            hours = _int_field(fields[3], path, line, "time", _TIME_DTYPE)
            if hours % 24:
                raise KGFormatError(path, f"time {hours} h is not a whole day", line)
            builder.add(split, s, r, o, start + hours // 24, line)
    return builder.finish(
        _vocab_from_map(maps["entity"], names.readable),
        _vocab_from_map(maps["relation"], names.readable),
        "day",
        "day",
        notes,
    )


def _yearly(step: int, year_origin: int | None) -> int:
    """A yearly KG's time: the calendar year when the step's origin is known, else the step."""
    return step if year_origin is None else year_origin + step


def _yearly_unit(year_origin: int | None) -> tuple[TimeUnit, str]:
    return ("year", "year") if year_origin is not None else ("index", "year")


def read_renet(
    root: Path, subdir: str, granularity: str = "year", year_origin: int | None = None
) -> KnowledgeGraph:
    """RE-Net's id files: `s<TAB>r<TAB>o<TAB>t<TAB>0`, t an ordinal time step.

    WIKI's `entity2id.txt` is `Qid<TAB>id`; YAGO's adds start and end dates
    (`<Name><TAB>id<TAB>start<TAB>end`), which are entity attributes and are not used here.
    YAGO's relations are camelCase identifiers (`<wasBornIn>`), read as words. With
    `year_origin` (the calendar year of step 0, see the registry) times are years.
    """
    folder = root / subdir
    builder = _FactBuilder()
    maps = _id_maps(root, folder, builder, (2, 4))
    known = {kind: set(m.values()) for kind, m in maps.items()}
    per_split, notes = _each_split(root, folder, (4, 5), builder)
    for split, path, rows in per_split:
        for line, fields in rows:
            s, r, o = _id_triple(fields, known, path, line)
            step = _int_field(fields[3], path, line, "time step", _TIME_DTYPE)
            builder.add(split, s, r, o, _yearly(step, year_origin), line)
    unit, granularity = (
        _yearly_unit(year_origin) if granularity == "year" else ("index", granularity)
    )
    return builder.finish(
        _vocab_from_map(maps["entity"], names.readable),
        _vocab_from_map(maps["relation"], names.camel_words),
        unit,
        granularity,
        notes,
    )


def _labels(path: Path, root: Path, builder: _FactBuilder) -> dict[int, str]:
    """`name<TAB>id` lines as id -> name; names may repeat (Wikidata labels do), ids may not."""
    labels: dict[int, str] = {}
    for line, (name, raw_id) in read_rows(path, (2,)):
        ident = _int_field(raw_id, path, line, "id")
        if ident in labels:
            raise KGFormatError(path, f"id {ident} is listed twice", line)
        labels[ident] = name
    builder.record_input(root, path)
    return labels


def read_tkgf(
    root: Path,
    subdir: str = "TKGF_WIKI",
    qid_subdir: str | None = "RE-Net_WIKI",
    year_origin: int | None = None,
) -> KnowledgeGraph:
    """The TKG-forecasting datasets' named files: `name<TAB>id` maps with labels (e.g.
    `Uzhhorod`, `capital of`) and facts `s<TAB>r<TAB>o<TAB>t`, t a yearly step.

    Labels are not unique (WIKI: 41 are shared by two entities); those get their Wikidata id
    from RE-Net's `entity2id.txt` (`Qid<TAB>id`, the same ids) when it is in `qid_subdir`,
    else their own id, so every name means one entity: `Springfield (Q28515)`.
    """
    folder = root / subdir
    builder = _FactBuilder()
    entity_labels = _labels(folder / "entity2id.txt", root, builder)
    relation_labels = _labels(folder / "relation2id.txt", root, builder)
    qids: dict[int, str] = {}
    qid_map = root / qid_subdir / "entity2id.txt" if qid_subdir else None
    if qid_map is not None and regular_file(qid_map, optional=True):
        qids = {ident: qid for qid, ident in read_id_map(qid_map, (2,)).items()}
        builder.record_input(root, qid_map)
    counts: dict[str, int] = {}
    for label in entity_labels.values():
        counts[label] = counts.get(label, 0) + 1
    ids = sorted(entity_labels)
    shown = [
        entity_labels[i]
        if counts[entity_labels[i]] == 1
        else f"{entity_labels[i]} ({qids.get(i, f'#{i}')})"
        for i in ids
    ]
    entities = make_vocab(ids, shown, [qids.get(i, entity_labels[i]) for i in ids])
    rel_ids = sorted(relation_labels)
    relations = make_vocab(rel_ids, [relation_labels[i] for i in rel_ids],
                           [relation_labels[i] for i in rel_ids])  # fmt: skip
    known = {"entity": set(entity_labels), "relation": set(relation_labels)}
    per_split, notes = _each_split(root, folder, (4,), builder)
    for split, path, rows in per_split:
        for line, fields in rows:
            s, r, o = _id_triple(fields, known, path, line)
            step = _int_field(fields[3], path, line, "time step", _TIME_DTYPE)
            builder.add(split, s, r, o, _yearly(step, year_origin), line)
    shared = sum(1 for n in counts.values() if n > 1)
    if shared:
        notes.append(
            f"{shared} entity labels are shared by several ids; those names carry their id"
        )
    unit, granularity = _yearly_unit(year_origin)
    return builder.finish(entities, relations, unit, granularity, notes)


def read_fb15k237(
    root: Path,
    subdir: str = "ConvE_FB15k-237",
    names_subdir: str = "pp413_FB15k-237",
) -> KnowledgeGraph:
    """FB15k-237 triples `/m/mid<TAB>/relation/path<TAB>/m/mid`, named through mid2name.

    `FB15k_mid2name.txt` maps mids to names (underscores for spaces) and `rel2text.txt` gives
    each relation path a text. A mid without a name keeps its mid and is counted in the notes.
    """
    folder, name_folder = root / subdir, root / names_subdir
    builder = _FactBuilder()
    mid_names: dict[str, str] = {}
    rel_text: dict[str, str] = {}
    for fname, target in (("FB15k_mid2name.txt", mid_names), ("rel2text.txt", rel_text)):
        path = name_folder / fname
        rows = read_rows(path, (2,))  # says if it is missing or not a regular file
        builder.record_input(root, path)
        for line, (key, text) in rows:
            if key in target:
                raise KGFormatError(path, f"{key!r} is listed twice", line)
            target[key] = text
    per_split, notes = _each_split(root, folder, (3,), builder)
    ent_keys = {f[i] for _, _, rows in per_split for _, f in rows for i in (0, 2)}
    rel_keys = {f[1] for _, _, rows in per_split for _, f in rows}
    unnamed = sorted(ent_keys - mid_names.keys())
    if unnamed:
        notes.append(f"{len(unnamed)} entities have no name in FB15k_mid2name.txt; kept their mid")
    entities, ents = _vocab_sorted(ent_keys, lambda m: names.readable(mid_names.get(m, m)))
    relations, rels = _vocab_sorted(
        rel_keys, lambda r: rel_text.get(r) or names.freebase_relation(r)
    )
    for split, _path, rows in per_split:
        for line, (s, r, o) in rows:
            builder.add(split, ents[s], rels[r], ents[o], None, line)
    return builder.finish(entities, relations, None, None, notes)


def read_nell(
    root: Path, subdir: str = "pp413_NELL-995", ids_subdir: str | None = "KBGAT_NELL-995"
) -> KnowledgeGraph:
    """NELL-995 triples of concept strings `concept_type_name<TAB>concept:relation<TAB>...`.

    Ids come from KBGAT's `entity2id.txt` / `relation2id.txt` when present. Entity names drop
    the `concept_<type>_` prefix (the type goes to a `type` column); relation names are the
    relation split into words (`concept:proxyfor` -> `proxy for`).
    """
    folder = root / subdir
    builder = _FactBuilder()
    maps: dict[str, dict[str, int] | None] = {"entity": None, "relation": None}
    ids_dir = None if ids_subdir is None else root / ids_subdir
    if ids_dir is not None and (ids_dir.is_symlink() or ids_dir.exists()) and not ids_dir.is_dir():
        # a broken symlink or a file: the ids the user meant to give would be silently lost
        raise KGFormatError(ids_dir, "is not a folder (a broken symlink or a file?)")
    if ids_dir is not None and ids_dir.is_dir():
        for kind in maps:
            path = ids_dir / f"{kind}2id.txt"
            maps[kind] = read_id_map(path)
            builder.record_input(root, path)
    per_split, notes = _each_split(root, folder, (3,), builder)
    ent_keys = {f[i] for _, _, rows in per_split for _, f in rows for i in (0, 2)}
    rel_keys = {f[1] for _, _, rows in per_split for _, f in rows}
    vocabs = {}
    for kind, keys, to_name in (
        ("entity", ent_keys, lambda c: names.nell_entity(c)[0]),
        ("relation", rel_keys, names.nell_relation),
    ):
        mapping = maps[kind]
        if mapping is None:
            vocabs[kind], maps[kind] = _vocab_sorted(keys, to_name)
        else:
            vocabs[kind] = _vocab_from_map(mapping, to_name)
    vocabs["entity"]["type"] = pd.array(
        [names.nell_entity(k)[1] for k in vocabs["entity"]["key"]], dtype="string"
    )
    ents, rels = maps["entity"], maps["relation"]
    assert ents is not None and rels is not None
    for split, path, rows in per_split:
        for line, (s, r, o) in rows:
            builder.add(
                split,
                _lookup(ents, s, path, line, "entity", "entity2id.txt"),
                _lookup(rels, r, path, line, "relation", "relation2id.txt"),
                _lookup(ents, o, path, line, "entity", "entity2id.txt"),
                None,
                line,
            )
    return builder.finish(vocabs["entity"], vocabs["relation"], None, None, notes)


def read_generic(
    root: Path,
    delimiter: str = "\t",
    time_format: str | None = None,
) -> KnowledgeGraph:
    """A user's own KG: `train/valid/test` files (.tsv, .csv or .txt) of `head, relation, tail[,
    time]`, with an optional header row naming those columns.

    `time_format`: None for a static KG, a strptime format such as `%Y-%m-%d` (unit day),
    `"year"` (an integer calendar year) or `"int"` (an opaque ordinal step).
    """
    builder = _FactBuilder()
    columns = (3,) if time_format is None else (4,)
    files, notes = find_split_files(root, (".tsv", ".csv", ".txt"))
    per_split = []
    for split, path in files.items():
        rows = read_rows(path, (3, 4), delimiter=delimiter, quoted=True)
        if rows and [f.lower() for f in rows[0][1]] in (
            ["head", "relation", "tail"],
            ["head", "relation", "tail", "time"],
        ):
            rows = rows[1:]
        for line, fields in rows:
            if len(fields) not in columns:
                want = "4 columns (with time)" if time_format else "3 columns (no time_format set)"
                raise KGFormatError(path, f"expected {want}, found {len(fields)}", line)
        builder.split_files[split] = path
        builder.lines_read[split] = len(rows)
        builder.record_input(root, path)
        per_split.append((split, path, rows))
    ent_keys = {f[i] for _, _, rows in per_split for _, f in rows for i in (0, 2)}
    rel_keys = {f[1] for _, _, rows in per_split for _, f in rows}
    entities, ents = _vocab_sorted(ent_keys, str.strip)
    relations, rels = _vocab_sorted(rel_keys, str.strip)
    unit: TimeUnit | None
    if time_format is None:
        unit, granularity = None, None
    elif time_format in ("year", "int"):
        unit = "year" if time_format == "year" else "index"
        granularity = "year" if time_format == "year" else "step"
    else:
        unit, granularity = "day", "day"
    parse_date = _DateParser(time_format) if unit == "day" else None
    for split, path, rows in per_split:
        for line, fields in rows:
            time: int | None = None
            if parse_date is not None:
                time = parse_date(fields[3], path, line)
            elif unit is not None:
                time = _int_field(fields[3], path, line, "time", _TIME_DTYPE)
            builder.add(split, ents[fields[0]], rels[fields[1]], ents[fields[2]], time, line)
    return builder.finish(entities, relations, unit, granularity, notes)
