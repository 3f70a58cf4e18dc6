"""`python -m catlib`: see catlib.cli.main."""
from .cli.main import main

raise SystemExit(main())
