"""rulerag: rule-guided retrieval-augmented generation over knowledge graphs.

The library holds algorithms and data types only; `pipeline_steps/` wires them into DVC stages.
"""

__version__ = "0.1.0"
