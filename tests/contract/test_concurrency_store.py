"""A job's concurrency key as records (adapters/records.py) and through every store engine (moto, MiniStack,
SQLite, memory: the contract suite's `backend`): stored on the job and on its runs' views only when there is
one, read back, rewritten onto the views of unclaimed runs by an edit and removed by one; and a claim, on
the view or not, lands only when the run's view names the key its slots were taken for."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.contract import test_store_contract as contract
from tests.contract.test_store_contract import FIRE, Backend, a_claim, a_job, a_run
from tickwork.adapters.records import job_from_item, job_to_item, job_view_from_item, job_view_to_item
from tickwork.domain.errors import StaleRunError
from tickwork.domain.execution import view_for
from tickwork.domain.models import Concurrency, JobView, Policies, RunState

HOST = Concurrency("api.example.com", 2)
DB = Concurrency("db/orders", 1)
backend = contract.backend  # the contract suite's engines run these tests too


# --- records ---------------------------------------------------------------------------------------------


def test_a_key_is_stored_on_the_job_and_its_view_and_read_back() -> None:
    job = a_job(policies=Policies(concurrency=HOST))
    item = job_to_item(job)
    assert item["concurrency"] == {"key": "api.example.com", "limit": 2}
    assert job_from_item(item) == job
    view = JobView.planned(job)
    view_item = job_view_to_item(view)
    assert view_item["concurrency"] == {"key": "api.example.com", "limit": 2}
    assert job_view_from_item(view_item) == view


def test_no_key_stores_nothing_and_items_from_before_the_key_read_as_none() -> None:
    job = a_job()
    assert "concurrency" not in job_to_item(job)
    assert "concurrency" not in job_view_to_item(JobView.planned(job))
    assert job_from_item(job_to_item(job)).policies.concurrency is None
    assert job_view_from_item(job_view_to_item(JobView.planned(job))).concurrency is None


# --- every engine ----------------------------------------------------------------------------------------


def test_a_keyed_job_and_its_runs_view_are_stored_and_read_back(backend: Backend) -> None:
    store = backend.store
    job = a_job(policies=Policies(concurrency=HOST))
    store.create_job(job, [a_run(job)])

    assert store.get_job(job.job_id) == job
    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.job_view is not None and run.job_view.concurrency == HOST
    assert backend.raw_job(job.job_id)["concurrency"] == {"key": "api.example.com", "limit": 2}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(HOST, DB, id="another_key"),
        pytest.param(HOST, None, id="removed"),
        pytest.param(None, HOST, id="added"),
    ],
)
def test_an_edit_of_the_key_is_stored_and_rewrites_the_views(
    backend: Backend, before: Concurrency | None, after: Concurrency | None
) -> None:
    store = backend.store
    job = a_job(policies=Policies(concurrency=before))
    store.create_job(job, [a_run(job)])
    edited = replace(job, policies=Policies(concurrency=after), version=2)
    unclaimed = store.claimable_runs(job.job_id, FIRE - timedelta(minutes=5))

    store.replace_job(job, edited, (), [(r, view_for(edited, r)) for r in unclaimed])

    assert store.get_job(job.job_id) == edited
    assert backend.raw_job(job.job_id).get("concurrency") == (
        None if after is None else {"key": after.key, "limit": after.limit}
    )
    run = store.get_run(job.job_id, FIRE)
    assert run is not None and run.job_view is not None and run.job_view.concurrency == after


@pytest.mark.parametrize("trusting_view", [True, False], ids=["on_the_view", "with_the_jobs_view"])
@pytest.mark.parametrize(
    ("on_the_run", "claimed_for"),
    [
        pytest.param(HOST, HOST, id="same_key"),
        pytest.param(None, None, id="no_key"),
    ],
)
def test_a_claim_for_the_key_the_view_names_lands(
    backend: Backend, trusting_view: bool, on_the_run: Concurrency | None, claimed_for: Concurrency | None
) -> None:
    store = backend.store
    job = a_job(policies=Policies(concurrency=on_the_run))
    store.create_job(job, [a_run(job)])

    mine = store.claim(replace(a_claim(job), trusting_view=trusting_view, concurrency=claimed_for))

    assert (mine.state, mine.attempt) == (RunState.RUNNING, 1)


@pytest.mark.parametrize("trusting_view", [True, False], ids=["on_the_view", "with_the_jobs_view"])
@pytest.mark.parametrize(
    ("on_the_run", "claimed_for"),
    [
        pytest.param(HOST, DB, id="another_key"),
        pytest.param(HOST, Concurrency(HOST.key, 3), id="another_limit"),
        pytest.param(HOST, None, id="the_view_names_a_key_the_message_does_not"),
        pytest.param(None, HOST, id="the_message_names_a_key_the_view_does_not"),
    ],
)
def test_a_claim_for_another_key_than_the_views_is_refused_with_the_run(
    backend: Backend, trusting_view: bool, on_the_run: Concurrency | None, claimed_for: Concurrency | None
) -> None:
    store = backend.store
    job = a_job(policies=Policies(concurrency=on_the_run))
    store.create_job(job, [a_run(job)])

    with pytest.raises(StaleRunError) as refused:
        store.claim(replace(a_claim(job), trusting_view=trusting_view, concurrency=claimed_for))

    current = refused.value.current
    assert current is not None and current.state is RunState.PLANNED and current.job_view is not None
    assert current.job_view.concurrency == on_the_run
