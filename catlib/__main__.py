"""`python -m catlib`: see catlib.cli."""
from .cli import main

raise SystemExit(main())
