"""MLflow models-from-code entry point of the registered generator adapters.

`rulerag.tracking.registry.save_generator_model` names this file as the pyfunc's code, so MLflow
runs it (rather than unpickling an object) when the model is loaded: it declares the model
(`AdapterGenerator`: base model + LoRA adapter). Not imported by the pipeline itself.
"""

import mlflow.models

from rulerag.generation.adapter_model import AdapterGenerator

mlflow.models.set_model(AdapterGenerator())
