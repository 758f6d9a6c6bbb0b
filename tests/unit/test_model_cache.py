"""Where models are converted when nobody names a folder (`rulerag.model_cache`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rulerag import model_cache
from rulerag.generation import models
from rulerag.retrieval import encoders

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(model_cache.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))


def test_a_checkout_keeps_its_models_beside_it() -> None:
    assert model_cache.default_model_cache() == ROOT / ".models"
    # generators and encoders follow the one rule (the encoders' used to be ~/.cache)
    assert models.default_cache_dir() == encoders.default_cache_dir() == ROOT / ".models"


def test_a_registered_model_never_writes_into_its_artifact_folder(tmp_path: Path) -> None:
    """An MLflow pyfunc carries a copy of the package in `<artifacts>/model/code/rulerag`; the
    folder beside that copy is the artifact store (a 517 MB converted base model landed in
    mlartifacts/.../model/code/.models/ before)."""
    code = tmp_path.joinpath("mlartifacts/1/abc/artifacts/model/code")
    copy = code / "rulerag"
    shutil.copytree(ROOT / "rulerag", copy, ignore=shutil.ignore_patterns("__pycache__"))
    chosen = model_cache.default_model_cache(copy)
    assert chosen == tmp_path / "user-cache" / "rulerag" / "models"
    assert not chosen.is_relative_to(tmp_path / "mlartifacts")
    # a pyproject.toml of another project beside the copy is no checkout of this one
    (code / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    assert model_cache.default_model_cache(copy) == chosen
    (code / "pyproject.toml").write_text("[project\n")  # unreadable: not a checkout either
    assert model_cache.default_model_cache(copy) == chosen


def test_the_variable_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(model_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert model_cache.default_model_cache() == tmp_path / "mine"
    assert models.default_cache_dir() == tmp_path / "mine"
