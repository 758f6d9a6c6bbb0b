"""What every stage script shares: its arguments, params.yaml as `Params`, the dataset's
`DataLayout`, its MLflow run, the way it fails, and metric selection.

A stage script is a shell around one library call:

    stage = stage_inputs("generate", argv, __doc__, config="a name in generation.grid")
    with stage.track(params=...) as run:
        result = library_call(stage.params.<section>, stage.layout, ...)
        ...write result..., run.log_metrics(...)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pipeline_steps import STARTED_BY, parent_of
from rulerag.errors import InputError
from rulerag.layout import DataLayout
from rulerag.model_cache import CACHE_ENV
from rulerag.params import Params, load_params, read_params_file
from rulerag.prctl import set_parent_death_signal
from rulerag.settings import SettingsError, check_dataset_name, check_name
from rulerag.tracking import (
    TAG_STAGE_INSTANCE,
    StageRun,
    StageTerminated,
    stage_process_run,
    stage_run,
    stop_on_sigterm,
)

#: the project root (the folder holding dvc.yaml); stages run with it as working directory
PROJECT_DIR = Path(__file__).resolve().parents[1]
#: models converted or downloaded by the stages: this project's .models (ignored by git), or
#: RULERAG_MODEL_CACHE (a DAG task's workspace shares the main workspace's), as
#: `rulerag.model_cache` decides for a caller that names no folder
MODEL_CACHE = Path(os.environ.get(CACHE_ENV) or PROJECT_DIR / ".models")
#: every dataset's outputs: data/<dataset>/
DATA_DIR = PROJECT_DIR / "data"


@dataclass(frozen=True)
class Stage:
    """One stage invocation: its name, dataset, arguments, params and the dataset's files."""

    name: str
    dataset: str
    args: argparse.Namespace
    params: Params
    layout: DataLayout
    #: converted and downloaded models (`MODEL_CACHE` when the stage started)
    model_cache: Path

    def layout_of(self, dataset: str) -> DataLayout:
        """Another dataset's files (qa_rag reads a KG's rule bank)."""
        return DataLayout.of(DATA_DIR, dataset)

    @contextmanager
    def track(
        self,
        params: Mapping[str, Any] | None = None,
        *,
        stage: str | None = None,
        instance: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Iterator[StageRun]:
        """The stage's MLflow run (`rulerag.tracking.stage_run`), tagged with its instance
        (`<stage>@<dataset>[-<item>]`, the name Airflow's task shows) and `tags`, carrying
        params.yaml whole for its pipeline run's parent run. An input that another stage
        writes and that is missing fails it as one line naming both (`_missing_inputs`)."""
        stage = stage or self.name
        with (
            stage_run(stage, self.dataset, project_dir=PROJECT_DIR, params=params) as run,
            _missing_inputs(self.name, self.dataset),  # so the run records the one line
        ):
            # all of params.yaml, for the pipeline run's parent run (rulerag.tracking.parent)
            run.log_pipeline_params(read_params_file(self.args.params))
            if instance is not None or tags:
                run.set_tags(
                    {TAG_STAGE_INSTANCE: f"{stage}@{self.dataset}{instance or ''}", **(tags or {})}
                )
            yield run


def stage_inputs(
    stage: str,
    argv: Sequence[str] | None,
    description: str | None,
    choices: Mapping[str, Sequence[str]] | None = None,
    **options: str,
) -> Stage:
    """Parse a stage's command line and read params.yaml once.

    Every stage takes `--dataset` (checked by the one name rule) and `--params` (default: the
    project's params.yaml); `options` adds one `--<name>` per keyword (its help text), `choices`
    limits some of them. Under DVC the stage's items come from the name of the stage instance
    DVC runs (`DVC_STAGE`, `items_from_stage_name`) where the command line does not give them:
    dvc.yaml's commands interpolate no value, so no name in params.yaml reaches a shell.
    """
    parser = _StageParser(description=(description or "").split("\n\n")[0])
    parser.add_argument("--dataset", type=_dataset_name, help="dataset name")
    parser.add_argument(
        "--params", type=Path, default=PROJECT_DIR / "params.yaml", help="params file"
    )
    for name, text in options.items():
        parser.add_argument(f"--{name}", help=text)
    args = parser.parse_args(argv)
    named = ["dataset", *options]
    if any(getattr(args, name) is None for name in named):
        try:
            items = items_from_stage_name(os.environ.get(DVC_STAGE_ENV), list(options))
        except SettingsError as err:
            parser.error(str(err))
        for name in named:
            if getattr(args, name) is None:
                setattr(args, name, items[name])
    for name, allowed in (choices or {}).items():
        if getattr(args, name) not in allowed:
            parser.error(f"--{name}: {getattr(args, name)!r} is not one of {list(allowed)}")
    return Stage(
        name=stage,
        dataset=args.dataset,
        args=args,
        params=load_params(args.params),
        layout=DataLayout.of(DATA_DIR, args.dataset),
        model_cache=MODEL_CACHE,
    )


#: what DVC names the stage instance it runs in its command's environment (`ingest@icews14`)
DVC_STAGE_ENV = "DVC_STAGE"


def items_from_stage_name(stage_name: str | None, options: Sequence[str]) -> dict[str, str]:
    """A stage instance's items, read from its DVC name: `<stage>@<dataset>[-<item>...]`.

    dvc.yaml names a foreach instance by its item (`ingest@icews14`) and a matrix instance by
    its items joined with '-' in the matrix's order, the dataset first (`train_retriever@
    icews14-minilm-rgft`). Names follow the one name rule (no '-'), so the parts split back
    unambiguously: one option takes the rest joined (`retrieve@icews14-bm25-rg`: config
    `bm25-rg`), several take one part each. Every part must follow the rule: a name that slipped
    into params.yaml past the checks fails here, before anything is read or written.
    """
    if not stage_name:
        raise SettingsError(
            f"no --dataset given and no {DVC_STAGE_ENV} (dvc repro names the stage it runs)"
        )
    _, at, key = stage_name.rpartition(":")[2].partition("@")
    if not at:
        raise SettingsError(f"{DVC_STAGE_ENV}={stage_name!r} names no item (<stage>@<item>)")
    dataset, *rest = key.split("-")
    check_dataset_name(dataset)
    for part in rest:
        check_name(part, f"item of stage {stage_name!r}")
    if len(options) == 1 and rest:
        return {"dataset": dataset, options[0]: "-".join(rest)}
    if len(rest) != len(options):
        raise SettingsError(
            f"{DVC_STAGE_ENV}={stage_name!r}: expected {len(options)} item(s) after the dataset "
            f"({', '.join(options) or 'none'}), got {len(rest)}"
        )
    return {"dataset": dataset, **dict(zip(options, rest, strict=True))}


def run_stage(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a stage's `main`; input the user can fix fails with its message and exit status 2.

    An `InputError` (a params.yaml key, a KG file, a cut-short stage output...) names what to
    fix, so it is printed without a traceback. The stage's MLflow run is open before `main`
    reads anything (`_process_run`), so it is recorded FAILED with the message wherever it was
    raised. SIGTERM stops the stage as an exception (`StageTerminated`): its run is recorded
    KILLED, nothing half-written is published, and the exit status is 128 + the signal's
    number, as a shell reports it. An input file that another stage writes and that is not
    there is an `InputError` too (`_missing_inputs`). Any other exception is a bug and keeps
    its traceback.
    Under DVC the stage also stops when its dvc dies (`_exits_with_dvc`), so a `kill -9` of
    dvc alone cannot leave it to publish outputs that dvc.lock does not describe.
    """
    module = main.__module__
    if module == "__main__":  # `python -m pipeline_steps.<stage>`: the module's real name
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    stage = module.rpartition(".")[2]
    arguments = sys.argv[1:] if argv is None else argv
    try:
        with (
            stop_on_sigterm(),
            _process_run(stage, arguments),
            _exits_with_dvc(),
            _missing_inputs(stage, _running_dataset(arguments)),
        ):
            return main(argv)
    except InputError as err:
        print(f"{stage} failed: {err}", file=sys.stderr)
        return 2
    except StageTerminated as stop:
        print(f"{stage} {stop}: what it had staged was discarded", file=sys.stderr)
        return 128 + stop.signum


@contextmanager
def _missing_inputs(stage: str, dataset: str | None) -> Iterator[None]:
    """A stage input under data/ that is not there, as one line naming the file and the
    stage to rerun (`DataLayout.missing_input`), for every stage (`stage`, running for
    `dataset`) and whichever reader opened it (`io.read_parquet`, `iter_jsonl`, `open`): a
    deleted rules/bank.parquet ended build_benchmark in a `FileNotFoundError` traceback. A
    missing file that no other stage writes (outside data/, a cache, the stage's own output)
    is a bug and stays one. `run_stage` applies it to the whole stage, `Stage.track` inside
    the stage's MLflow run, which then records that line rather than the `OSError`."""
    try:
        yield
    except FileNotFoundError as err:
        if err.filename is None:
            raise
        path = Path(os.path.abspath(os.fsdecode(err.filename)))
        data = Path(os.path.abspath(DATA_DIR))
        if not path.is_relative_to(data) or len(path.relative_to(data).parts) < 2:
            raise
        layout = DataLayout.of(DATA_DIR, path.relative_to(data).parts[0])
        missing = layout.missing_input(path, stage, dataset)
        if missing is None:
            raise
        raise missing from err


def _running_dataset(argv: Sequence[str]) -> str | None:
    """The dataset the stage runs for: `--dataset`, else the DVC stage instance's first item."""
    key = (os.environ.get(DVC_STAGE_ENV) or "").rpartition(":")[2].partition("@")[2]
    return _dataset_argument(argv) or key.split("-")[0] or None


# --------------------------------------------------------------------------------------------
# Stopping: a stage never outlives the dvc that runs it
# --------------------------------------------------------------------------------------------


#: shells that may run DVC's `$SHELL -c <cmd>` without exec'ing the command (dash does not)
_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "mksh", "ash", "busybox", "fish"})


def _is_shell(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as handle:
            return handle.read().strip() in _SHELLS
    except OSError:
        return False


@contextmanager
def _exits_with_dvc() -> Iterator[None]:
    """Under DVC (`DVC_STAGE` set), SIGTERM to this stage when dvc dies, whatever killed it.

    dvc runs the command as `$SHELL -c <cmd>`: bash exec's it, so dvc is the parent, and the
    kernel signals its death (`PR_SET_PDEATHSIG`); dash (`/bin/sh` where SHELL is unset, as in
    containers) stays in between, alive, so a thread watches the shell's parent (dvc) and
    signals when it changes. If dvc died before this was armed (while the stage imported), the
    stage stops at once. Elsewhere than Linux, or run by hand, nothing changes."""
    if DVC_STAGE_ENV not in os.environ or not set_parent_death_signal(signal.SIGTERM):
        yield
        return
    parent, grandparent = STARTED_BY
    done = threading.Event()
    try:
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
        elif grandparent is not None and _is_shell(parent):
            watch = threading.Thread(
                target=_watch_shell, args=(parent, grandparent, done), daemon=True
            )
            watch.start()
        yield
    finally:
        done.set()
        set_parent_death_signal(0)


def _watch_shell(shell: int, dvc: int, done: threading.Event) -> None:
    """SIGTERM to the main thread (where it interrupts a sleep or a read) once `shell` is no
    longer dvc's child (dvc died: the shell went to init) or is gone; checked twice a second
    until `done`."""
    while True:
        if parent_of(shell) != dvc:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
            return
        if done.wait(0.5):
            return


def _dataset_name(text: str) -> str:
    try:
        return check_dataset_name(text)
    except SettingsError as err:  # argparse shows this message and exits 2
        raise argparse.ArgumentTypeError(str(err)) from None


def numeric_metrics(stats: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten the numbers of a stats dict into MLflow metric names (`splits.train` -> ...)."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(numeric_metrics(value, f"{name}_"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


# -- the stage's MLflow run from its first line (issue 28, part 6) ------------------------------


class UsageError(SystemExit):
    """argparse's exit (status 2) that keeps its message, so the MLflow run can say why."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


class _StageParser(argparse.ArgumentParser):
    """argparse, whose errors (printed as usual) exit with a `UsageError`."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        text = f"{self.prog}: error: {message}"
        print(text, file=sys.stderr)
        raise UsageError(text)


def _process_run(module_stage: str, argv: Sequence[str]) -> contextlib.AbstractContextManager:
    """The stage process's MLflow run (`rulerag.tracking.stage_process_run`), opened before
    `stage_inputs` reads params or inputs, so their errors are recorded; `Stage.track` adopts
    it. Named from `--dataset` on the command line, else from the DVC stage instance
    (`DVC_STAGE`, whose stage and instance name it then). Without a valid dataset name there
    is no experiment to record into: the stage then fails at `stage_inputs` as a usage error.
    """
    stage, dataset, instance = module_stage, _dataset_argument(argv), None
    dvc_name = os.environ.get(DVC_STAGE_ENV) or ""
    dvc_stage, _, key = dvc_name.rpartition(":")[2].partition("@")
    if dataset is None:
        dataset = key.split("-")[0]
    if key and dataset == key.split("-")[0]:
        stage, instance = dvc_stage, f"{dvc_stage}@{key}"
    try:
        check_dataset_name(dataset)
        check_name(stage, "stage name")
    except SettingsError:
        return contextlib.nullcontext()
    return stage_process_run(stage, dataset, project_dir=PROJECT_DIR, instance=instance)


def _dataset_argument(argv: Sequence[str]) -> str | None:
    """`--dataset` of a command line, as `stage_inputs` will read it (None when absent)."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--dataset")
    try:
        return parser.parse_known_args(list(argv))[0].dataset
    except (argparse.ArgumentError, SystemExit):
        return None
