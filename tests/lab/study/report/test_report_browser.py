"""The study report in a real browser (headless Chromium through chromedriver): every summary
badge on the first screen, no sideways scroll of the page at a desktop's and a phone's width,
every figure loaded; printed, the folded machinery unfolds and the contents go. Needs Debian's
``chromium`` and ``chromium-driver`` and ``selenium`` (the dev extra); ``.ci/run`` installs
them. Without them the tests skip, except under ``CI=true``, where they fail: CI must not pass
without having looked."""

import json
import os
import shutil
from pathlib import Path

import pytest

CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync")  # fmt: skip


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    if not Path(CHROMEDRIVER).exists() or not shutil.which("chromium"):
        return "no chromium/chromedriver (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = _missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no browser to test the report in: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for flag in (*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    opts.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def viewport(driver, width: int, height: int) -> None:
    """Make the page's viewport (not the window) ``width`` × ``height`` CSS pixels."""
    driver.set_window_size(width, height)
    w, h = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(2 * width - w, 2 * height - h)


LOOK = """
const badges = [...document.querySelectorAll('table.summary .v')].map(e => {
  const r = e.getBoundingClientRect();
  return [e.textContent, r.top, r.bottom, r.left, r.right];
});
const imgs = [...document.images];
return {
  size: [innerWidth, innerHeight],
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  badges: badges,
  images: imgs.length,
  broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
};
"""


def look(driver, page: Path, width: int, height: int = 900) -> dict:
    viewport(driver, width, height)
    driver.get(page.as_uri())
    return driver.execute_script(LOOK)


def check(driver, page: Path, claims: int) -> None:
    seen = look(driver, page, 1280)
    assert seen["size"] == [1280, 900]
    assert len(seen["badges"]) == claims
    for word, top, bottom, left, right in seen["badges"]:
        assert word and 0 <= top and bottom <= 900 and 0 <= left and right <= 1280, word
    assert seen["overflow"] <= 0, "the page scrolls sideways at 1280 px"
    assert seen["images"] >= 1 and seen["broken"] == []
    narrow = look(driver, page, 400)
    assert narrow["overflow"] <= 0, "the page scrolls sideways at 400 px"
    assert narrow["broken"] == []


@pytest.mark.slow  # the smoke study is trained in a process
def test_smoke_report_in_a_browser(browser, smoke_study):
    claims = json.loads((smoke_study / "claims.json").read_text())["claims"]
    check(browser, smoke_study / "report.html", len(claims))


def test_quick_report_in_a_browser(browser, quick_report):
    check(browser, quick_report / "report.html", 12)


def test_quick_report_prints_what_the_screen_folds_away(browser, quick_report):
    folded = "return [...document.querySelectorAll('details table')].map(t => t.checkVisibility())"
    browser.get((quick_report / "report.html").as_uri())
    on_screen = browser.execute_script(folded)
    assert on_screen and not any(on_screen)  # the machinery is folded on the screen
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert all(browser.execute_script(folded))  # and printed in full
        assert not browser.execute_script("return document.querySelector('nav').checkVisibility()")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


def test_the_results_page_shows_ten_answers_on_its_first_screen(browser):
    """docs/results.html at 1280×900: at least 10 statements with their verdicts in view; at
    400 px nothing scrolls the page sideways."""
    page = Path(__file__).resolve().parents[4] / "docs" / "results.html"
    seen = look(browser, page, 1280)
    in_view = [b for b in seen["badges"] if b[1] >= 0 and b[2] <= 900]
    assert len(in_view) >= 10, in_view
    assert seen["overflow"] <= 0 and seen["broken"] == []
    assert look(browser, page, 400)["overflow"] <= 0, "results.html scrolls sideways at 400 px"
