"""The trained RuleRAG as one registered model, served: packaging (`package_model`), the live
answering path (pipeline.py), question linking, the pyfunc, and `make serve`'s app.

The service (docs/operations.md, Serving): `app.py` (the FastAPI app: the page and the JSON
API), `protocol.py` (the served model's protocol and MLflow's request formats), `gate.py` (one
answer at a time, a bounded line, a deadline per request), `page.py` (an answer laid out for
the page, `templates/index.html`), `cli.py` (`python -m rulerag.serving`, `make serve`)."""
