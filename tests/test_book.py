"""The book's runner (profiles, bad input, failing notebooks) and a real-browser check of the build."""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from catlib import book

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
HTML = ROOT / "_build" / "html"


# ------------------------------------------------------------------ profiles

def test_profiles_match_notebooks_and_toc():
    names = book.check_profiles(book.PROFILES, ROOT / "notebooks")
    assert names[:4] == ["01_spectral_kernels", "02_quadrature", "03_sobolev_penalty",
                         "04_depth_solvers"]
    toc = (ROOT / "_toc.yml").read_text()
    in_toc = re.findall(r"file:\s*book/notebooks/(\S+)", toc)
    assert in_toc == names, "every profiled notebook is in _toc.yml, in the same order"


def test_notebook_defaults_are_the_cpu_profile():
    for name, overrides in book.PROFILES["cpu"].items():
        defaults = book.notebook_parameters(ROOT / "notebooks" / f"{name}.ipynb")
        for key, value in overrides.items():
            assert defaults[key] == value, f"{name}: parameter {key} is {defaults[key]!r} in the " \
                                           f"notebook but {value!r} in the cpu profile"


def test_profiles_table_renders():
    table = book.render_profiles()
    assert "| `02_quadrature` | `q_max` |" in table and "smoke" in table.splitlines()[0]


# ------------------------------------------------------------------ bad input

def test_unknown_profile_is_named(capsys):
    with pytest.raises(book.BookError, match=r"unknown profile 'laptop'.*smoke.*cpu.*paper"):
        book.run("laptop", "cpu", root=ROOT)
    assert book.main(["--profile", "laptop", "--no-build"]) == 1
    assert "unknown profile 'laptop'" in capsys.readouterr().err


def test_unknown_parameter_is_named():
    profiles = {p: {n: dict(v) for n, v in t.items()} for p, t in book.PROFILES.items()}
    profiles["smoke"]["02_quadrature"]["q_maximum"] = 7
    with pytest.raises(book.BookError, match=r"smoke.*02_quadrature.*unknown parameter 'q_maximum'"):
        book.check_profiles(profiles, ROOT / "notebooks")
    profiles["smoke"]["02_quadrature"] = {"device": "cuda"}
    with pytest.raises(book.BookError, match=r"'device' is set by the runner"):
        book.check_profiles(profiles, ROOT / "notebooks")


def test_profiles_must_list_the_same_notebooks():
    profiles = {"smoke": {"a": {}, "b": {}}, "cpu": {"a": {}}}
    with pytest.raises(book.BookError, match="every profile lists every notebook"):
        book.check_profiles(profiles)


def test_unknown_notebook_is_named():
    with pytest.raises(book.BookError, match=r"unknown notebook\(s\) \['99_nope'\]"):
        book.run("smoke", "cpu", only=["99_nope"], root=ROOT)


def test_unknown_or_absent_device():
    # The book runner's device is resolved by catlib.common.devices, the one resolver.
    from catlib.common.devices import DeviceError
    with pytest.raises(book.BookError, match="unknown device 'tpu'"):
        book.run("smoke", "tpu", root=book.find_root())
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        book.resolve_device("tpu")
    assert book.resolve_device("cpu").type == "cpu"
    assert book.resolve_device("auto").type in ("cpu", "cuda", "mps")
    import torch
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA is not available"):
            book.resolve_device("cuda")


# ------------------------------------------------------------------ a notebook that raises

def _notebook(path: Path, *sources: str, params: str = 'device = "cpu"\nprofile = ""\nfigure_dir = ""'):
    cells = [new_code_cell(params, metadata={"tags": ["parameters"]})]
    cells += [new_code_cell(src) for src in sources]
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python",
                                                             "display_name": "Python 3"}})
    nbformat.write(nb, str(path))


@pytest.fixture
def tiny_book(tmp_path):
    (tmp_path / "_config.yml").write_text("title: test\n")
    (tmp_path / "notebooks").mkdir()
    _notebook(tmp_path / "notebooks" / "a_ok.ipynb", "print('x is', x)",
              params='device = "cpu"\nprofile = ""\nfigure_dir = ""\nx = 1')
    _notebook(tmp_path / "notebooks" / "b_fails.ipynb", "y = 1", "raise ValueError('boom ' + device)")
    profiles = {"smoke": {"a_ok": {"x": 2}, "b_fails": {}}}
    out = tmp_path / "book" / "notebooks"
    out.mkdir(parents=True)
    (out / "b_fails.ipynb").write_text("the last good execution")
    return tmp_path, profiles, out


def test_failing_notebook_is_named_and_earlier_ones_kept(tiny_book):
    root, profiles, out = tiny_book
    with pytest.raises(book.NotebookFailed) as info:
        book.run("smoke", "cpu", root=root, profiles=profiles, log=lambda *a, **k: None)
    err = info.value
    assert err.name == "b_fails"
    assert err.cell.startswith("cell index 2") and "raise ValueError" in err.cell
    assert err.cause == "ValueError: boom cpu"
    assert "notebook b_fails failed in cell index 2" in str(err)
    executed = nbformat.read(str(out / "a_ok.ipynb"), as_version=4)
    assert "x is 2" in executed.cells[-1].outputs[0]["text"]          # earlier notebook kept
    assert (out / "b_fails.ipynb").read_text() == "the last good execution"
    assert (out / "b_fails.failed.ipynb").exists() and err.saved == out / "b_fails.failed.ipynb"
    report = json.loads((root / "book" / "_generated" / "run_report.json").read_text())
    assert report["notebooks"]["a_ok"]["status"] == "ok"
    assert report["notebooks"]["b_fails"]["status"] == "failed"
    assert "| `b_fails` | smoke | cpu |  | failed |" in (root / "book" / "_generated" / "run_report.md").read_text()


def test_page_shows_the_parameters_once_with_the_values_used(tiny_book):
    # Catches a runner that leaves papermill's injected cell visible (the reader would see the
    # parameters twice) or hides it while the parameters cell still shows the defaults.
    root, profiles, out = tiny_book
    profiles = {"smoke": {"a_ok": {"x": 2}}}
    (root / "notebooks" / "a_ok.ipynb").write_text((root / "notebooks" / "a_ok.ipynb").read_text()
                                                  .replace("x = 1", "x = 1   # the value printed"))
    book.run("smoke", "cpu", root=root, profiles=profiles, log=lambda *a, **k: None)
    nb = nbformat.read(str(out / "a_ok.ipynb"), as_version=4)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and len(injected) == 1
    assert "x = 2   # the value printed" in params[0].source.splitlines()
    assert 'device = "cpu"' in params[0].source and "x = 1" not in params[0].source
    assert "remove-cell" in injected[0].metadata["tags"]
    assert "x is 2" in nb.cells[-1].outputs[0]["text"]


def test_command_line_exits_non_zero_on_a_failing_notebook(tiny_book, monkeypatch, capsys):
    root, profiles, _ = tiny_book
    monkeypatch.chdir(root)
    monkeypatch.setattr(book.profiles, "PROFILES", profiles)   # the table every module reads
    assert book.main(["--profile", "smoke", "--device", "cpu", "--only", "b_fails"]) == 1
    assert "notebook b_fails failed in cell index 2" in capsys.readouterr().err


def _start_slow_build(root: Path, marker: Path) -> subprocess.Popen:
    """A runner subprocess (own session) whose second notebook blocks after writing ``marker``."""
    _notebook(root / "notebooks" / "c_slow.ipynb",
              f"open({str(marker)!r}, 'w').write('started')\nimport time\ntime.sleep(120)")
    script = ("import sys; from catlib import book; "
              "book.profiles.PROFILES = {'smoke': {'a_ok': {'x': 2}, 'c_slow': {}}}; "
              "sys.exit(book.main(['--profile', 'smoke', '--device', 'cpu', '--no-build']))")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=root, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600          # a hang only: the loop ends on the marker
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow notebook never started"
        time.sleep(0.2)
    return proc


@pytest.mark.parametrize("how", ["kill -9", "Ctrl-C"])
def test_interrupted_build_leaves_no_half_written_notebook(tiny_book, how):
    # Catches a runner that executes into book/notebooks/ directly (or stages there): a
    # build killed inside a notebook would leave a partial NAME.ipynb for jupyter-book.
    root, _, out = tiny_book
    (out / "b_fails.ipynb").unlink()
    marker = root / "started"
    proc = _start_slow_build(root, marker)
    if how == "kill -9":
        os.killpg(proc.pid, signal.SIGKILL)          # the runner and its kernel
        proc.wait(timeout=120)                       # timeouts here: hangs only
    else:
        proc.send_signal(signal.SIGINT)              # the runner only, as a terminal's Ctrl-C would
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 130 and "interrupted" in err, err
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)      # a kernel left behind
    assert sorted(p.name for p in out.iterdir()) == ["a_ok.ipynb"]   # finished, nothing else
    nbformat.validate(nbformat.read(str(out / "a_ok.ipynb"), as_version=4))
    # The next build completes.
    _notebook(root / "notebooks" / "c_slow.ipynb", "print('fast now')")
    profiles = {"smoke": {"a_ok": {"x": 2}, "c_slow": {}}}
    book.run("smoke", "cpu", root=root, profiles=profiles, log=lambda *a, **k: None)
    assert sorted(p.name for p in out.iterdir()) == ["a_ok.ipynb", "c_slow.ipynb"]


def test_unparseable_parameter_line_is_refused(tmp_path):
    (tmp_path / "notebooks").mkdir()
    _notebook(tmp_path / "notebooks" / "c.ipynb",
              params='device = "cpu"\nprofile = ""\nfigure_dir = ""\nsteps = 4  # so dt = 1/4')
    with pytest.raises(book.BookError, match=r"papermill cannot parse the parameters \['steps'\]"):
        book.check_profiles({"smoke": {"c": {}}}, tmp_path / "notebooks")


# ------------------------------------------------------------------ a real browser

PROBE = """
<script>
window.addEventListener('load', function () {
  function report() {
    var imgs = Array.from(document.querySelectorAll('article img'));
    var math = Array.from(document.querySelectorAll('article .math'));
    var r = {mathjax: typeof MathJax !== 'undefined' && !!MathJax.startup,
             math: math.length,
             typeset: math.filter(function (m) { return m.querySelector('mjx-container'); }).length,
             images: imgs.length,
             loaded: imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
             broken: imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
                         .map(function (i) { return i.getAttribute('src'); }),
             pageScrolls: document.documentElement.scrollWidth > window.innerWidth,
             wide: []};
    var column = document.querySelector('main').getBoundingClientRect();
    document.querySelectorAll('main table, main pre, main img').forEach(function (el) {
      if (!el.offsetParent) { return; }                    // in a collapsed cell
      var box = el.tagName === 'TABLE' ? el.parentElement : el;
      if (box.scrollWidth > box.clientWidth + 1 || el.getBoundingClientRect().right > column.right + 1) {
        r.wide.push(el.tagName + ': ' + (el.innerText || el.src || '').slice(0, 60));
      }
    });
    var pre = document.createElement('pre');
    pre.id = 'cat-probe';
    pre.textContent = JSON.stringify(r);
    document.body.appendChild(pre);
  }
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(report, report);
  } else {
    setTimeout(report, 2000);
  }
});
</script>
"""


# A page that loads the pages one after another, each in a frame as wide and high as the
# window the checks are about (1,280 x 900), and reports what each page's probe reported.
RUNNER = """<!DOCTYPE html>
<html><body style="margin:0"><script>
var pages = %s, reports = {}, i = 0;
function poll(frame) {
  var pre = frame.contentDocument && frame.contentDocument.getElementById('cat-probe');
  if (!pre) { setTimeout(function () { poll(frame); }, 50); return; }
  reports[pages[i]] = JSON.parse(pre.textContent);
  frame.remove();
  i++;
  next();
}
function next() {
  if (i === pages.length) {
    var pre = document.createElement('pre');
    pre.id = 'cat-probes';
    pre.textContent = JSON.stringify(reports);
    document.body.appendChild(pre);
    return;
  }
  var frame = document.createElement('iframe');
  frame.style.cssText = 'width:1280px;height:900px;border:0;display:block';
  frame.onload = function () { poll(frame); };
  frame.src = pages[i];
  document.body.appendChild(frame);
}
next();
</script></body></html>
"""


def _probe_pages(site: Path, pages: list[Path]) -> dict:
    """Load ``pages`` (HTML files under ``site``) in one headless Chromium, each after
    MathJax ran; return ``{path under site: the injected probe's report}``. One launch for
    every page (measured: 15 pages in 11 s, against 26-37 s for a launch a page, with the
    same reports)."""
    names = [page.relative_to(site).as_posix() for page in pages]
    for page in pages:
        page.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    runner = site / "probe-pages.html"
    runner.write_text(RUNNER % json.dumps(names))
    # Time limits for a hang only (a page loads in seconds): generous for a slow machine.
    # The runner reads its frames' documents: file:// pages may read each other only with
    # --allow-file-access-from-files.
    cmd = ["timeout", "600", str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--allow-file-access-from-files",
           f"--user-data-dir={site / '.chromium-profile'}", "--window-size=1280,900",
           f"--virtual-time-budget={15000 * len(pages)}", "--dump-dom", runner.as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=660).stdout
    found = re.search(r"<pre id=\"cat-probes\"[^>]*>(.*?)</pre>", dom, re.S)
    assert found, f"the probes did not report; Chromium printed {len(dom)} characters of DOM"
    reports = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert sorted(reports) == sorted(names), sorted(set(names) - set(reports))
    return reports


# A table three times as wide as the window, put in a built page as the control of the
# width check: the probe must report it.
WIDE_TABLE = '<table><tr><td style="white-space:nowrap">' + "wide " * 800 + "</td></tr></table>"
CONTROL = "book/wide-control.html"


@pytest.fixture(scope="module")
def browser_reports(tmp_path_factory) -> tuple[dict, dict]:
    """Every page of the built book (``book/*.html``, ``book/notebooks/*.html``) and a
    control page loaded in one headless Chromium, in a copy of the site: ``({path under
    html/: (page's HTML, probe's report)}, the control's report)``. The control is
    ``method.html`` with :data:`WIDE_TABLE` in its article."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: the real-browser check needs Chromium "
                    f"(apt-get install -y chromium); skipped")
    if not (HTML / "book" / "intro.html").exists():
        pytest.skip("the book is not built: run `make book-smoke` (or `make book`) first")
    site = tmp_path_factory.mktemp("browser") / "html"
    shutil.copytree(HTML, site)
    pages = sorted((site / "book").glob("*.html")) + sorted((site / "book" / "notebooks").glob("*.html"))
    texts = {page.relative_to(site).as_posix(): page.read_text() for page in pages}
    control = site / CONTROL
    method = texts["book/method.html"]
    assert "</article>" in method
    control.write_text(method.replace("</article>", WIDE_TABLE + "</article>", 1))
    reports = _probe_pages(site, pages + [control])
    return {name: (text, reports[name]) for name, text in texts.items()}, reports[CONTROL]


@pytest.fixture(scope="module")
def probed(browser_reports) -> dict:
    """``{path under html/: (page's HTML, probe's report)}`` of every page of the built book."""
    return browser_reports[0]


def test_fits_check_sees_a_table_wider_than_the_column(browser_reports):
    # Catches a probe that reports nothing wide whatever the page (a frame narrower or
    # wider than the window, a probe that never measures): the control must fail the check.
    report = browser_reports[1]
    assert report["wide"] and report["wide"][0].startswith("TABLE"), report


@pytest.mark.parametrize("page", ["book/method.html", "book/notebooks/02_quadrature.html"])
def test_browser_typesets_math_and_loads_figures(page, probed):
    assert page in probed, f"{page} is not in the built book: {sorted(probed)}"
    report = probed[page][1]
    assert report["mathjax"], "MathJax did not start (is sphinx-mathjax-offline bundling it?)"
    assert report["math"] >= 5 and report["typeset"] == report["math"], report
    assert report["images"] >= 2 and report["loaded"] == report["images"], report


def test_every_page_fits_1280_px(probed):
    # Catches a table, code box or figure wider than the content column at 1,280 px (it
    # would scroll sideways or be cut off), papermill's injected cell shown, and a path of
    # the machine that built the page.
    assert len(probed) >= 10
    problems = {}
    for name, (text, report) in probed.items():
        shown = re.sub(r"<[^>]+>", " ", text)
        injected = re.search(r'class="[^"]*tag_injected-parameters', text)
        paths = re.findall(r"(?:/tmp|/work|/root|/home)/[\w.-]+/", shown)
        if report["pageScrolls"] or report["wide"] or injected or paths:
            problems[name] = dict(scrolls=report["pageScrolls"], wide=report["wide"],
                                  injected=bool(injected), paths=paths[:3])
    assert not problems, problems


def test_mathjax_is_served_locally():
    if not (HTML / "book" / "method.html").exists():
        pytest.skip("the book is not built: run `make book-smoke` first")
    html = (HTML / "book" / "method.html").read_text()
    scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', html, re.I)
    assert scripts and not any(s.startswith(("http:", "https:", "//")) for s in scripts), scripts
    assert (HTML / "_static" / "mathjax" / "tex-chtml.js").exists()


# ------------------------------------------------------------------ the README's headline table

def test_headline_table_is_labelled_and_copied_into_the_readme(tmp_path):
    (tmp_path / "book" / "_generated").mkdir(parents=True)
    (tmp_path / "book" / "_generated" / "headline_table.md").write_text("| a |\n|---|\n| 1 |\n")
    (tmp_path / "README.md").write_text("intro\n<!-- headline:start -->\nold\n<!-- headline:end -->\nrest\n")
    records = [book.Record("06_context_length", "cpu", "cpu", 1.0, "ok", "now")]
    out = book.publish_headline(tmp_path, "cpu", records)
    text = out.read_text()
    assert out == tmp_path / "results" / "headline_cpu.md"
    assert text.startswith("_Written by `python -m catlib.book --profile cpu` on cpu")
    readme = (tmp_path / "README.md").read_text()
    assert "old" not in readme and "| 1 |" in readme and readme.endswith("<!-- headline:end -->\nrest\n")
    book.publish_headline(tmp_path, "cpu", records)            # idempotent: one copy only
    assert (tmp_path / "README.md").read_text().count("| 1 |") == 1


def test_run_lines_go_to_the_build_log_not_the_page(tmp_path):
    # Catches chapters that print their run logs ("... reused run causal-...", one line per
    # run) in the rendered page: page.build_log sends a line to the runner's log instead.
    (tmp_path / "_config.yml").write_text("title: test\n")
    (tmp_path / "notebooks").mkdir()
    _notebook(tmp_path / "notebooks" / "c_runs.ipynb", "from catlib.book import page\n"
              "for i in range(3):\n    page.build_log(f'row {i} (seed 0): reused run r{i}')\n"
              "print('3 rows, 3 runs: 0 trained, 3 reused')")
    from catlib.book.execution import execute
    logged = []
    execute("c_runs", {"device": "cpu"}, tmp_path / "notebooks", tmp_path / "out",
            log=lambda line, **kw: logged.append(line))
    nb = nbformat.read(str(tmp_path / "out" / "c_runs.ipynb"), as_version=4)
    outputs = [o for o in nb.cells[-1].outputs if o.get("output_type") == "stream"]
    assert "".join(o["text"] for o in outputs) == "3 rows, 3 runs: 0 trained, 3 reused\n", outputs
    assert [line for line in logged if "reused run" in line] == \
        [f"[book]   row {i} (seed 0): reused run r{i}" for i in range(3)], logged


def test_runs_summary_counts_rows_and_runs():
    from types import SimpleNamespace

    from catlib import experiment as ex
    a, b = SimpleNamespace(reused=True), SimpleNamespace(reused=False)
    runs = {("x", 0): a, ("x", 1): b, ("y", 0): a}     # y shares x's seed-0 run
    assert ex.runs_summary(runs) == "2 rows, 3 row-seed pairs, 2 runs: 1 trained here, 1 reused"
