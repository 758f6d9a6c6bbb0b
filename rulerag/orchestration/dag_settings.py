"""How the Airflow DAG runs its stage tasks, from environment variables read when the DAG is
parsed (the scheduler's and the workers' environment; never the DAG run's conf, which only
changes params).

serial (the default, for a laptop): every task runs `dvc repro --single-item` in the project
folder, one at a time, since DVC locks the workspace. workspaces: each task runs in a
workspace of its own and exchanges outputs through a DVC remote (`workspaces.py`), up to
`parallelism` at a time, on whatever workers the executor has (Celery, Kubernetes, local).
Training and generation tasks can be routed to a queue of GPU workers and held to a pool
whose slots are the GPUs present.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GPU_STAGES", "DagSettings"]

MODE_ENV = "RULERAG_DAG_MODE"
PARALLELISM_ENV = "RULERAG_DAG_PARALLELISM"
REMOTE_ENV = "RULERAG_DVC_REMOTE"
ROOT_ENV = "RULERAG_WORKSPACE_ROOT"
SOURCE_ENV = "RULERAG_GIT_SOURCE"
KEEP_ENV = "RULERAG_KEEP_WORKSPACES"
GPU_QUEUE_ENV = "RULERAG_GPU_QUEUE"
GPU_POOL_ENV = "RULERAG_GPU_POOL"
GPU_RESOURCE_ENV = "RULERAG_GPU_RESOURCE"
MODES = ("serial", "workspaces")

#: dvc.yaml stages that train or run a neural generator or encoder at length: the ones a GPU
#: queue and pool take (encoding-only stages such as `index` stay on the CPU workers' queue)
GPU_STAGES = frozenset(
    {
        "train_retriever",
        "train_generator",
        "train_r2ag",
        "generate",
        "generate_r2ag",
        "rule_retrieval_eval",
        "generalisation",
        "robustness",
        "qa_rag",
    }
)


@dataclass(frozen=True)
class DagSettings:
    """mode: `serial` or `workspaces`; parallelism: stage tasks at a time in `workspaces`
    mode; remote: the DVC remote outputs go through (None: the project's default remote);
    root: where workspaces are created (None: the system's temporary folder); source: the
    git repository workspaces are cloned from (None: the project folder; a URL when workers
    run on other machines); keep: leave each workspace in place after its task (to look into
    a failure); gpu_queue / gpu_pool: the Airflow queue and pool of GPU_STAGES' tasks (None:
    the default queue, no pool); gpu_resource: on Kubernetes, the extended resource each
    GPU_STAGES pod asks one of (e.g. `nvidia.com/gpu`; None: none)."""

    mode: str = "serial"
    parallelism: int = 4
    remote: str | None = None
    root: Path | None = None
    source: str | None = None
    keep: bool = False
    gpu_queue: str | None = None
    gpu_pool: str | None = None
    gpu_resource: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.parallelism < 1:
            raise ValueError(f"{PARALLELISM_ENV} must be at least 1, not {self.parallelism}")

    @property
    def max_active_tasks(self) -> int:
        """One at a time in the shared workspace; `parallelism` with workspaces of their own."""
        return self.parallelism if self.mode == "workspaces" else 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DagSettings:
        """The settings from the RULERAG_DAG_MODE, RULERAG_DAG_PARALLELISM,
        RULERAG_DVC_REMOTE, RULERAG_WORKSPACE_ROOT, RULERAG_GIT_SOURCE,
        RULERAG_KEEP_WORKSPACES, RULERAG_GPU_QUEUE, RULERAG_GPU_POOL and RULERAG_GPU_RESOURCE
        variables (unset or empty: the defaults above)."""
        env = os.environ if env is None else env
        raw = env.get(PARALLELISM_ENV) or str(cls.parallelism)
        try:
            parallelism = int(raw)
        except ValueError:
            raise ValueError(f"{PARALLELISM_ENV} must be an integer, not {raw!r}") from None
        root = env.get(ROOT_ENV)
        return cls(
            mode=env.get(MODE_ENV) or cls.mode,
            parallelism=parallelism,
            remote=env.get(REMOTE_ENV) or None,
            root=Path(root) if root else None,
            source=env.get(SOURCE_ENV) or None,
            keep=(env.get(KEEP_ENV) or "").lower() in ("1", "true", "yes"),
            gpu_queue=env.get(GPU_QUEUE_ENV) or None,
            gpu_pool=env.get(GPU_POOL_ENV) or None,
            gpu_resource=env.get(GPU_RESOURCE_ENV) or None,
        )
