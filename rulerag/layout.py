"""Where every file of one dataset lives: `data/<dataset>/...`, named once.

dvc.yaml declares these paths as the stages' deps and outs; the stages, the library, the report
and the tests find them through a `DataLayout` rather than joining path parts by hand, so a
renamed folder is one edit here (and one in dvc.yaml, which a test compares with the stages'
real outputs).

    kg/                 facts, entities, relations (Parquet), stats.json      ingest
    download/           source files fetched when there is no local mirror    ingest
    rules/              rules.parquet, bank.parquet, rules.txt, stats.json    mine_rules
    benchmark/          corpus.jsonl/.parquet, test/f_r/f_g/robust.jsonl      build_benchmark
    rule_application/   answers.jsonl, metrics.json, results.md               apply_rules
    retrieval/          index/<name>/, stats/, cache/, models/, training/,    index, retrieve,
                        checkpoints/, <config>/run.parquet, report/           train_retriever
    generation/<row>/   predictions.jsonl, metrics.json                       generate
    generation/robust/<row>/                                                  robustness
    generation/adapters/<variant>/, r2ag_models/<variant>/                    train_*
    report/             results.md/.csv/.png, claims.csv                      report
    rule_retrieval/     results.md/.csv, selections.parquet, ...              rule_retrieval_eval
    qa/                 metrics.json, results.md                              qa_rag
    generalisation/     results.md, gains.csv, cells.csv, gains.png           generalisation
    export/             huggingface/, dpr/, rulerag_official/, stats.json     export
    model/              metrics.json (the registered model's row and size)    package_model
    cache/              rule_llm.sqlite (LLM answers kept across reruns; no stage output)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rulerag.errors import InputError

__all__ = ["ROBUST", "RUN_FG_FILENAME", "RUN_FILENAME", "DataLayout", "MissingInputError"]

#: The retrieval stage's run files, read by the generator stages.
RUN_FILENAME = "run.parquet"  # test queries
RUN_FG_FILENAME = "run_fg.parquet"  # F_G queries (the generator's training data)
#: the query set of the robustness rows (benchmark/robust.jsonl, generation/robust/<row>/)
ROBUST = "robust"

#: stages that dvc.yaml runs once per dataset (`foreach`), so `<stage>@<dataset>` names the
#: instance that writes a file; the others run per dataset and item (`matrix`)
_PER_DATASET = frozenset(
    {"ingest", "mine_rules", "build_benchmark", "apply_rules", "retrieval_report", "report",
     "rule_retrieval_eval", "qa_rag", "generalisation", "export", "package_model"}
)  # fmt: skip


#: the stage that writes a QA dataset's benchmark/, rules/bank.parquet, retrieval/ and
#: generation/ itself (dvc.yaml's qa_rag), where a KG's are written by the stages above
_QA_STAGE = "qa_rag"


class MissingInputError(InputError):
    """A stage input that is not there: the stage that writes it has not run for the dataset,
    or its output was deleted since (`DataLayout.missing_input`)."""


@dataclass(frozen=True)
class DataLayout:
    """The paths of one dataset's files under `root` (= data/<dataset>)."""

    root: Path

    @classmethod
    def of(cls, data_root: Path, dataset: str) -> DataLayout:
        """The layout of `dataset` under a project's data folder."""
        return cls(Path(data_root) / dataset)

    @property
    def dataset(self) -> str:
        return self.root.name

    # -- who writes what (the table above) --------------------------------------------------
    def writer(self, path: Path) -> str | None:
        """The stage that writes `path` (a file or folder of this dataset's), by its script's
        name (`retrieve` also runs as retrieve_finetuned, `generate` as generate_r2ag); None
        for a path no stage writes (a cache, or one outside `root`). The deepest folder of
        `_writers` that holds `path` decides."""
        path = Path(os.path.abspath(path))
        if path.parent == Path(os.path.abspath(self.generation)):  # a training run's figures
            for kind in ("train_r2ag", "train"):  # train_r2ag_<variant>.json, ..._loss.csv
                if path.name.startswith(f"{kind}_"):
                    return "train_generator" if kind == "train" else kind
        found: tuple[int, str | None] = (0, None)
        for folder, stage in self._writers():
            folder = Path(os.path.abspath(folder))
            if path.is_relative_to(folder) and len(folder.parts) > found[0]:
                found = (len(folder.parts), stage)
        return found[1]

    def _writers(self) -> list[tuple[Path, str | None]]:
        """Each stage's folders (None: a cache no stage declares), named by the paths below."""
        some = "*"  # any name: its parent is the folder of every name
        return [
            (self.kg, "ingest"),
            (self.download, "ingest"),
            (self.rules_dir, "mine_rules"),
            (self.benchmark, "build_benchmark"),
            (self.rule_application, "apply_rules"),
            (self.retrieval, "retrieve"),  # retrieval/<config>/
            (self.indexes, "index"),
            (self.index_stats(some).parent, "index"),
            (self.cache(some).parent, None),
            (self.model(some).parent, "train_retriever"),
            (self.training(some).parent, "train_retriever"),
            (self.checkpoints(some).parent, "train_retriever"),
            (self.retrieval_report, "retrieval_report"),
            (self.generation, "generate"),  # generation/<row>/
            (self.row(some, ROBUST).parent, "robustness"),
            (self.adapter(some).parent, "train_generator"),
            (self.r2ag_model(some).parent, "train_r2ag"),
            (self.report, "report"),
            (self.rule_retrieval, "rule_retrieval_eval"),
            (self.qa, "qa_rag"),
            (self.generalisation, "generalisation"),
            (self.export, "export"),
            (self.packaged, "package_model"),
            (self.rule_llm_cache.parent, None),
        ]

    def missing_input(
        self, path: Path, reader: str, reader_dataset: str | None = None
    ) -> MissingInputError | None:
        """The error for a stage (`reader`, running for `reader_dataset`) that found its input
        `path` missing: one line naming the file and the stage instance to rerun. None where
        no other stage writes `path`: a stage's own file missing is a bug, which keeps its
        traceback, and so is every file of a QA dataset to qa_rag, which writes them all."""
        writer = self.writer(path)
        if writer is None or writer == reader:
            return None
        if reader == _QA_STAGE and reader_dataset == self.dataset:
            return None
        dataset = self.dataset
        if writer in _PER_DATASET:
            rerun = f"rerun {writer}@{dataset} (dvc repro {writer}@{dataset})"
        else:
            rerun = f"rerun {writer} for {dataset} (dvc repro {writer}@{dataset}-<item>)"
        return MissingInputError(
            f"{path}: no such file; it is an output of {writer}, which has not run for "
            f"{dataset} or whose output was deleted since: {rerun}, then {reader}"
        )

    # -- kg/ (ingest) ---------------------------------------------------------------------
    @property
    def kg(self) -> Path:
        return self.root / "kg"

    @property
    def facts(self) -> Path:
        return self.kg / "facts.parquet"

    @property
    def entities(self) -> Path:
        return self.kg / "entities.parquet"

    @property
    def relations(self) -> Path:
        return self.kg / "relations.parquet"

    @property
    def kg_stats(self) -> Path:
        return self.kg / "stats.json"

    @property
    def download(self) -> Path:
        return self.root / "download"

    # -- rules/ (mine_rules) ------------------------------------------------------------------
    @property
    def rules_dir(self) -> Path:
        return self.root / "rules"

    @property
    def rules(self) -> Path:
        """Every mined rule with its statistics."""
        return self.rules_dir / "rules.parquet"

    @property
    def rule_bank(self) -> Path:
        """The RuleRAG rule bank (the rules the benchmark selects from)."""
        return self.rules_dir / "bank.parquet"

    # -- benchmark/ (build_benchmark) -------------------------------------------------------
    @property
    def benchmark(self) -> Path:
        return self.root / "benchmark"

    @property
    def corpus(self) -> Path:
        """Pyserini's JsonCollection format: {"id", "contents"} per line."""
        return self.benchmark / "corpus.jsonl"

    @property
    def corpus_table(self) -> Path:
        """The corpus with its structured fields (head, relation, tail, time)."""
        return self.benchmark / "corpus.parquet"

    def queries(self, split: str) -> Path:
        """`test`, `f_g`, `robust` (query sets) or `f_r` (training items)."""
        return self.benchmark / f"{split}.jsonl"

    # -- rule_application/ (apply_rules) ------------------------------------------------------
    @property
    def rule_application(self) -> Path:
        return self.root / "rule_application"

    @property
    def rule_answers(self) -> Path:
        """The rules' explained candidates per test query (symbolic, evidence and rank rows)."""
        return self.rule_application / "answers.jsonl"

    # -- retrieval/ (index, train_retriever, retrieve, retrieval_report) ---------------------
    @property
    def retrieval(self) -> Path:
        return self.root / "retrieval"

    @property
    def indexes(self) -> Path:
        """The folder of every index (`index(name)`)."""
        return self.retrieval / "index"

    def index(self, name: str) -> Path:
        return self.indexes / name

    def index_stats(self, name: str) -> Path:
        return self.retrieval / "stats" / f"index-{name}.json"

    def cache(self, name: str) -> Path:
        """Corpus-embedding chunks (persisted between runs, never part of the index out)."""
        return self.retrieval / "cache" / name

    def model(self, name: str) -> Path:
        """A fine-tuned query encoder (`minilm-rgft`)."""
        return self.retrieval / "models" / name

    def training(self, name: str) -> Path:
        return self.retrieval / "training" / name

    def checkpoints(self, name: str) -> Path:
        return self.retrieval / "checkpoints" / name

    def output(self, config: str) -> Path:
        """A retrieval configuration's folder (`minilm-rg`)."""
        return self.retrieval / config

    def run(self, config: str, split: str = "test") -> Path:
        """A retrieval configuration's run over the test (or F_G) queries."""
        return self.output(config) / (RUN_FILENAME if split == "test" else RUN_FG_FILENAME)

    def retrieval_metrics(self, config: str) -> Path:
        """A retrieval configuration's Recall@k figures (metrics.json, read by the report)."""
        return self.output(config) / "metrics.json"

    @property
    def retrieval_report(self) -> Path:
        return self.retrieval / "report"

    # -- generation/ (generate, train_generator, train_r2ag, robustness) ---------------------
    @property
    def generation(self) -> Path:
        return self.root / "generation"

    def row(self, config: str, query_set: str = "test") -> Path:
        """A grid row's predictions.jsonl and metrics.json (robustness rows: robust/<row>)."""
        if query_set == "test":
            return self.generation / config
        return self.generation / query_set / config

    def adapter(self, variant: str) -> Path:
        """A LoRA adapter trained by `train_generator` (rgft, ssft)."""
        return self.generation / "adapters" / variant

    def r2ag_model(self, variant: str) -> Path:
        """An R²-Former (and LoRA, if any) trained by `train_r2ag`."""
        return self.generation / "r2ag_models" / variant

    def train_stats(self, variant: str, kind: str = "train") -> Path:
        """`train_<variant>.json` (kind `train`) or `train_r2ag_<variant>.json` (`train_r2ag`)."""
        return self.generation / f"{kind}_{variant}.json"

    def loss_curve(self, variant: str, kind: str = "train") -> Path:
        """`train_<variant>_loss.csv` (DVC plot) beside the statistics."""
        return self.generation / f"{kind}_{variant}_loss.csv"

    # -- the reports ----------------------------------------------------------------------
    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def rule_retrieval(self) -> Path:
        return self.root / "rule_retrieval"

    @property
    def qa(self) -> Path:
        return self.root / "qa"

    @property
    def generalisation(self) -> Path:
        return self.root / "generalisation"

    @property
    def export(self) -> Path:
        """RuleQA in others' formats (`export`): replaced as a whole folder."""
        return self.root / "export"

    @property
    def packaged(self) -> Path:
        """What `package_model` records of the model it registered (the model itself is in
        the MLflow store: `rulerag-<dataset>`)."""
        return self.root / "model"

    # -- caches that are no stage output --------------------------------------------------
    @property
    def rule_llm_cache(self) -> Path:
        """The LLM answers of rule retrieval (self-induced rules, R³ rankings), shared by
        build_benchmark's selection and rule_retrieval_eval, so neither pays a prompt the
        other has sent; kept across reruns."""
        return self.root / "cache" / "rule_llm.sqlite"

    @property
    def api_answer_cache(self) -> Path:
        """The answers of the grid's `generator: api` rows (`answer_cache.CachedGenerator`):
        a rerun sends no request it has sent before, a killed run resumes; kept across
        reruns, no stage output."""
        return self.root / "cache" / "api_answers.sqlite"
