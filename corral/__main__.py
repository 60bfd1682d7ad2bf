"""`python -m corral`: the same as the `corral` command."""

import sys

from corral.cli import main

sys.exit(main())
