"""MLflow models-from-code entry point of the registered RuleRAG model.

`rulerag.serving.packaging.save_rulerag_model` names this file as the pyfunc's code, so MLflow
runs it (rather than unpickling an object) when the model is loaded. Not imported by the
pipeline itself.
"""

import mlflow.models

from rulerag.serving.model import RuleRAGModel

mlflow.models.set_model(RuleRAGModel())
