"""`python -m catlib`: see catlib.cli.commands."""
from .cli.commands import main

raise SystemExit(main())
