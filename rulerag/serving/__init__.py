"""The trained RuleRAG as one registered model, served: packaging (`package_model`), the live
answering path (pipeline.py), question linking, the pyfunc, and `make serve`'s app."""
