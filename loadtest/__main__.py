"""``python -m loadtest <name>``: the same as ``s2s-bench <name>``."""

import sys

from loadtest.cli import main

sys.exit(main())
