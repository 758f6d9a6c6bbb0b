"""The `package_model` stage: one grid row's trained path as one MLflow pyfunc model folder.

What goes in is what `serving.pipeline.Answerer` answers with and nothing else, laid out as
data/<dataset>/ so the model reads it with the pipeline's own `DataLayout`:

    kg/{entities,relations,facts}.parquet, kg/stats.json    names, linking, the rules' history
    rules/{bank,rules}.parquet                               selection; application
    benchmark/{corpus,test}.jsonl                            documents; test queries and golds
    retrieval/index/<index>/                                 the corpus index
    retrieval/models/<index>-<mode>/                         the row's fine-tuned query encoder
    generation/adapters/<variant>/                           the row's LoRA adapter

plus the run's params.yaml. The base generator and Standard RAG's untuned query encoder are
named by params.yaml (the offline model packages, or a hub id) and not copied, so a version
costs its trained parts and data, not another copy of the base model.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rulerag.errors import InputError
from rulerag.generation.grid_names import grid_config, retrieval_name
from rulerag.io import read_jsonl
from rulerag.layout import DataLayout
from rulerag.params import Params
from rulerag.retrieval.configs import parse_config
from rulerag.serving.questions import INPUT_FIELDS
from rulerag.tracking.registry import installed_pins

__all__ = [
    "PackagedModel",
    "input_example",
    "model_files",
    "package_model",
    "save_rulerag_model",
]

#: the `rulerag` package: it travels with the model as its code
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: the models-from-code file that declares the model (`model_code.py` beside `serving.model`)
_MODEL_CODE = "model_code.py"


def model_files(layout: DataLayout, params: Params) -> list[Path]:
    """The files and folders of data/<dataset>/ the served row answers with (module doc)."""
    generation = params.generation
    row = grid_config(params.serve.row or "", generation)
    paths = [
        layout.entities,
        layout.relations,
        layout.facts,
        layout.kg_stats,
        layout.rule_bank,
        layout.rules,
        layout.corpus,
        layout.queries("test"),
    ]
    if row.retrieval:
        config = parse_config(retrieval_name(row.retrieval, generation.retriever))
        paths.append(layout.index(config.index))
        if config.trained:
            paths.append(layout.model(config.model_name or ""))
    if row.trained:
        paths.append(layout.adapter(row.generator))
    return paths


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the file system allows one (the model folder is copied again when it
    is logged), a copy otherwise."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _stage(paths: Sequence[Path], layout: DataLayout, dest: Path) -> Path:
    """`paths` (under layout.root) linked into dest/<dataset>/ at the same relative places."""
    root = dest / layout.dataset
    for path in paths:
        if not path.exists():
            raise InputError(f"package_model@{layout.dataset}: {path} not found: run dvc repro")
        relative = path.relative_to(layout.root)
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                _link_or_copy(file, root / relative / file.relative_to(path))
        else:
            _link_or_copy(path, root / relative)
    return root


def input_example(tests: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Two questions that show both ways in: a test query by id, and its query in words."""
    first = tests[0]
    return [{"qid": str(first["qid"])}, {"question": str(first["query"])}]


def save_rulerag_model(
    data: Path, params_file: Path, path: Path, *, example: Sequence[Mapping[str, Any]]
) -> None:
    """The RuleRAG pyfunc (`serving.model.RuleRAGModel`) at `path`, declared from code, with
    `data` (a data/<dataset>/ folder) and `params_file` as its artifacts, an input signature of
    optional text columns and `example` as its input example."""
    import mlflow.pyfunc
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema
    from mlflow.types.schema import AnyType

    # the model's code is `serving.model` (imported here so the stage's code deps hold it)
    from rulerag.serving import model

    code = Path(model.__file__).resolve().with_name(_MODEL_CODE)
    # a question is text; a subject, relation, time or qid may be a name or an id
    signature = ModelSignature(
        inputs=Schema(
            [
                ColSpec("string" if name == "question" else AnyType(), name, required=False)
                for name in INPUT_FIELDS  # all optional: an input is one form
            ]
        )
    )
    mlflow.pyfunc.save_model(
        str(path),
        python_model=str(code),
        artifacts={"data": str(data), "params": str(params_file)},
        code_paths=[str(_PACKAGE_DIR)],
        signature=signature,
        input_example=pd.DataFrame(list(example)).astype(object),
        pip_requirements=installed_pins(
            "mlflow",
            "torch",
            "transformers",
            "peft",
            "sentence-transformers",
            "faiss-cpu",
            "pandas",
            "pyarrow",
            "rapidfuzz",
        ),
    )


@dataclass(frozen=True)
class PackagedModel:
    """What `package_model` made: the model folder and its figures (metrics.json)."""

    path: Path
    metrics: dict[str, Any]


def _size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def package_model(
    layout: DataLayout, params: Params, params_file: Path, work: Path
) -> PackagedModel:
    """The served row's files staged under `work` and saved as the RuleRAG pyfunc model at
    work/pyfunc, with the row's grid figures (generation/<row>/metrics.json), which decide the
    `champion` alias, and the model's size."""
    row = params.serve.row
    if row is None:
        raise ValueError("serve.row is null: there is no row to package")
    figures_file = layout.row(row) / "metrics.json"
    if not figures_file.is_file():
        raise InputError(f"package_model@{layout.dataset}: {figures_file} not found: run generate")
    figures = json.loads(figures_file.read_text(encoding="utf-8"))
    data = _stage(model_files(layout, params), layout, work / "data")
    tests = read_jsonl(layout.queries("test"))
    path = work / "pyfunc"
    save_rulerag_model(data, params_file, path, example=input_example(tests))
    files, size = _size(path)
    metrics = {
        "dataset": layout.dataset,
        "row": row,
        "em": figures.get("em"),
        "token_f1": figures.get("token_f1"),
        "queries": figures.get("queries"),
        "model_files": files,
        "model_bytes": size,
    }
    return PackagedModel(path, metrics)
