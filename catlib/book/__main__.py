"""``python -m catlib.book``: see :mod:`catlib.book.cli`."""
import sys

from .cli import main

if __name__ == "__main__":     # not when imported (pkgutil.walk_packages imports every module)
    sys.exit(main())
