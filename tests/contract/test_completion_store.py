"""A job's completion and heartbeat, and a run's last heartbeat, as records (adapters/records.py) and through
every store engine (moto, MiniStack, SQLite, memory: the contract suite's `backend`): stored, read back,
rewritten onto the views of unclaimed runs by an edit, removed when an edit returns them to their default,
and a claim starts its attempt without the previous attempt's heartbeat."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.contract import test_store_contract as contract
from tests.contract.test_store_contract import FIRE, Backend, a_claim, a_job, a_run
from tickwork.adapters.records import (
    job_from_item,
    job_to_item,
    job_view_from_item,
    job_view_to_item,
    run_from_item,
    run_to_item,
)
from tickwork.domain.execution import claimed, view_for
from tickwork.domain.models import Completion, JobView, RunState, Target

SQS = Target("sqs", {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/q", "message": "m"})
BIG_SQS = Target("sqs", {**SQS.config, "message": "m" * 2000})  # too large for a run's view
HEARTBEAT = FIRE + timedelta(seconds=40)
backend = contract.backend  # the contract suite's engines run these tests too


# --- records ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "stored"),
    [
        pytest.param({}, {}, id="an_http_response_job_stores_neither"),
        pytest.param({"target": SQS, "completion": Completion.DELIVERY}, {}, id="a_default_is_not_stored"),
        pytest.param(
            {"completion": Completion.CALLBACK, "heartbeat_seconds": 60},
            {"completion": "callback", "heartbeat_seconds": 60},
            id="callback_and_its_heartbeat_are_stored",
        ),
        pytest.param(
            {"target": SQS, "completion": Completion.RESPONSE},
            {"completion": "response"},
            id="a_completion_other_than_the_targets_default_is_stored",
        ),
    ],
)
def test_a_job_and_its_view_store_completion_only_when_it_is_not_the_default(
    changes: dict[str, Any], stored: dict[str, Any]
) -> None:
    job = a_job(**changes)
    item = job_to_item(job)
    assert {k: item[k] for k in ("completion", "heartbeat_seconds") if k in item} == stored
    assert job_from_item(item) == job
    view = JobView.planned(job)
    view_item = job_view_to_item(view)
    assert {k: view_item[k] for k in ("completion", "heartbeat_seconds") if k in view_item} == stored
    assert job_view_from_item(view_item) == view


def test_a_view_without_its_target_always_stores_its_completion() -> None:
    view = JobView.planned(a_job(target=BIG_SQS, completion=Completion.DELIVERY))
    assert view.target is None
    item = job_view_to_item(view)
    assert item["completion"] == "delivery"
    assert job_view_from_item(item) == view


@pytest.mark.parametrize(
    ("target", "completion"),
    [
        pytest.param(a_job().target, Completion.RESPONSE, id="http_read_as_response"),
        pytest.param(SQS, Completion.DELIVERY, id="sqs_read_as_delivery_as_it_always_ended"),
    ],
)
def test_items_stored_before_completions_existed_read_as_their_targets_default(
    target: Target, completion: Completion
) -> None:
    old_job = {k: v for k, v in job_to_item(a_job(target=target)).items() if k != "completion"}
    assert (job_from_item(old_job).completion, job_from_item(old_job).heartbeat_seconds) == (completion, None)
    old_view = {k: v for k, v in job_view_to_item(JobView.planned(a_job(target=target))).items()}
    old_view.pop("completion", None)
    assert job_view_from_item(old_view).completion is completion
    targetless = {k: v for k, v in old_view.items() if k != "target"}
    assert job_view_from_item(targetless).completion is Completion.RESPONSE


def test_a_runs_heartbeat_round_trips_and_is_absent_until_there_is_one() -> None:
    job = a_job(completion=Completion.CALLBACK, heartbeat_seconds=60)
    run = claimed(a_run(job), job, worker="w", now=FIRE)
    assert "heartbeat_at" not in run_to_item(run)
    beating = replace(run, heartbeat_at=HEARTBEAT)
    assert run_to_item(beating)["heartbeat_at"] == "2026-12-02T12:05:40.000Z"
    assert run_from_item(run_to_item(beating)) == beating


# --- every engine ----------------------------------------------------------------------------------------


def test_a_callback_job_and_its_runs_view_are_stored_and_read_back(backend: Backend) -> None:
    store = backend.store
    job = a_job(completion=Completion.CALLBACK, heartbeat_seconds=60, timeout_seconds=3600)
    store.create_job(job, [a_run(job)])

    assert store.get_job(job.job_id) == job
    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.job_view is not None
    assert (run.job_view.completion, run.job_view.heartbeat_seconds) == (Completion.CALLBACK, 60)
    assert backend.raw_job(job.job_id)["completion"] == "callback"


def test_an_edit_back_to_the_default_removes_the_stored_completion_and_rewrites_the_views(
    backend: Backend,
) -> None:
    store = backend.store
    job = a_job(completion=Completion.CALLBACK, heartbeat_seconds=60)
    store.create_job(job, [a_run(job)])
    edited = replace(job, completion=Completion.RESPONSE, heartbeat_seconds=None, version=2)
    unclaimed = store.claimable_runs(job.job_id, FIRE - timedelta(minutes=5))

    store.replace_job(job, edited, (), [(r, view_for(edited, r)) for r in unclaimed])

    assert store.get_job(job.job_id) == edited
    raw = backend.raw_job(job.job_id)
    assert "completion" not in raw and "heartbeat_seconds" not in raw
    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.job_view is not None
    assert (run.job_view.completion, run.job_view.heartbeat_seconds) == (Completion.RESPONSE, None)


def test_a_heartbeat_is_stored_and_the_next_claim_starts_without_it(backend: Backend) -> None:
    store = backend.store
    job = a_job(completion=Completion.CALLBACK, heartbeat_seconds=60)
    store.create_job(job, [a_run(job)])
    first = store.claim(a_claim(job))
    beating = replace(first, heartbeat_at=HEARTBEAT)
    store.transition_run(first, beating)
    assert store.get_run(job.job_id, FIRE) == beating
    waiting = replace(
        beating, state=RunState.RETRY_WAIT, retry_at=FIRE + timedelta(minutes=2), lease_owner=None
    )
    store.transition_run(beating, replace(waiting, lease_expires_at=None))

    second = store.claim(a_claim(job, attempt=1, worker="w#2", now=FIRE + timedelta(minutes=2)))

    assert (second.attempt, second.heartbeat_at) == (2, None)
    stored = store.get_run(job.job_id, FIRE)
    assert stored is not None and stored.heartbeat_at is None
