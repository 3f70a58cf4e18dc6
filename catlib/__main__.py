"""`python -m catlib`: see catlib.cli.main.commands."""
from .cli.commands import main

raise SystemExit(main())
