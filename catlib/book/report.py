"""Earlier name of :mod:`catlib.book.run_report` (the run report of the reproducibility
page), kept so that old imports work; :mod:`catlib.report` formats the pages' numbers."""
from .run_report import *  # noqa: F401,F403
from .run_report import BOOK_PACKAGES, Record, _now, _update_report  # noqa: F401
