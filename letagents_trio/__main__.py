"""``python -m letagents_trio``: the ``letagents-trio`` command, for when it is not on PATH."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
