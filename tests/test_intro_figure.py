"""The intro's figure (issue 61, item 7): the comparison with the Euler CAT, not chapter 11's
frontier. Reads the checkout's own pages (the root above the imported ``catlib``), so that
it can be run against an older checkout."""
from __future__ import annotations

import json
import re
from pathlib import Path

import catlib
from catlib.book.locate import find_root


def test_intro_shows_the_rows_against_the_euler_cat_not_the_frontier():
    """Issue 61, item 7: the intro showed chapter 11's frontier (thirteen lines, overlapping
    bands). Now chapter 11 shows the frontier without saving it for another page, and the
    intro's figure is the comparison with the Euler CAT, captioned from the notebook."""
    root = find_root(Path(catlib.__file__).parent)
    intro = (root / "book" / "intro.md").read_text(encoding="utf-8")
    cells = json.loads((root / "notebooks" / "11_scale.ipynb").read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert not re.search(r"page\.show\(fig, \"[^\"]*frontier", code), "the frontier saved for the intro"
    from catlib.book import scale_figure as sf

    assert re.findall(r"```\{figure\} figures/(\S+)", intro) == [sf.FILE]
    assert "notebooks/11_scale.ipynb::figure_seeds" in intro and 'glue("figure_seeds"' in code
