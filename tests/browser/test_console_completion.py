"""How runs end, in the web console (real headless Chromium against a running `tickwork local`): a job's page
says how its runs end; a delivery run that succeeded reads `delivered` (the jobs list, the marks, the runs
table, the run page and its timeline), never that the work succeeded; a running callback run's page shows
its lease and its last heartbeat.

The jobs and their runs are written into the instance's SQLite database by the test, paused, so no
executor touches them (a delivery target would need AWS, and a callback run's acceptance is the executor's
work, tested on its own): the console only reads them through the API."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser import test_console as console
from tests.browser.test_console import find, low_contrast_text, sign_in, until
from tests.local.harness import TOKEN, Supervisor
from tickwork.adapters.sqlite.db import Database
from tickwork.adapters.sqlite.store import SqliteStore
from tickwork.domain.models import Completion, Job, JobState, Run, RunState, Target, Trigger, shard_of
from tickwork.domain.schedule import parse_schedule
from tickwork.local.runtime import DATABASE_FILE
from tickwork.services.jobs import new_job_id

pytestmark = console.pytestmark
# The console suite's instance and browser (this module gets its own).
instance, browser = console.instance, console.browser

ISO = "%Y-%m-%dT%H:%M:%SZ"
NOW = datetime.now(UTC).replace(microsecond=0)
FIRE = NOW.replace(second=0) - timedelta(minutes=1)


def owner_of_the_token(instance: Supervisor, store: SqliteStore) -> str:
    status, job = instance.call(
        "POST",
        "/jobs",
        {
            "name": "console owner probe",
            "schedule": {"expression": "0 3 * * *"},
            "target": {"kind": "http", "config": {"url": "https://hooks.example.com/x"}},
        },
    )
    assert status == 201, job
    stored = store.get_job(job["id"])
    assert stored is not None
    assert instance.call("DELETE", f"/jobs/{job['id']}?note=test")[0] == 204
    return stored.owner


def paused_job(owner: str, name: str, target: Target, **changes: Any) -> Job:
    job_id = new_job_id()
    return Job(
        job_id=job_id,
        owner=owner,
        name=name,
        schedule=parse_schedule("* * * * *"),
        target=target,
        shard=shard_of(job_id, 2),  # the instance's --shards
        created_at=NOW - timedelta(hours=1),
        updated_at=NOW - timedelta(hours=1),
        state=JobState.PAUSED,
        paused_at=NOW,
        **changes,
    )


def a_run(job: Job, **changes: Any) -> Run:
    run = Run.for_fire(
        job, FIRE, now=FIRE - timedelta(seconds=4), trigger=Trigger.SCHEDULE, state=RunState.PLANNED
    )
    return replace(run, attempt=1, started_at=FIRE, **changes)


def test_a_delivered_run_reads_delivered_and_a_callback_run_shows_its_lease_and_heartbeat(
    browser: WebDriver, instance: Supervisor
) -> None:
    store = SqliteStore(Database(instance.state_dir / DATABASE_FILE).open())
    owner = owner_of_the_token(instance, store)
    sqs = Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "go"})
    delivery = paused_job(owner, "console delivery", sqs, completion=Completion.DELIVERY)
    record = {"attempt": 1, "worker": "w-console", "finished_at": f"{FIRE:{ISO}}", "ok": True}
    sent = a_run(
        delivery,
        state=RunState.SUCCEEDED,
        finished_at=FIRE,
        outcome="MessageId",
        attempts=({**record, "status": "MessageId", "latency_ms": 12, "detail": ""},),
    )
    store.create_job(delivery, [sent])
    http = Target(
        "http", {"method": "POST", "url": "https://hooks.example.com/rebuild", "headers": {}, "body": ""}
    )
    callback = paused_job(
        owner,
        "console callback",
        http,
        completion=Completion.CALLBACK,
        heartbeat_seconds=60,
        timeout_seconds=3600,
    )
    lease, beat = NOW + timedelta(hours=1), NOW - timedelta(seconds=5)
    held = a_run(
        callback, state=RunState.RUNNING, lease_owner="w-console", lease_expires_at=lease, heartbeat_at=beat
    )
    store.create_job(callback, [held])
    assert sent.job_view is not None and sent.job_view.completion is Completion.DELIVERY

    sign_in(browser, instance, TOKEN)
    until("the jobs listed", lambda: "console delivery" in find(browser, "main table").text)
    row = browser.find_element(By.XPATH, "//tr[td/a[.='console delivery']]")
    until("the delivery rate", lambda: "100 % delivered of 1" in row.text)
    marks = row.find_element(By.CSS_SELECTOR, ".marks").get_attribute("aria-label") or ""
    assert "delivered" in marks and "succeeded" not in marks

    browser.find_element(By.LINK_TEXT, "console delivery").click()
    until("the job's page", lambda: find(browser, "h1").text == "console delivery")
    assert "delivery: a run ends when the message is accepted" in find(browser, "dl.def").text
    until("the delivered run", lambda: "delivered" in find(browser, "#runs tbody").text)
    assert "succeeded" not in find(browser, "#runs tbody").text
    assert low_contrast_text(browser) == []

    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{delivery.job_id}/runs/{sent.run_id}")
    until("the run's page", lambda: "attempt 1" in find(browser, ".timeline").text)
    facts = find(browser, "dl.def").text
    assert "delivered" in facts and "succeeded" not in facts
    assert "delivery: a run ends when the message is accepted" in facts
    assert "attempt 1 delivered" in find(browser, ".timeline").text

    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{callback.job_id}")
    until("the callback job's page", lambda: find(browser, "h1").text == "console callback")
    shown = find(browser, "dl.def").text
    assert "callback: the target reports to its completion URL; heartbeat every 60 s" in shown

    browser.get(f"http://127.0.0.1:{instance.port}/ui#/jobs/{callback.job_id}/runs/{held.run_id}")
    until("the running run's page", lambda: "running" in find(browser, ".timeline").text)
    facts = find(browser, "dl.def").text
    assert f"held by w-console until {lease:{ISO}}" in facts and f"{beat:{ISO}}" in facts
    assert "callback: the target reports to its completion URL" in facts
    assert f"last heartbeat {beat:{ISO}}" in find(browser, ".timeline").text
    assert low_contrast_text(browser) == []
