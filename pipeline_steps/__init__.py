"""One module per DVC stage: parse arguments, read params, call rulerag, write, log."""
