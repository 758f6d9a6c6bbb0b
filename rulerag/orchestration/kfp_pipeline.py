"""dvc.yaml's stage graph as a Kubeflow Pipelines (KFP v2) pipeline: compile it, run it locally.

The Airflow DAG's twin, built the same way: the stage instances and their edges come from
dvc.yaml through `dvc_graph` (`build_graph`, `stage_edges`), never from a second graph, and
each stage instance is one component whose task runs `dvc repro --single-item <instance>` in a
workspace of its own over the DVC remote (`kfp_tasks.run_stage`, the DAG's workspaces mode).
The pipeline's parameters are the DAG conf's: `datasets`, `stages` and `params` overrides,
checked by the same code (`run_conf.validate_run_conf`) in the first task, `prepare`; the last
tasks, a chain of `collect` links (`LINK_SIZE` stage tasks each, see kfp_tasks), return the
run's dvc.lock (and, for a local run, write it into the project with the outputs pulled). GPU
stages ask for an accelerator, every stage task is retried once, and KFP's cache is off: DVC
decides what reruns.

The KFP SDK compiles (`kfp.compiler.Compiler`, IR YAML) and runs the pipeline on this machine
(`kfp.local.SubprocessRunner`, or `kfp.local.DockerRunner` with the built image: `--runner
docker`). Its pins (protobuf < 7, requests == 2.33.0) clash with the
project's lock, so it lives in a venv of its own (`make kfp` builds `.venv/kfp` from
constraints-kfp.txt) that reads this package through PYTHONPATH; the graph is read, and every
task runs, in the project's interpreter (`python` and `dvc` from PATH). The images in docker/
carry kfp without its dependencies, which is how KFP installs itself into a component's image.

    python -m rulerag.orchestration.kfp_pipeline compile --output kfp/rulerag-pipeline.yaml
    python -m rulerag.orchestration.kfp_pipeline run-local --pipeline kfp/rulerag-pipeline.yaml \\
        --stages ingest mine_rules

No `from __future__ import annotations` here: KFP reads the components' annotations
(`Input[Artifact]`, `-> str`) as objects.
"""

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from kfp import compiler, dsl, kubernetes
from kfp.dsl import Artifact, Input, Output
from kfp.dsl.python_component import PythonComponent

from rulerag.orchestration.dag_settings import GPU_STAGES
from rulerag.orchestration.kfp_local import (
    check_task_env,
    describe_local_run,
    docker_run_args,
    local_run_arguments,
)
from rulerag.orchestration.kfp_tasks import PROJECT_ENV
from rulerag.settings import DATASET_NAME_RE

__all__ = [
    "PIPELINE_NAME",
    "KfpOptions",
    "build_pipeline",
    "compile_pipeline",
    "component_name",
    "main",
    "project_python",
    "read_graph",
    "run_local",
]

PIPELINE_NAME = "rulerag"
#: stage tasks per link of the collect chain: their whole dvc.lock entries (a few KiB each,
#: twice in the executor's input) stay far below Linux's 128 KiB cap on one argument
LINK_SIZE = 8
#: the project's interpreter, when the `python` on PATH is not it
PYTHON_ENV = "RULERAG_PYTHON"
#: the images docker/ builds (docker/README.md); a registry's copy on a cluster
DEFAULT_IMAGE = "rulerag-cpu:latest"
DEFAULT_GPU_IMAGE = "rulerag-gpu:latest"
#: what a GPU stage's pod asks one of (Kubernetes' extended resource of NVIDIA's device plugin)
DEFAULT_ACCELERATOR = "nvidia.com/gpu"
#: the keys of the Kubernetes secret that reach the tasks as environment variables (the DVC
#: remote's S3 credentials, as docker/compose.yaml's MinIO remote needs)
DEFAULT_SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a Docker reference: [registry[:port]/]name[/name...][:tag][@sha256:digest]
_IMAGE_RE = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
_K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# the accelerator: a Kubernetes extended resource (vendor.domain/name) or a KFP type name
_ACCELERATOR_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class KfpOptions:
    """How the compiled pipeline runs on a cluster (a local run ignores images and secrets).

    image / gpu_image: the component images (GPU_STAGES take gpu_image); accelerator: what a
    GPU stage's task asks one of; env: environment variables of every task (the DVC remote's
    name, RULERAG_GIT_SOURCE, MLFLOW_TRACKING_URI, ...; never credentials: KFP writes them into
    every task of the YAML, so a variable that names a secret or a URL with user:password@ is
    refused, `kfp_local.check_task_env`); secret: a Kubernetes secret whose `secret_keys` become
    environment variables of every task; retries: of each stage task, `retry_backoff` apart.
    """

    image: str = DEFAULT_IMAGE
    gpu_image: str = DEFAULT_GPU_IMAGE
    accelerator: str = DEFAULT_ACCELERATOR
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    secret: str | None = None
    secret_keys: Sequence[str] = DEFAULT_SECRET_KEYS
    retries: int = 1
    retry_backoff: str = "30s"

    def __post_init__(self) -> None:
        for what, image in (("image", self.image), ("gpu image", self.gpu_image)):
            if not _IMAGE_RE.match(image):
                raise ValueError(f"KFP {what} {image!r} is not an image reference")
        if not _ACCELERATOR_RE.match(self.accelerator):
            raise ValueError(f"KFP accelerator {self.accelerator!r} is not a resource name")
        for key in (*self.env, *self.secret_keys):
            if not _ENV_KEY_RE.match(key):
                raise ValueError(f"KFP environment variable name {key!r} is not an identifier")
        check_task_env(self.env)  # every path to a compiled YAML builds its options here
        if self.secret is not None and not _K8S_NAME_RE.match(self.secret):
            raise ValueError(f"KFP secret {self.secret!r} is not a Kubernetes object name")
        if self.retries < 0:
            raise ValueError(f"KFP retries must be at least 0, not {self.retries}")
        if not re.fullmatch(r"[0-9]+s", self.retry_backoff):
            raise ValueError(f"KFP retry backoff {self.retry_backoff!r} is not seconds, e.g. 30s")


# --------------------------------------------------------------------------------------------
# The components. KFP copies each function's source into the pipeline (with `_task`), so a
# function imports what it uses and reads no global of this module. Each starts its task in
# the project's interpreter (`kfp_tasks`): KFP's executor runs wherever kfp is installed.
# --------------------------------------------------------------------------------------------


def _task(args: list) -> str:
    """Run `python -m rulerag.orchestration.kfp_tasks <args>` (the `python` on PATH, or
    RULERAG_PYTHON), its log to this task's log; its result."""
    import os
    import shutil
    import subprocess
    import tempfile

    python = os.environ.get("RULERAG_PYTHON") or shutil.which("python") or shutil.which("python3")
    if not python:
        raise RuntimeError("no python on PATH to run the project's task with")
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result")
        command = [python, "-m", "rulerag.orchestration.kfp_tasks", *args, "--output", result]
        done = subprocess.run(command, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kfp_tasks {args[0]} exited with status {done.returncode}")
        with open(result, encoding="utf-8") as handle:
            return handle.read()


def prepare(
    datasets: list,
    stages: list,
    params: dict,
    commit: str,
    compiled: list,
    compiled_datasets: list,
    run_id: str,
    state: Output[Artifact],
) -> str:
    """Check the run's datasets, stages and params overrides; write the run state."""
    import json

    conf = {"datasets": datasets, "stages": stages, "params": params}
    return _task([
        "prepare", "--conf", json.dumps(conf), "--commit", commit,
        "--compiled", json.dumps(compiled), "--compiled-datasets", json.dumps(compiled_datasets),
        "--run-id", run_id, "--state", state.path,
    ])  # fmt: skip


def run_stage(
    instance: str, upstream: list, upstream_tokens: str, state: Input[Artifact]
) -> NamedTuple("Outputs", [("entry", str), ("pull", str)]):
    """dvc repro --single-item <instance> in a workspace over the DVC remote."""
    import json
    from collections import namedtuple

    result = json.loads(_task([
        "run-stage", "--instance", instance, "--upstream", json.dumps(upstream),
        "--tokens", upstream_tokens, "--state", state.path,
    ]))  # fmt: skip
    return namedtuple("Outputs", ["entry", "pull"])(result["entry"], result["pull"])


def collect(
    tokens: str,
    into_project: bool,
    previous: Input[Artifact],
    state: Input[Artifact],
    lock: Output[Artifact],
) -> str:
    """A link of the collect chain: the previous link's dvc.lock with these entries put in;
    the last link, with into_project, writes it into the project and pulls the outputs."""
    args = ["collect", "--tokens", tokens, "--state", state.path, "--previous", previous.path,
            "--lock", lock.path]  # fmt: skip
    return _task([*args, "--into-project"] if into_project else args)


# --------------------------------------------------------------------------------------------
# The pipeline
# --------------------------------------------------------------------------------------------


def component_name(instance: str) -> str:
    """The KFP name of a stage instance's component and task: `ingest@icews14` ->
    `ingest-icews14` (KFP keeps lower-case letters, digits and `-`)."""
    return re.sub("-+", "-", re.sub("[^-0-9a-z]+", "-", instance.lower())).strip("-")


def _component(func: Any, image: str) -> PythonComponent:
    # kfp ships with the images (docker/) and the local venv: no pip install in the task
    return dsl.component(
        func, base_image=image, install_kfp_package=False, additional_funcs=[_task]
    )


def _named(base: PythonComponent, instance: str) -> PythonComponent:
    """`base` under the stage instance's own name, so the compiled pipeline, KFP's UI and
    kfp.local's logs show the task `ingest-icews14` (display name `ingest@icews14`), not
    `run-stage-7`. (The decorator names a component after its function, and one function
    serves every instance.)"""
    spec = dataclasses.replace(base.component_spec, name=component_name(instance))
    return PythonComponent(component_spec=spec, python_func=base.python_func)


def _configure(task: Any, options: KfpOptions) -> Any:
    """What every task has: no KFP cache (DVC decides), the cluster's environment."""
    task.set_caching_options(enable_caching=False)
    for key, value in options.env.items():
        task.set_env_variable(key, value)
    if options.secret is not None:
        kubernetes.use_secret_as_env(
            task, secret_name=options.secret, secret_key_to_env={k: k for k in options.secret_keys}
        )
    return task


def project_python(env: Mapping[str, str] | None = None) -> str:
    """The project's interpreter: RULERAG_PYTHON, else the `python` on PATH (the Makefile puts
    the project venv's first). Never this one: the KFP SDK's venv lacks the library."""
    env = os.environ if env is None else env
    found = env.get(PYTHON_ENV) or shutil.which("python", path=env.get("PATH"))
    if not found or not os.access(found, os.X_OK):
        raise ValueError(
            f"no project interpreter: set {PYTHON_ENV} or put the project's venv on PATH"
        )
    # venvs link to one base interpreter: compare their bin/ folders, not the resolved files
    if Path(os.path.abspath(found)).parent == Path(os.path.abspath(sys.executable)).parent:
        raise ValueError(
            f"{found} is the KFP SDK's interpreter, not the project's: set {PYTHON_ENV} or put"
            " the project's venv first on PATH"
        )
    return found


def read_graph(project: Path, datasets: Sequence[str] | None = None) -> dict[str, Any]:
    """`kfp_tasks graph` in the project's interpreter: the stage instances (dvc_graph's) of
    `datasets` (None: params.yaml's), their commands and upstream instances, as data."""
    for name in datasets or ():
        if not DATASET_NAME_RE.match(name):  # a name reaches a command line: check it first
            raise ValueError(f"KFP datasets: {name!r} is not a dataset name")
    command = [project_python(), "-m", "rulerag.orchestration.kfp_tasks", "graph",
               "--project-dir", str(project), "--datasets", *(datasets or ())]  # fmt: skip
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"reading the stage graph failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def build_pipeline(
    project: str | Path,
    datasets: Sequence[str] | None = None,
    options: KfpOptions | None = None,
    graph: Mapping[str, Any] | None = None,
) -> Any:
    """The KFP pipeline of the stage instances of `datasets` (None: params.yaml's datasets).

    Its parameters: `datasets`, `stages` (dvc.yaml stage names) and `params` (dotted
    params.yaml keys -> values), each empty by default (as params.yaml has it); `commit`
    (the commit the workspaces check out, default: the project's HEAD where the task runs);
    `collect_into_project` (a local run: the project ends with the run's outputs).
    `graph`: `read_graph`'s result, if already read.
    """
    project = Path(project).resolve()
    options = options or KfpOptions()
    graph = read_graph(project, datasets) if graph is None else graph
    instances, chosen = list(graph["instances"]), list(graph["datasets"])
    names = [inst["name"] for inst in instances]
    if not names:
        raise ValueError(f"dvc.yaml generates no stage instance for {', '.join(chosen)}")
    kfp_names: dict[str, str] = {}
    links = -(-len(names) // LINK_SIZE)
    for name in [*names, "prepare", "collect", *(f"collect-{i}" for i in range(1, links))]:
        other = kfp_names.setdefault(component_name(name), name)
        if other != name:
            raise ValueError(
                f"{other!r} and {name!r} share the KFP task name {component_name(name)!r}"
            )
    cpu = {f: _component(f, options.image) for f in (prepare, run_stage, collect)}
    gpu_stage = _component(run_stage, options.gpu_image)

    @dsl.pipeline(
        name=PIPELINE_NAME,
        description="RuleRAG: the stages of dvc.yaml, one task per stage instance"
        f" ({', '.join(chosen)}), each a `dvc repro --single-item` over the DVC remote",
    )
    def rulerag(
        datasets: list = [],  # noqa: B006 (KFP: the parameter's default, never mutated)
        stages: list = [],  # noqa: B006
        params: dict = {},  # noqa: B006
        commit: str = "",
        collect_into_project: bool = False,
    ) -> str:
        first = cpu[prepare](
            datasets=datasets, stages=stages, params=params, commit=commit, compiled=names,
            compiled_datasets=chosen, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        )  # fmt: skip
        _configure(first, options).set_display_name("prepare")
        tasks: dict[str, Any] = {}
        for inst in instances:
            ups = list(inst["upstream"])
            is_gpu = inst["stage"] in GPU_STAGES
            component = _named(gpu_stage if is_gpu else cpu[run_stage], inst["name"])
            task = component(
                instance=inst["name"],
                upstream=ups,
                upstream_tokens=" ".join(str(tasks[u].outputs["pull"]) for u in ups),
                state=first.outputs["state"],
            )
            _configure(task, options).set_display_name(inst["name"])
            task.set_retry(num_retries=options.retries, backoff_duration=options.retry_backoff)
            if is_gpu:
                task.set_accelerator_type(options.accelerator).set_accelerator_limit(1)
            tasks[inst["name"]] = task
        # the collect chain: each link takes the whole entries of LINK_SIZE stage tasks (in
        # the graph's order, so early links run early) and the lock the previous link wrote
        links = [names[i : i + LINK_SIZE] for i in range(0, len(names), LINK_SIZE)]
        previous = first.outputs["state"]
        for number, link in enumerate(links, start=1):
            final = number == len(links)
            step = _named(cpu[collect], "collect" if final else f"collect-{number}")(
                tokens=" ".join(str(tasks[name].outputs["entry"]) for name in link),
                into_project=collect_into_project if final else False,
                previous=previous,
                state=first.outputs["state"],
            )
            _configure(step, options).set_display_name(
                "collect" if final else f"collect {number} of {len(links)}"
            )
            previous = step.outputs["lock"]
        return step.outputs["Output"]

    return rulerag


def compile_pipeline(
    project: str | Path,
    output: str | Path,
    datasets: Sequence[str] | None = None,
    options: KfpOptions | None = None,
) -> Path:
    """Compile the pipeline to KFP's IR YAML at `output` (KFP's own compiler)."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build_pipeline(project, datasets, options), str(output))
    return output


RUNNERS = ("subprocess", "docker")


def run_local(
    pipeline: str | Path,
    project: str | Path,
    pipeline_root: str | Path,
    arguments: Mapping[str, Any] | None = None,
    runner: str = "subprocess",
    mounts: Sequence[Path] = (),
) -> str:
    """Run a compiled pipeline on this machine against `project`; the `collect` task's summary
    (JSON). `runner`: KFP's subprocess runner, in this interpreter (no venv per task), `dvc`
    and the stages' `python` from PATH (the project's venv first); or its Docker runner, each
    task in a container of the component's image (`rulerag-cpu:latest` unless compiled with
    another) with the host paths it needs mounted (`docker_run_args`; `mounts`: more of them,
    e.g. a local-path DVC remote). A pipeline compiled with `--env` hands its tasks that
    environment instead of the host's (KFP's Docker runner replaces it). The run collects into
    the project unless it overrides `params` (`local_run_arguments`): then its dvc.lock stays
    in `collect`'s artifact, whose path the summary names (`describe_local_run`)."""
    from kfp import components, local

    if runner not in RUNNERS:
        raise ValueError(f"kfp runner {runner!r} is not one of {', '.join(RUNNERS)}")
    project = Path(project).resolve()
    os.environ[PROJECT_ENV] = str(project)
    chosen = (
        local.DockerRunner(**docker_run_args(project, mounts))
        if runner == "docker"
        else local.SubprocessRunner(use_venv=False)
    )
    local.init(runner=chosen, pipeline_root=str(Path(pipeline_root).resolve()))
    loaded = components.load_component_from_file(str(pipeline))
    run = loaded(**local_run_arguments(arguments))
    return str(run.output)


# --------------------------------------------------------------------------------------------
# Command line (`make kfp`, `make kfp-local`)
# --------------------------------------------------------------------------------------------


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _param_overrides(items: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs, each value read as YAML (`3`, `true`, `[a, b]`), as `dvc exp run -S`."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    return {key: yaml.load(value) for key, value in _pairs(items, "--param").items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--project-dir", type=Path, default=Path.cwd())
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="write the pipeline's IR YAML")
    comp.add_argument("--output", type=Path, default=Path("kfp/rulerag-pipeline.yaml"))
    comp.add_argument("--datasets", nargs="+", help="default: params.yaml's datasets")
    comp.add_argument("--image", default=DEFAULT_IMAGE)
    comp.add_argument("--gpu-image", default=DEFAULT_GPU_IMAGE)
    comp.add_argument("--accelerator", default=DEFAULT_ACCELERATOR)
    comp.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE",
                      help="environment of every task (no credentials: --secret)")  # fmt: skip
    comp.add_argument("--secret", help="Kubernetes secret whose keys become the tasks' env")
    comp.add_argument("--secret-keys", nargs="+", default=list(DEFAULT_SECRET_KEYS))
    local = sub.add_parser("run-local", help="run a compiled pipeline with kfp.local")
    local.add_argument("--pipeline", type=Path, default=Path("kfp/rulerag-pipeline.yaml"))
    local.add_argument("--pipeline-root", type=Path, default=Path("kfp/local"))
    local.add_argument("--datasets", nargs="+", default=[])
    local.add_argument("--stages", nargs="+", default=[])
    local.add_argument("--param", nargs="*", default=[], metavar="KEY=VALUE")
    local.add_argument("--timings", type=Path, help="write the run's wall time (JSON) here")
    local.add_argument(
        "--runner",
        choices=RUNNERS,
        default="subprocess",
        help="tasks as processes here, or in containers of the built image",
    )
    local.add_argument(
        "--mount",
        nargs="*",
        type=Path,
        default=[],
        help="more host folders the tasks' containers see (--runner docker)",
    )
    args = parser.parse_args(argv)
    project = args.project_dir.resolve()
    try:
        if args.command == "compile":
            options = KfpOptions(
                image=args.image, gpu_image=args.gpu_image, accelerator=args.accelerator,
                env=_pairs(args.env, "--env"), secret=args.secret, secret_keys=args.secret_keys,
            )  # fmt: skip
            path = compile_pipeline(project, args.output, args.datasets, options)
            print(f"wrote {path}")
            return 0
        arguments = {
            "datasets": args.datasets,
            "stages": args.stages,
            "params": _param_overrides(args.param),
        }
        start = time.monotonic()
        summary = run_local(args.pipeline, project, args.pipeline_root, arguments,
                            runner=args.runner, mounts=args.mount)  # fmt: skip
        seconds = time.monotonic() - start
        print(f"KFP local run: {summary} ({seconds:.1f} s)")
        print(describe_local_run(json.loads(summary)))
        if args.timings:
            args.timings.write_text(json.dumps({"seconds": seconds, **json.loads(summary)}))
        return 0
    except (ValueError, OSError) as err:
        print(f"kfp: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:  # kfp.local: a task failed (its log says why, above)
        print(f"kfp: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
