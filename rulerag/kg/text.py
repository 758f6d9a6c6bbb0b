"""The paper's text forms of a KG link: a linearised link as a document, a link without its
object as a query, in one place.

They sit beside `schema.format_time` (the time as these texts write it) because every floor
above the KG writes links this way: the benchmark's corpus and queries, the rules' evidence
(`rules.answers`) and the generator's prompt templates.

Temporal document: `Time 2014-06-23 Abdullah Abdullah Make a visit Afghanistan.`
Static document:   `Barack Obama profession lawyer.`
Temporal query:    `Time 2014-12-01 what does Abdullah Abdullah Make a visit ?`
Static query:      `what does Barack Obama profession ?`
"""

from __future__ import annotations


def document_text(head: str, relation: str, tail: str, time: str | None) -> str:
    """One KG link as one short document."""
    core = f"{head} {relation} {tail}."
    return f"Time {time} {core}" if time is not None else core


def query_text(head: str, relation: str, time: str | None) -> str:
    """A link with its object removed, as a question."""
    core = f"what does {head} {relation} ?"
    return f"Time {time} {core}" if time is not None else core
