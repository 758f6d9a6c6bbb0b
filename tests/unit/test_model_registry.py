"""Trained models reach MLflow's Model Registry and load back with MLflow's own loaders (from
the version's folder here; through a tracking server by `models:/` URI in
tests/pipeline/test_tracking_store.py)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from rulerag.tracking import (
    artifact_repository,
    default_tracking_uri,
    local_artifact_path,
    replay_spool,
    stage_run,
)
from rulerag.tracking.registry import registered_name, save_encoder_model, save_generator_model
from tests.helpers import require_minilm, tiny_llama, word_tokenizer

pytestmark = pytest.mark.usefixtures("clean_tracking_env", "one_torch_thread")


def test_registered_names() -> None:
    assert registered_name("icews14", "generator", "rgft") == "rulerag-icews14-generator-rgft"
    assert registered_name("icews14", "retriever", "minilm-rgft") == (
        "rulerag-icews14-retriever-minilm-rgft"
    )
    assert registered_name("my kg", "retriever", "a/b c") == "rulerag-my_kg-retriever-a_b_c"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny random Llama base and a LoRA adapter on it, with the train_stats.json that
    `train_generator` writes (base model, chat template, settings)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    root = tmp_path_factory.mktemp("gen")
    words = "who meets ? Answer: " + " ".join(f"e{i}" for i in range(40))
    tokenizer = word_tokenizer([words])  # most of what a random model says is an entity
    torch.manual_seed(0)
    base = root / "base"
    tiny_llama(tokenizer, initializer_range=0.5).save_pretrained(base)
    tokenizer.save_pretrained(base)
    lora = get_peft_model(
        LlamaForCausalLM.from_pretrained(base),
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    folder = root / "adapter"
    lora.save_pretrained(folder)
    stats = {"base_model": str(base), "chat_template": False, "settings": {"quantization": None}}
    (folder / "train_stats.json").write_text(json.dumps(stats), encoding="utf-8")
    return base, folder


def test_generator_adapter_is_registered_and_loads_as_pyfunc(adapter, tmp_path: Path) -> None:
    import mlflow.pyfunc
    from mlflow import MlflowClient

    from rulerag.generation.local import LocalGenerator

    base, folder = adapter
    uri = default_tracking_uri(tmp_path)
    name = registered_name("toy", "generator", "rgft")
    for loss in (0.5, 0.25):  # two trainings: two versions of one registered model
        with stage_run("train_generator", "toy", project_dir=tmp_path, tracking_uri=uri) as run:
            run.log_metrics({"dev_loss": 0.9}, step=1)
            run.log_metrics({"dev_loss": loss}, step=2)
            run.log_model(
                lambda path: save_generator_model(folder, path),
                "model",
                registered_name=name,
                description="RGFT generator",
            )
    client = MlflowClient(tracking_uri=uri)
    versions = sorted(client.search_model_versions(f"name='{name}'"), key=lambda v: v.version)
    assert [int(v.version) for v in versions] == [1, 2]
    assert versions[1].tags["metric.dev_loss"] == "0.25"  # the last step's value
    assert versions[1].run_id == run.run_id
    assert client.get_registered_model(name).description == "RGFT generator"
    assert versions[1].description == "RGFT generator"
    # the logged model names its version, as mlflow.register_model tags it: MLflow's UI reads
    # this tag to show a logged model's registrations (without it: "Not registered")
    logged = client.get_logged_model(versions[1].source.removeprefix("models:/"))
    assert json.loads(logged.tags["mlflow.modelVersions"]) == [{"name": name, "version": 2}]

    location = client.get_model_version_download_uri(name, versions[1].version)
    model = str(local_artifact_path(location, tmp_path))  # version 2's folder (its logged model)
    mlmodel = (Path(model) / "MLmodel").read_text(encoding="utf-8")  # issue 32, defect 3
    assert f"run_id: {run.run_id}" in mlmodel and "model_id: m-" in mlmodel
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "mlartifacts").rglob("*"))
    prompts = ["who meets e1 ? Answer:", "who meets e3 ? Answer:"]
    loaded = mlflow.pyfunc.load_model(model)
    expected = LocalGenerator.from_pretrained(str(base), adapter=folder, chat_template=False)
    assert loaded.predict(prompts) == expected.generate(prompts)
    plain = LocalGenerator.from_pretrained(str(base), chat_template=False)
    assert expected.generate(prompts) != plain.generate(prompts)  # the adapter is applied
    short = mlflow.pyfunc.load_model(model, model_config={"max_new_tokens": 1})
    assert [len(text.split()) for text in short.predict(prompts)] == [1, 1]  # load-time config
    after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "mlartifacts").rglob("*"))
    assert after == before  # loading wrote nothing into the store (defect 3)


def test_encoder_is_registered_and_loads_as_sentence_transformer(tmp_path: Path) -> None:
    import mlflow.sentence_transformers
    import numpy as np
    from mlflow import MlflowClient

    from rulerag.retrieval import encoders

    require_minilm()
    model = encoders.load_encoder("minilm", device="cpu", max_length=32)
    uri = default_tracking_uri(tmp_path)
    name = registered_name("toy", "retriever", "minilm-rgft")
    with stage_run("train_retriever", "toy", project_dir=tmp_path, tracking_uri=uri) as run:
        run.log_metrics({"heldout_recall_at_10": 0.5})
        run.log_model(lambda path: save_encoder_model(model, path), "model", registered_name=name)
    client = MlflowClient(tracking_uri=uri)
    (version,) = client.search_model_versions(f"name='{name}'")
    assert version.tags["metric.heldout_recall_at_10"] == "0.5"
    location = client.get_model_version_download_uri(name, version.version)
    loaded = mlflow.sentence_transformers.load_model(str(local_artifact_path(location, tmp_path)))
    texts = ["what does Iran Consult ?", "Kerry meets Zarif"]
    assert np.allclose(loaded.encode(texts), model.encode(texts), atol=1e-5)


def test_spooled_model_is_registered_on_replay_and_survives_a_move(adapter, tmp_path) -> None:
    from mlflow import MlflowClient

    _base, folder = adapter
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    old = tmp_path / "old"
    old.mkdir()
    name = registered_name("toy", "generator", "ssft")
    with stage_run("train_generator", "toy", project_dir=old, tracking_uri=dead) as run:
        run.log_model(
            lambda path: save_generator_model(folder, path), "model", registered_name=name
        )
        with pytest.raises(ValueError, match="already used"):
            run.log_model(lambda path: None, "model", registered_name=name)
    assert run.spooled
    uri = default_tracking_uri(old)
    assert replay_spool(old, uri) == 1
    new = tmp_path / "new"
    shutil.move(old, new)
    new_uri = default_tracking_uri(new)
    client = MlflowClient(tracking_uri=new_uri)
    (version,) = client.search_model_versions(f"name='{name}'")
    location = client.get_model_version_download_uri(name, version.version)
    assert location.startswith("mlflow-artifacts:/rulerag/toy/models/m-")  # the logged model's
    assert str(old) not in location
    local = artifact_repository(location, new_uri, new).download_artifacts("MLmodel", str(tmp_path))
    assert "python_function" in Path(local).read_text(encoding="utf-8")
    assert not old.exists()
