"""The web console in a real headless Chromium (Debian's chromium + chromedriver, installed by `make
install`), against a running `tickwork local`: create a job with its live preview, pause and resume it, run
it now and watch the run succeed, see a field error for an invalid expression, and a second owner sees none
of the first owner's jobs. Each page's screenshot is written to docs/ by this run."""

from __future__ import annotations

import base64
import re
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.local.harness import TOKEN, Supervisor, Target, api_call, free_port, wait_until

selenium = pytest.importorskip(
    "selenium", reason="selenium is missing: `make install` installs the dev extra"
)
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "docs" / "console"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
OTHER_TOKEN = "other-token"
FIRES = "//h2[.='Next 10 fires']/following-sibling::table[1]/tbody/tr"

pytestmark = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
    reason="Debian's chromium and chromium-driver are missing: `make install` installs them",
)


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    state_dir = tmp_path_factory.mktemp("tickwork-console")
    with Supervisor(state_dir, "--engine", "sqlite", "--token", f"{OTHER_TOKEN}=other") as supervisor:
        yield supervisor


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    with Target() as t:
        yield t


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER, port=free_port()))
    try:
        yield driver
    finally:
        driver.quit()


def until(what: str, condition: Callable[[], Any], timeout: float = 20) -> None:
    def holds() -> bool:
        try:
            return bool(condition())
        except (NoSuchElementException, StaleElementReferenceException):
            return False  # not rendered yet, or re-rendered under us: look again

    wait_until(what, holds, timeout, step=0.2)


def find(browser: WebDriver, css: str) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, css)


def button(browser: WebDriver, text: str) -> WebElement:
    return browser.find_element(By.XPATH, f"//button[normalize-space()='{text}']")


def shot(browser: WebDriver, name: str) -> None:
    """The whole page, not only the first screen (Chromium's DevTools capture beyond the viewport). Every
    page shot is also checked for text below WCAG AA contrast."""
    assert low_contrast_text(browser) == [], name
    assert badly_named_inputs(browser) == [], name
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    data = browser.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True,
         "clip": {"x": 0, "y": 0, "width": 1280, "height": max(height, 600), "scale": 1}},
    )  # fmt: skip
    (SHOTS / f"{name}.png").write_bytes(base64.b64decode(data["data"]))


def sign_in(browser: WebDriver, instance: Supervisor, token: str) -> None:
    # A fresh page load with no stored token: whoever signed in before is forgotten.
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/signin")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    until("the sign-in form", lambda: find(browser, "#token"))
    find(browser, "#token").send_keys(token)
    button(browser, "Sign in").click()
    until("the jobs page", lambda: find(browser, "h1").text == "Jobs")


def tab_to(browser: WebDriver, text: str, limit: int = 40) -> bool:
    """Press Tab until the focused element's text is `text` (at most `limit` times)."""
    for _ in range(limit):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.execute_script("return document.activeElement.textContent.trim()") == text:
            return True
    return False


# WCAG 2 contrast of every visible text against its effective background: a list of what falls below AA
# (4.5:1, or 3:1 for large text). Disabled controls are exempt, as WCAG exempts inactive components.
LOW_CONTRAST_JS = """
const channel = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
const rgba = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
const luminance = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
const background = (element) => {
  for (let e = element; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
  }
  return [255, 255, 255];
};
const low = [];
for (const element of document.querySelectorAll("body *")) {
  const own = [...element.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!own || !element.getClientRects().length || element.closest("[disabled], .skip")) continue;
  const style = getComputedStyle(element);
  if (style.visibility === "hidden") continue;
  const ink = element instanceof SVGElement ? style.fill : style.color;  // SVG text is painted by fill
  const [fg, bg] = [luminance(rgba(ink).slice(0, 3)), luminance(background(element))];
  const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
  const size = parseFloat(style.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
  const what = `${element.tagName} "${element.textContent.trim().slice(0, 40)}"`;
  if (ratio < (large ? 3 : 4.5)) low.push(`${what} ${ratio.toFixed(2)}`);
}
return low;
"""


def low_contrast_text(browser: WebDriver) -> list[str]:
    return list(browser.execute_script(LOW_CONTRAST_JS))


def badly_named_inputs(browser: WebDriver) -> list[str]:
    """Inputs whose accessible name (as Chromium computes it) is not exactly their label's text: no label,
    or an error message or other text read as part of the name."""
    wrong = []
    for element in browser.find_elements(By.CSS_SELECTOR, "input, select"):
        element_id = element.get_attribute("id")
        labels = browser.find_elements(By.CSS_SELECTOR, f"label[for='{element_id}']") if element_id else []
        if not labels or element.accessible_name != labels[0].text.strip():
            wrong.append(f"{element.get_attribute('outerHTML')} named {element.accessible_name!r}")
    return wrong


def test_a_job_created_previewed_paused_resumed_and_run_in_the_console(
    browser: WebDriver, instance: Supervisor, target: Target
) -> None:
    sign_in(browser, instance, TOKEN)
    browser.find_element(By.LINK_TEXT, "New job").click()
    until("the new-job form", lambda: find(browser, "#expression"))
    find(browser, "#name").send_keys("console nightly")
    find(browser, "#expression").send_keys("30 2 * * *")
    find(browser, "#timezone").clear()
    find(browser, "#timezone").send_keys("Europe/Berlin")
    find(browser, "#url").send_keys(f"{target.url}/console")
    until("the live preview", lambda: len(browser.find_elements(By.CSS_SELECTOR, "#preview li")) == 5)
    assert "every day at 02:30" in find(browser, "#preview").text
    shot(browser, "new-job")
    button(browser, "Create job").click()
    until("the job's page", lambda: find(browser, "h1").text == "console nightly")
    until(
        "the next 10 fires",
        lambda: (
            len(
                browser.find_elements(
                    By.XPATH, "//h2[.='Next 10 fires']/following-sibling::table[1]/tbody/tr"
                )
            )
            == 10
        ),
    )
    job_url = browser.current_url

    button(browser, "Pause").click()  # a pause says why: nothing is sent without it
    until("why asked", lambda: "Say why you pause it" in find(browser, "#status").text)
    assert find(browser, "dl.def .state").text == "active"
    find(browser, "#action-note").send_keys("quiet hours")
    button(browser, "Pause").click()
    until("the job paused", lambda: find(browser, "dl.def .state").text == "paused")
    button(browser, "Resume").click()
    until("the job active again", lambda: find(browser, "dl.def .state").text == "active")

    button(browser, "Run now").click()
    until("the run now listed", lambda: "manual" in find(browser, "#runs").text, timeout=20)
    until("the run to succeed", lambda: "succeeded" in find(browser, "#runs tbody").text, timeout=45)
    assert any(call["path"] == "/console" for call in target.calls), target.calls
    # A second run gives the start-delay and duration chart its two points.
    until("Run now ready again", lambda: button(browser, "Run now").is_enabled())
    button(browser, "Run now").click()
    until(
        "two runs succeeded",
        lambda: find(browser, "#runs tbody").text.count("succeeded") == 2,
        timeout=45,
    )
    until("the chart", lambda: browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline"))
    shot(browser, "job")

    browser.find_element(By.CSS_SELECTOR, "#runs tbody a").click()
    until("the run's timeline", lambda: "attempt 1" in find(browser, ".timeline").text)
    assert "succeeded" in find(browser, "dl.def").text
    shot(browser, "run")

    browser.get(job_url)
    until("the edit form", lambda: find(browser, "#expression").get_attribute("value") == "30 2 * * *")
    expression = find(browser, "#expression")
    expression.clear()
    expression.send_keys("61 * * * *")
    until("the field error", lambda: "61" in find(browser, "#expression-error").text)
    assert expression.get_attribute("aria-invalid") == "true"
    assert button(browser, "Save schedule").get_attribute("disabled") is not None
    shot(browser, "invalid-expression")

    browser.find_element(By.LINK_TEXT, "Jobs").click()
    until("the job in the list", lambda: "console nightly" in find(browser, "main table").text)
    assert find(browser, "nav a[aria-current='page']").text == "Jobs"
    shot(browser, "jobs")


def test_failed_runs_and_health(browser: WebDriver, instance: Supervisor) -> None:
    closed = f"http://127.0.0.1:{free_port()}/"
    status, job = instance.call(
        "POST",
        "/jobs",
        {
            "name": "console failing",
            "schedule": {"expression": "0 4 * * *"},
            "target": {"kind": "http", "config": {"url": closed}},
            "policies": {"retry": {"max_attempts": 1}},
        },
    )
    assert status == 201, job
    status, run = instance.call("POST", f"/jobs/{job['id']}/runs")
    assert status == 201, run
    wait_until(
        "the run to fail",
        lambda: instance.call("GET", f"/jobs/{job['id']}/runs/{run['id']}")[1]["state"] == "failed",
        30,
    )
    sign_in(browser, instance, TOKEN)
    browser.find_element(By.LINK_TEXT, "Failed runs").click()
    until("the failed run listed", lambda: run["id"] in find(browser, "main").text)
    shot(browser, "failed-runs")
    # By keyboard alone: Tab reaches the skip link, then the run's link; Enter opens it, and Enter on the
    # focused Retry button retries.
    assert tab_to(browser, "Skip to content"), "the skip link is not reachable by Tab"
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    assert browser.execute_script("return document.activeElement.id") == "main"
    assert find(browser, "h1").text == "Failed runs (last 24 hours)"  # the page stays: no route change
    assert tab_to(browser, run["id"]), "the failed run's link is not reachable by Tab"
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    until("the run page", lambda: button(browser, "Retry"))
    assert tab_to(browser, "Retry"), "Retry is not reachable by Tab"
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    until("the retry", lambda: "Retry started" in find(browser, "#status").text)

    browser.find_element(By.LINK_TEXT, "Health").click()
    until("the health cards", lambda: "Runs in flight" in find(browser, "main").text, timeout=30)
    in_flight = find(browser, "main .grid .card").text.splitlines()
    assert in_flight[0] == "Runs in flight" and re.fullmatch(r"\d+ / 200", in_flight[1]), in_flight
    shot(browser, "health")


def test_events_across_jobs_and_on_the_page_of_a_job_that_paused_itself(
    browser: WebDriver, instance: Supervisor
) -> None:
    """Issue 32: two failures in a row pause the job (its rule); the events page lists both failures and the
    auto-pause, the job's page says why it is paused and shows its events; another owner sees none."""
    closed = f"http://127.0.0.1:{free_port()}/"
    status, job = instance.call(
        "POST",
        "/jobs",
        {
            "name": "console alerting",
            "schedule": {"expression": "0 7 * * *"},
            "target": {"kind": "http", "config": {"url": closed}},
            "policies": {"retry": {"max_attempts": 1}},
            "alerts": {"auto_pause_after": 2, "late_after_seconds": 600},
        },
    )
    assert status == 201, job

    def kinds() -> list[str]:
        answer = instance.call("GET", f"/events?job_id={job['id']}")[1]
        return [e["kind"] for e in answer["items"]]

    for count in (1, 2):
        status, run = instance.call("POST", f"/jobs/{job['id']}/runs")
        assert status == 201, run
        wait_until(f"failure {count} recorded", lambda: kinds().count("run_failed") == count, 30)  # noqa: B023
    wait_until("the auto-pause", lambda: "auto_paused" in kinds(), 30)

    sign_in(browser, instance, TOKEN)
    browser.find_element(By.LINK_TEXT, "Events").click()
    until("the events listed", lambda: "auto paused" in find(browser, "main table.events").text)
    listed = find(browser, "main table.events").text
    assert listed.count("run failed") >= 2 and job["id"] in listed
    assert find(browser, "nav a[aria-current='page']").text == "Events"
    shot(browser, "events")

    browser.find_element(By.LINK_TEXT, job["id"]).click()
    until("the job's page", lambda: find(browser, "h1").text == "console alerting")
    assert "by Tickwork: paused after 2 failures in a row" in find(browser, "dl.def .state").text
    assert "pause after 2 failures in a row" in find(browser, "dl.def").text
    assert "auto paused" in find(browser, "table.events").text
    browser.execute_script("document.getElementById('events-heading').scrollIntoView()")
    shot(browser, "job-events")

    sign_in(browser, instance, OTHER_TOKEN)
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/events")
    until("no events of the first owner", lambda: "Nothing has happened yet." in find(browser, "main").text)


def test_a_jobs_revisions_a_diff_and_a_rollback_in_the_console(
    browser: WebDriver, instance: Supervisor
) -> None:
    """Issue 33, part 3: the job's page lists its revisions; a revision's diff shows what changed, field by
    field; a rollback with a note restores the earlier schedule and target; the audit log lists it all."""
    status, job = instance.call(
        "POST",
        "/jobs",
        {"name": "console revisions", "schedule": {"expression": "0 6 * * *"},
         "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/v1"}}},
    )  # fmt: skip
    assert status == 201, job
    status, edited = instance.call(
        "PATCH",
        f"/jobs/{job['id']}?note=move+to+v2",
        {"schedule": {"expression": "30 6 * * 1-5"}, "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/v2"}}},
    )  # fmt: skip
    assert status == 200, edited

    sign_in(browser, instance, TOKEN)
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{job['id']}")
    until("the revisions", lambda: "move to v2" in find(browser, "table.revisions").text)
    browser.find_element(By.LINK_TEXT, "What changed in 2").click()
    until("the diff", lambda: find(browser, "h1").text == "Revision 1 → 2")
    diff = find(browser, "table.diff").text
    assert "schedule.expression" in diff and "0 6 * * *" in diff and "30 6 * * 1-5" in diff
    assert "target.config" in diff and "/v2" in diff
    assert not low_contrast_text(browser) and not badly_named_inputs(browser)
    shot(browser, "revision-diff")
    find(browser, "#rollback-note").send_keys("v2 is not ready")
    button(browser, "Roll back to revision 1").click()
    until("back on the job", lambda: find(browser, "h1").text == "console revisions")
    until("rolled back", lambda: "0 6 * * *" in find(browser, "dl.def").text)
    assert "/v1" in find(browser, "dl.def").text
    assert "v2 is not ready" in find(browser, "table.revisions").text

    browser.find_element(By.LINK_TEXT, "Audit log").click()
    until("the audit log", lambda: "v2 is not ready" in find(browser, "table.audit").text)
    assert find(browser, "nav a[aria-current='page']").text == "Audit log"


def test_a_calendar_marks_the_next_fires_and_its_runs_are_recorded_excluded(
    browser: WebDriver, instance: Supervisor
) -> None:
    """Issue 33, part 2: a calendar written in the console (a blackout window around now, and a holiday
    in three days); a job naming it shows its excluded fires marked and its runs recorded `excluded`;
    a job that stops naming it fires again."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)  # the local instance runs on the wall clock
    start, end = (
        (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        (now + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M"),
    )
    holiday = (now + timedelta(days=3)).date().isoformat()
    # The daily job fires half a day from the window, whatever the time of day the test runs at: only the
    # holiday marks one of its fires.
    every_day = f"0 {(now + timedelta(hours=12)).hour} * * *"
    sign_in(browser, instance, TOKEN)
    browser.find_element(By.LINK_TEXT, "Calendars").click()
    until("the calendars page", lambda: find(browser, "h1").text == "Exclusion calendars")
    find(browser, "#calendar-name").send_keys("blackout")
    find(browser, "#calendar-description").send_keys("release freeze")
    find(browser, "#calendar-entries").send_keys(f"{start} {end} deploy window\n{holiday} company holiday")
    button(browser, "Save calendar").click()
    until("the calendar's page", lambda: find(browser, "h1").text == "Calendar blackout")
    assert "release freeze" in find(browser, "main table").text
    assert "deploy window" in find(browser, "#calendar-entries").get_attribute("value")
    shot(browser, "calendar")

    status, minutely = instance.call(
        "POST",
        "/jobs",
        {"name": "frozen minutely", "schedule": {"expression": "* * * * *"}, "calendars": ["blackout"],
         "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/"}}},
    )  # fmt: skip
    assert status == 201, minutely
    status, daily = instance.call(
        "POST",
        "/jobs",
        {"name": "daily report", "schedule": {"expression": every_day}, "calendars": ["blackout"],
         "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/"}}},
    )  # fmt: skip
    assert status == 201, daily
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{daily['id']}")
    until("the next 10 fires", lambda: len(browser.find_elements(By.XPATH, FIRES)) == 10)
    marked = [
        row.text for row in browser.find_elements(By.XPATH, FIRES) if "excluded by calendar" in row.text
    ]
    assert len(marked) == 1 and "company holiday" in marked[0] and holiday in marked[0], marked

    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{minutely['id']}")
    # The next ten minutes are inside the window: every one of the next 10 fires is marked.
    until(
        "the next 10 fires, all excluded",
        lambda: (
            [("deploy window" in row.text) for row in browser.find_elements(By.XPATH, FIRES)] == [True] * 10
        ),
    )

    # The ticker plans its fires and the executor claims each at its minute: recorded excluded, not called.
    def excluded_runs() -> list[dict[str, Any]]:
        status, page = instance.call("GET", f"/jobs/{minutely['id']}/runs")
        assert status == 200, page
        return [run for run in page["items"] if run["state"] == "excluded"]

    wait_until("an excluded run", lambda: bool(excluded_runs()), timeout=150, step=2)
    assert "deploy window" in excluded_runs()[0]["reason"]
    browser.refresh()
    until(
        "the excluded run on the page", lambda: "excluded by calendar blackout" in find(browser, "#runs").text
    )
    shot(browser, "excluded-fires")
    find(browser, "#job-calendars").clear()
    button(browser, "Save calendars").click()
    until(
        "no calendar",
        lambda: "deploy window" not in " ".join(row.text for row in browser.find_elements(By.XPATH, FIRES)),
    )
    assert find(browser, "#job-calendars").get_attribute("value") == ""


def test_a_group_paused_and_resumed_from_the_groups_page(browser: WebDriver, instance: Supervisor) -> None:
    """Issue 33, part 1: the groups page counts each group's jobs by state; one click (with the note it
    requires) pauses the whole group and shows the action's progress; another resumes it."""
    for i in range(6):
        status, job = instance.call(
            "POST",
            "/jobs",
            {"name": f"etl {i}", "schedule": {"expression": "0 4 * * *"}, "group": "etl",
             "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/"}}},
        )  # fmt: skip
        assert status == 201, job
    sign_in(browser, instance, TOKEN)
    browser.find_element(By.LINK_TEXT, "Groups").click()
    until("the groups page", lambda: find(browser, "h1").text == "Groups")
    row = "//table[contains(@class,'groups')]//tr[td[1][.='etl']]"
    until(
        "the etl group",
        lambda: browser.find_element(By.XPATH, row).text.split()[:4] == ["etl", "6", "6", "0"],
    )
    button(browser, "Pause etl").click()
    until("the note asked for", lambda: "Say why" in find(browser, "#status").text)
    find(browser, "#bulk-note").send_keys("warehouse migration")
    button(browser, "Pause etl").click()
    until("paused", lambda: browser.find_element(By.XPATH, row).text.split()[:4] == ["etl", "6", "0", "6"])
    assert "6 changed" in find(browser, "#status").text
    assert "warehouse migration" in find(browser, "table.bulk").text
    shot(browser, "groups")
    find(browser, "#bulk-note").send_keys("done")
    button(browser, "Resume etl").click()
    until("resumed", lambda: browser.find_element(By.XPATH, row).text.split()[:4] == ["etl", "6", "6", "0"])
    browser.find_element(By.XPATH, f"{row}/td[1]/a").click()
    until("the group's jobs", lambda: len(browser.find_elements(By.CSS_SELECTOR, "main table tbody tr")) == 6)
    assert find(browser, "#filter-group").get_attribute("value") == "etl"


def test_a_second_owner_sees_none_of_the_first_owners_jobs(browser: WebDriver, instance: Supervisor) -> None:
    status, job = instance.call(
        "POST",
        "/jobs",
        {"name": "only mine", "schedule": {"expression": "0 5 * * *"},
         "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/"}}},
    )  # fmt: skip
    assert status == 201, job
    sign_in(browser, instance, OTHER_TOKEN)
    until("the empty list", lambda: "No jobs here yet." in find(browser, "main").text)
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{job['id']}")
    until("not found", lambda: find(browser, "h1").text == "Not found")
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/failed")
    until("no failed runs", lambda: "Nothing failed" in find(browser, "main").text)
    # The instance's health adds up every owner's runs: only its operator (the first token) sees it.
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/health")
    until("health refused", lambda: "only its operator" in find(browser, "main").text)
    assert "Runs in flight" not in find(browser, "main").text

    # A page at a time, and the name search, over the second owner's own 25 jobs.
    for i in range(25):
        status, _ = api_call(instance.port, OTHER_TOKEN, "POST", "/jobs", {
            "name": f"paged-{i:02d}", "schedule": {"expression": "0 6 * * *"},
            "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/"}}})  # fmt: skip
        assert status == 201
    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs?state=active")
    rows = "main table tbody tr"
    until("the first page", lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 20)
    first_page = find(browser, "main table tbody").text
    assert "only mine" not in first_page
    button(browser, "Next page").click()
    until("the second page", lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 5)
    assert not browser.find_elements(By.XPATH, "//button[normalize-space()='Next page']")
    button(browser, "Previous page").click()
    until("the first page again", lambda: find(browser, "main table tbody").text == first_page)
    # The browser's Back and Forward move through the same pages, and Previous still works after them.
    browser.back()
    until("back on the second page", lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 5)
    button(browser, "Previous page").click()
    until("the first page once more", lambda: find(browser, "main table tbody").text == first_page)
    find(browser, "#filter-name").send_keys("PAGED-1")
    button(browser, "Filter").click()
    until("the search", lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 10)
    names = [row.text.split()[0] for row in browser.find_elements(By.CSS_SELECTOR, rows)]
    assert sorted(names) == [f"paged-{i}" for i in range(10, 20)], names  # in id order

    button(browser, "Sign out").click()
    until("the sign-in form", lambda: find(browser, "#token"))
    until("the sign-out said", lambda: find(browser, "#status").text == "Signed out.")
    assert browser.execute_script("return document.activeElement.id") == "token"
    shot(browser, "sign-in")


def test_the_next_fires_mark_dst_transitions(browser: WebDriver, instance: Supervisor) -> None:
    # Ten Sundays of March hold a last Sunday (Europe's spring-forward day: 02:30 does not exist); ten of
    # October hold a fall-back day (02:30 happens twice). Whatever today is.
    marks = {"30 2 * 3 0": "shifted by a DST gap", "30 2 * 10 0": "in a repeated DST hour"}
    sign_in(browser, instance, TOKEN)
    for expression, mark in marks.items():
        status, job = instance.call(
            "POST",
            "/jobs",
            {"name": f"dst {expression}",
             "schedule": {"expression": expression, "timezone": "Europe/Berlin"},
             "target": {"kind": "http", "config": {"url": "http://127.0.0.1:9/"}}},
        )  # fmt: skip
        assert status == 201, job
        browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{job['id']}")
        name = job["name"]
        until("the job's page", lambda: find(browser, "h1").text == name)  # noqa: B023 (called at once)
        until("the next 10 fires", lambda: len(browser.find_elements(By.XPATH, FIRES)) == 10)
        rows = [row.text for row in browser.find_elements(By.XPATH, FIRES)]
        marked = [row for row in rows if mark in row]
        assert len(marked) in (1, 2), rows  # one transition a year; ten fires span at most two years
        if mark.startswith("shifted"):
            assert all("T03:00:00+02:00" in row for row in marked), marked  # moved out of the gap
        else:
            assert all("T02:30:00+02:00" in row for row in marked), marked  # the first 02:30 (dst_repeat)
    shot(browser, "dst")

    # Someone else changes the job behind the open page: the page's If-Match fails and says so (412).
    status, changed = instance.call("PATCH", f"/jobs/{job['id']}", {"name": "renamed elsewhere"})
    assert status == 200, changed
    find(browser, "#action-note").send_keys("daylight saving check")
    button(browser, "Pause").click()
    until("the 412 explained", lambda: "Someone else changed this job" in find(browser, "#status").text)
    assert instance.call("GET", f"/jobs/{job['id']}")[1]["state"] == "active"
