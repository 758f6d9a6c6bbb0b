"""What `make serve` serves and the JSON it speaks.

`ServedModel` is the one thing the service needs of the registered RuleRAG model
(`rulerag.serving.loading.load_served` returns one): a title, RuleRAG test queries to offer,
and `predict` from a list of inputs to a list of JSON-able answers.

`read_invocation` reads a `POST /invocations` body in the formats of `mlflow models serve`
(MLflow 3's scoring server: exactly one of `dataframe_records`, `dataframe_split`,
`instances`, `inputs`), so a client written for MLflow's server works unchanged. It is written
here rather than borrowed from `mlflow.pyfunc.scoring_server`, whose parsing is not part of
MLflow's documented API and turns the body into a pandas frame (a record of mixed forms gains
NaN cells, a number becomes a float) or into numpy columns (`inputs`), where our inputs are
small records of text that the model reads as given and whose mistakes a client must be told
by field. Each record is checked for its shape only (an object, known keys, scalar values, at
most `max_questions` of them); which form it takes and whether its names exist is the model's
to say (`InputError`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Protocol

from rulerag.errors import InputError
from rulerag.serving.questions import INPUT_FIELDS

__all__ = [
    "FORMATS",
    "INPUT_FIELDS",
    "RequestError",
    "ServedModel",
    "check_input",
    "decode_json",
    "jsonable",
    "read_invocation",
]

#: the body formats of MLflow's scoring server, exactly one per request
FORMATS = ("dataframe_records", "dataframe_split", "instances", "inputs")
#: how the three forms (`questions.FORMS`) read in a message
FORMS_TEXT = 'question, or subject + relation (+ time), or qid: {"question": "..."}'


class ServedModel(Protocol):
    """The model behind the service (`rulerag.serving.loading.load_served`)."""

    #: what the page's heading names, e.g. "RuleRAG-FT on icews14 (models:/..., version 3)"
    title: str
    #: RuleRAG test queries a person may pick: {"qid": "test-00001", "query": "Time ..."}
    examples: list[dict[str, Any]]

    def predict(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One JSON-able answer per input; InputError (or MlflowException with error code
        INVALID_PARAMETER_VALUE / BAD_REQUEST) with a one-line message on bad input."""
        ...


class RequestError(InputError):
    """A request the client must fix: the HTTP status it gets and MLflow's error code."""

    def __init__(self, message: str, status: int = 400, code: str = "BAD_REQUEST") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def decode_json(body: bytes) -> Any:
    """The body as JSON; RequestError (400) when it is empty, not UTF-8 or not JSON."""
    if not body.strip():
        raise RequestError('empty body: send JSON such as {"inputs": [{"question": "..."}]}')
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(f"the body is not UTF-8 (byte {err.start}): send UTF-8 JSON") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise RequestError(
            f"the body is not JSON: {err.msg} at line {err.lineno} column {err.colno}"
        ) from None


def _no_constant(name: str) -> Any:
    """NaN and Infinity are no JSON (Python's reader takes them; a client's mistake)."""
    raise json.JSONDecodeError(f"{name} is not JSON", name, 0)


def read_invocation(payload: Any, max_questions: int) -> list[dict[str, Any]]:
    """The inputs of a scoring request (module doc), each checked by `check_input`."""
    if not isinstance(payload, Mapping):
        raise _shape(
            f"expected a JSON object with one of {', '.join(FORMATS)}, not a {_json_type(payload)}"
        )
    given = [key for key in FORMATS if key in payload]
    if len(given) != 1:
        which = f"both {' and '.join(given)}" if given else "none of them"
        raise _shape(f"give exactly one of {', '.join(FORMATS)}, not {which}")
    (key,) = given
    params = payload.get("params")
    if params not in (None, {}):
        raise _shape("params: this model takes no parameters; leave params out")
    extra = sorted(str(k) for k in payload if k not in (key, "params"))
    if extra:
        raise _shape(f"unknown field {extra[0]!r} beside {key}")
    value = payload[key]
    if key == "dataframe_split":
        records = _split_records(value)
    elif key == "dataframe_records":
        if not isinstance(value, list):
            raise _shape(f"{key} must be a list of objects, not a {_json_type(value)}")
        records = value
    else:  # instances / inputs: TensorFlow Serving's rows, or its columns as one object
        records = _tf_records(value, key)
    if not records:
        raise _shape(f"{key} holds no input: send at least one question")
    if len(records) > max_questions:
        raise _shape(
            f"{key} holds {len(records):,} inputs; at most {max_questions:,} per request "
            "(serve.max_questions): split them over several requests"
        )
    return [check_input(r, f"input {i + 1}") for i, r in enumerate(records)]


def check_input(record: Any, where: str) -> dict[str, Any]:
    """`record` without its null values, if it is an object of known keys with text or number
    values; RequestError naming `where` and the key otherwise. A null is a key not given: a
    DataFrame of mixed forms (MLflow's `dataframe_*`) holds one where a form has no such key."""
    if not isinstance(record, Mapping):
        raise _shape(f"{where}: expected an object ({FORMS_TEXT}), not a {_json_type(record)}")
    record = {k: v for k, v in record.items() if v is not None}
    unknown = sorted(str(k) for k in record if k not in INPUT_FIELDS)
    if unknown:
        raise _shape(f"{where}: unknown field {unknown[0]!r}; give {FORMS_TEXT}")
    for name, value in record.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _shape(f"{where}: {name} must be text, not {_json_type(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _shape(f"{where}: {name} must be text, not {value!r}")
    if not record:
        raise _shape(f"{where}: an empty object; give {FORMS_TEXT}")
    return dict(record)


def jsonable(value: Any) -> Any:
    """`value` as strict JSON takes it: numpy scalars as Python numbers, tuples as lists, a
    NaN or infinite score as null (JSON has no NaN; MLflow's server writes it, which strict
    readers refuse). TypeError for anything else that is not JSON."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    item = getattr(value, "item", None)  # a numpy scalar (numpy is not imported for this)
    if callable(item) and getattr(value, "shape", None) == ():
        return jsonable(item())
    raise TypeError(f"a {type(value).__name__} is not JSON")


def _split_records(value: Any) -> list[Any]:
    """pandas' `split` orient ({"columns": [...], "data": [[...]], "index": [...]}) as rows."""
    where = "dataframe_split"
    if not isinstance(value, Mapping):
        raise _shape(f'{where} must be an object {{"columns": [...], "data": [[...], ...]}}')
    extra = sorted(str(k) for k in value if k not in ("columns", "data", "index"))
    if extra:
        raise _shape(f"{where}: unknown field {extra[0]!r}; give columns and data (and index)")
    columns, data = value.get("columns"), value.get("data")
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise _shape(f"{where}.columns must be a list of field names")
    if len(set(columns)) != len(columns):
        raise _shape(f"{where}.columns names a field twice")
    if not isinstance(data, list):
        raise _shape(f"{where}.data must be a list of rows (lists of values)")
    index = value.get("index")
    if index is not None and (not isinstance(index, list) or len(index) != len(data)):
        raise _shape(f"{where}.index must be a list as long as data ({len(data)})")
    records = []
    for i, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(columns):
            raise _shape(f"{where}.data[{i}] must be a list of {len(columns)} values (columns)")
        records.append(dict(zip(columns, row, strict=True)))
    return records


def _tf_records(value: Any, key: str) -> list[Any]:
    """`instances` / `inputs`: a list of records, or columns ({"question": ["a", "b"]}), or
    one record ({"question": "a"})."""
    if isinstance(value, list):
        return value
    if not isinstance(value, Mapping):
        raise _shape(f"{key} must be a list of objects, not a {_json_type(value)}")
    columns = {k: v for k, v in value.items() if isinstance(v, list)}
    if not columns:
        return [value]
    if len(columns) != len(value):
        raise _shape(f"{key}: give every field as a list of values (columns) or none")
    lengths = {len(v) for v in columns.values()}
    if len(lengths) != 1:
        raise _shape(f"{key}: its columns differ in length ({sorted(lengths)})")
    (length,) = lengths
    return [{k: v[i] for k, v in columns.items()} for i in range(length)]


def _shape(message: str) -> RequestError:
    return RequestError(message, 400, "INVALID_PARAMETER_VALUE")


def _json_type(value: Any) -> str:
    """A value's type as JSON names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__
