"""`python -m rulerag.tracking ...`: see `rulerag.tracking.cli`."""

import sys

from rulerag.tracking.cli import main

sys.exit(main())
