"""Check a whole params.yaml before anything runs: `rulerag.params.parse_params`, the same code
every stage reads its params with (each section strictly, then the rules between sections).

`make run`'s run plan (`python -m rulerag.orchestration.run_plan`) calls `check_params` and
`check_environment` before `dvc repro`, and every orchestrator checks the params.yaml a run conf
would produce the same way (`run_conf.validate_run_conf`), so a bad value fails in seconds,
naming its key, instead of after the stages before it have run. `main` checks any params file.

The command line also checks what the run needs from its environment (`check_environment`):
an API key variable when something of the run asks the chat API. That is the shell's, not the
file's, so the Airflow validator (whose workers have an environment of their own, and
connections) does not check it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rulerag.params import Params, parse_params, read_params_file
from rulerag.settings import SettingsError

__all__ = ["api_users", "check_environment", "check_params", "environment_ready", "main"]


def check_params(params: Mapping[str, Any], where: str = "params.yaml") -> Params:
    """The whole file against the schema; SettingsError naming the first problem's key."""
    return parse_params(params, where, check_all=True)


def api_users(params: Params) -> list[str]:
    """What of the run sends prompts to the chat API (`generation.api`): the `api` rows of
    `generation.configs` and `robustness_rows`, of `qa.rows` when there are QA sets, and
    rule retrieval's LLM when its kind is `api` (stage `rule_retrieval_eval` runs for every
    dataset)."""
    generation = params.generation
    users = [f"generation row {name!r}" for name in generation.api_rows()]
    if params.qa.datasets:
        users += [
            f"qa row {name!r}"
            for name in params.qa.rows
            if name in generation.grid and generation.grid[name].generator == "api"
        ]
    if params.rule_retrieval.llm.kind == "api":
        users.append("rule_retrieval.llm (kind: api)")
    return users


def _ask(users: list[str]) -> str:
    return "asks" if len(users) == 1 else "ask"


def check_environment(params: Params, environ: Mapping[str, str] | None = None) -> list[str]:
    """The problems of the environment the run would start in: a run with an `api` user
    (`api_users`) needs one of the key variables `generation.api.key_env` names, set and not
    blank (as `resolve_api_key` reads them; the Makefile's `OPENAI_API_KEY=unused`, a key a
    local server ignores, counts as set). With `airflow_conn_id` the key may be the
    connection's, which only Airflow can resolve: nothing is required then."""
    from rulerag.generation.api import resolve_api_key

    api = params.generation.api
    users = api_users(params)
    if not users or api.airflow_conn_id:
        return []
    names = list(api.key_env)
    if not names:
        return [
            f"{', '.join(users)} {_ask(users)} the chat API, but generation.api.key_env names no "
            "variable to read its key from: name RULERAG_API_KEY (or OPENAI_API_KEY) there and "
            "set it"
        ]
    key, _ = resolve_api_key(names, None, environ=dict(os.environ if environ is None else environ))
    if key:
        return []
    return [
        f"{', '.join(users)} {_ask(users)} the chat API, but {' and '.join(names)} "
        f"{'is' if len(names) == 1 else 'are'} not set (generation.api.key_env): "
        f"export {names[0]}=<your key> before the run (a local server that checks no key: any "
        "value), or set generation.api.airflow_conn_id to an Airflow connection that holds it"
    ]


def main(argv: list[str] | None = None) -> int:
    """Check a params.yaml file (default: the project's), then the environment it would run
    in; exit 2 with the problem."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", nargs="?", default="params.yaml", type=Path)
    path = parser.parse_args(argv).path
    try:
        params = check_params(read_params_file(path), str(path))
    except (SettingsError, OSError) as err:
        print(f"{path}: invalid: {err}", file=sys.stderr)
        return 2
    if not environment_ready(params, str(path)):
        return 2
    print(f"{path}: valid")
    return 0


def environment_ready(params: Params, where: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the run `params` describe can start in this environment (`check_environment`);
    each problem printed to stderr, naming the file that is valid otherwise."""
    problems = check_environment(params, environ)
    for problem in problems:
        print(f"{where}: valid, but the environment is not ready: {problem}", file=sys.stderr)
    return not problems


if __name__ == "__main__":
    sys.exit(main())
