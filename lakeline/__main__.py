"""`python -m lakeline ...` (and the file spark-submit runs)."""

import sys

from lakeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
