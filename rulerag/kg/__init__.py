"""Knowledge-graph ingestion: source readers, the dataset registry, the canonical schema."""

from rulerag.kg.errors import DatasetNotFoundError, KGFormatError
from rulerag.kg.schema import KnowledgeGraph

__all__ = ["DatasetNotFoundError", "KGFormatError", "KnowledgeGraph"]
