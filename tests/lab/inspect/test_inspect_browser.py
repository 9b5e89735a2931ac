"""The inspect report in a real browser (headless Chromium, as the study report's test runs
it): its first screen states the hazards in words, every figure loads, and the page never
scrolls sideways. Skipped without Chromium, except under ``CI=true``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "study" / "report"))
from test_report_browser import browser, viewport  # noqa: E402, F401  (the fixture)
from tiny_models import tiny_dirs  # noqa: E402

from normlab.lab.cli import main  # noqa: E402

PUBLISHED = Path(__file__).resolve().parents[3] / "docs" / "inspect-minilm" / "report.html"
FIRST_SCREEN = """
const h = document.getElementById('hazards');
const items = [...h.nextElementSibling.querySelectorAll('li')].map(li => {
  const r = li.getBoundingClientRect();
  return [li.textContent, r.top, r.bottom];
});
const imgs = [...document.images];
return {
  items: items,
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  images: imgs.length,
  broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
};
"""


def _first_screen(driver, page: Path, width: int = 1280, height: int = 900) -> dict:
    viewport(driver, width, height)
    driver.get(page.as_uri())
    return driver.execute_script(FIRST_SCREEN)


def check(driver, page: Path) -> list[str]:
    """The hazards, all on the first screen at 1280×900; the page's figures load; at 400 px
    nothing scrolls sideways. Returns the hazards' texts."""
    seen = _first_screen(driver, page)
    assert len(seen["items"]) == 5
    for text, top, bottom in seen["items"]:
        assert 0 <= top and bottom <= 900, text
    assert seen["overflow"] <= 0 and seen["images"] == 4 and seen["broken"] == []
    assert _first_screen(driver, page, 400)["overflow"] <= 0
    texts = [t for t, _, _ in seen["items"]]
    assert "BF16" in texts[0] and "FP16" in texts[1] and "eval()" in texts[3]
    return texts


def test_a_fresh_reports_first_screen_states_the_hazards(browser, tmp_path):  # noqa: F811
    out = tmp_path / "bert"
    argv = [
        "inspect",
        str(tiny_dirs()["bert"]),
        "--out",
        str(out),
        "--tokens",
        "96",
        "--chunk",
        "24",
    ]
    assert main([*argv, "--quiet"]) == 0
    texts = check(browser, out / "report.html")
    assert texts[3].startswith("Forgetting eval() changes the outputs.")  # BERT has dropout


def test_the_published_minilm_reports_first_screen_states_the_hazards(browser):  # noqa: F811
    texts = check(browser, PUBLISHED)
    assert "eps 1e-12 is 0 in FP16" in texts[1]
