"""`python -m rulerag.serving`: see `rulerag.serving.cli`."""

import sys

from rulerag.serving.cli import main

sys.exit(main())
