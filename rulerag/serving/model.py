"""The registered RuleRAG model: `Answerer` as one MLflow pyfunc.

`rulerag.serving.packaging.save_rulerag_model` saves it (declared from code by
`rulerag/serving/model_code.py`, not pickled); `mlflow.pyfunc.load_model("models:/rulerag-
<dataset>@champion")` or `mlflow models serve -m ...` loads it. Its artifacts are the files the
row answers with, laid out as data/<dataset>/ (`data`), and the run's params.yaml (`params`);
the base generator and Standard RAG's untuned query encoder are named there, not copied (they
are the offline model packages, or any Hugging Face id).

Input: a DataFrame (what `mlflow models serve` makes of `dataframe_records` / `dataframe_split`),
a list of mappings or one mapping, each one question (`rulerag.serving.questions`). Output: a
list of JSON-able dicts, one per question. A bad question is an `MlflowException` with error
code INVALID_PARAMETER_VALUE, which MLflow's scoring server answers with 400 and the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlflow.pyfunc

__all__ = ["RuleRAGModel", "as_inputs"]


def as_inputs(model_input: Any) -> list[Any]:
    """Each question of a pyfunc input as a mapping of the keys it gives: a DataFrame's rows
    without their empty cells (a frame of mixed forms holds None / NaN where a form has no
    such key), a list as it is, a single mapping as a list of one."""
    import pandas as pd

    from rulerag.serving.questions import is_given

    if isinstance(model_input, pd.DataFrame):
        rows = model_input.to_dict(orient="records")
        return [{str(k): v for k, v in row.items() if is_given(v)} for row in rows]
    if isinstance(model_input, Mapping):
        return [dict(model_input)]
    if isinstance(model_input, (list, tuple)):
        return list(model_input)
    return [model_input]  # QuestionReader says what is wrong with it


class RuleRAGModel(mlflow.pyfunc.PythonModel):
    """Questions in, answers with their rules, documents and explained candidates out."""

    def load_context(self, context: Any) -> None:
        from rulerag.generation.generators import passive_openmp

        passive_openmp()  # before torch loads (a busy CPU slows spinning decoders 10x)
        from rulerag.params import load_params
        from rulerag.serving.pipeline import Answerer

        params = load_params(Path(context.artifacts["params"]))
        self.answerer = Answerer(Path(context.artifacts["data"]), params)

    # no type hints on `model_input`: MLflow would read them as a schema to convert inputs to
    def predict(self, context, model_input, params=None):
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

        from rulerag.errors import InputError

        try:
            return self.answerer.answer(as_inputs(model_input))
        except InputError as err:
            raise MlflowException(str(err), error_code=INVALID_PARAMETER_VALUE) from None
