"""The real LLM server for tests (`rulerag.orchestration.local_llm_server`), skipped where it
is not installed."""

from __future__ import annotations

import os

import pytest

from rulerag.orchestration.local_llm_server import MODEL, LlmServer

__all__ = ["MODEL", "REQUIRE_ENV", "LlmServer", "require_llm_server"]

#: `make test` sets it: the server must be installed there (`make setup-llm`), never skipped
REQUIRE_ENV = "RULERAG_REQUIRE_LLM_SERVER"


def require_llm_server() -> None:
    """Skip when llama-cpp-python's server is not installed, unless `REQUIRE_ENV` says it
    must be (CI): then fail, so a broken install is never a silent skip."""
    import importlib.util

    from rulerag.generation.llm_server import SERVER_MODULES

    missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return
    message = f"the LLM server is not installed ({', '.join(missing)}): make setup-llm"
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(message)
    pytest.skip(message)
