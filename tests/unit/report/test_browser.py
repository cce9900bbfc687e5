"""The HTML report of a real run on the built-in ``local`` cluster, opened in headless Chromium.

One run (FUNC-001 PASS, FUNC-004 SKIP, PERF-001 PASS) gets a plot drawn by :mod:`xpushare.report.plots` into
PERF-001's case directory; ``invoke report --run-id last`` rebuilds ``report.html``. Chromium loads a copy of the
page with a probe script appended that records, after the load event, each image's source kind and natural width
and the text the filter script shows before and after the PASS card is clicked; ``--dump-dom`` returns it.
A screenshot of the page (PERF-001 opened) is taken too; ``XPUSHARE_UPDATE_SCREENSHOT=1`` copies it to
docs/report-screenshot.png.

Without Chromium the test skips, unless ``XPUSHARE_REQUIRE_LAB`` is set (CI), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.report import plots, run_store

ROOT = REPO_ROOT
RUN = f"browser-{os.getpid()}"
FAST = [
    "--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "50"], w6_fixed_add: [--n, "64", --iters, "200", '
    '--no-progress]}',
    "--set", "perf_baseline_min_s=0.0001",
]
PROBE = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var out = {images: imgs.map(function (i) { return [i.src.slice(0, 22), i.complete, i.naturalWidth]; }),
             shown_before: document.getElementById("shown").textContent};
  document.querySelector('.card[data-status="PASS"]').click();
  out.shown_after = document.getElementById("shown").textContent;
  out.hidden = Array.prototype.slice.call(document.querySelectorAll("details.case.hidden"))
    .map(function (d) { return d.dataset.status; });
  document.body.setAttribute("data-probe", JSON.stringify(out));
});
</script>
</body>"""
EXPAND = """<script>
window.addEventListener("load", function () {
  document.querySelector('details[data-suite="performance"]').open = true;
});
</script>
</body>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("XPUSHARE_REQUIRE_LAB"):
        pytest.fail("XPUSHARE_REQUIRE_LAB is set but no Chromium is installed (apt-get install chromium)")
    pytest.skip("no Chromium on PATH (chromium, chromium-browser, google-chrome); set XPUSHARE_REQUIRE_LAB=1 to "
                "make this a failure")


def browse(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=10000", *args], capture_output=True, text=True, timeout=120)


class _Probe(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.value: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.value = dict(attrs).get("data-probe")


def invoke(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)], cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``report.html`` of a local run whose PERF-001 case holds a plot."""
    root = tmp_path_factory.mktemp("root")
    proc = invoke("matrix", "--cluster", "local", "--run-id", RUN, "--case", "FUNC-001", "--case", "FUNC-004",
                  "--case", "PERF-001", *FAST, root=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = run_store.run_dir(root, RUN)
    case_dir = run_dir / "local" / "performance" / "PERF-001"
    baseline = json.loads((case_dir / "result.json").read_text())["metrics"]["baseline_runtime_s"]
    made = plots.runtime_vs_quota(case_dir / "runtime_vs_quota.png", baseline_s=baseline,
                                  runtimes={100: baseline, 50: 2 * baseline, 25: 4.1 * baseline}, tolerance=0.08)
    assert made.path is not None, made.note
    proc = invoke("report", "--run-id", "last", root=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert str(run_dir / "report.html") in proc.stdout
    return run_dir / "report.html"


def test_the_report_renders_in_chromium_with_its_plot_and_filters(report: Path) -> None:
    browser = chromium()
    page = report.read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page, "the report must need no network"
    probe = report.with_name("probe.html")
    probe.write_text(page.replace("</body>", PROBE, 1), encoding="utf-8")
    proc = browse(browser, "--dump-dom", probe.as_uri())
    parser = _Probe()
    parser.feed(proc.stdout)
    assert parser.value, f"the probe did not run: {proc.stderr[-2000:]}"
    seen = json.loads(parser.value)
    assert seen["images"] == [["data:image/png;base64,", True, 700]], seen  # the 7 in x 100 dpi plot, decoded
    assert seen["shown_before"] == "3 of 3 cases shown", seen  # the filter script ran
    assert seen["shown_after"] == "1 of 3 cases shown" and seen["hidden"] == ["PASS", "PASS"], seen


def test_a_screenshot_of_the_report(report: Path, tmp_path: Path) -> None:
    browser = chromium()
    expanded = report.with_name("expanded.html")
    expanded.write_text(report.read_text(encoding="utf-8").replace("</body>", EXPAND, 1), encoding="utf-8")
    shot = tmp_path / "report-screenshot.png"
    proc = browse(browser, f"--screenshot={shot}", "--window-size=1280,1500", expanded.as_uri())
    assert shot.is_file() and shot.read_bytes().startswith(b"\x89PNG"), proc.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    if os.environ.get("XPUSHARE_UPDATE_SCREENSHOT"):
        shutil.copyfile(shot, ROOT / "docs" / "report-screenshot.png")
