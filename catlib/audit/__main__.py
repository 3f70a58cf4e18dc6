"""``python -m catlib.audit PATH ...``: the same command as ``python -m catlib audit``."""
import sys

from ..cli.commands import main

raise SystemExit(main(["audit", *sys.argv[1:]]))
