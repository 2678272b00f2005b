"""The owner of an IAM caller is its principal, not its session: API Gateway's IAM authorizer reports an
assumed role as `arn:<partition>:sts::<account>:assumed-role/<role>/<session>`, a new ARN for every session
(every Lambda cold start, every CLI login). The owner is `arn:<partition>:iam::<account>:role/<role>`, so all
sessions of one role see the same jobs; the role's path is not in the assumed-role ARN, so it is not in the
owner either. IAM users keep their ARN."""

from __future__ import annotations

import pytest

from tests.api.conftest import ALICE, Api, job_body, request
from tickwork.handlers.api import owner_of

ACCOUNT = "123456789012"
SESSION_A = f"arn:aws:sts::{ACCOUNT}:assumed-role/reporting/alice-laptop"
SESSION_B = f"arn:aws:sts::{ACCOUNT}:assumed-role/reporting/i-0abc123-cold-start"
OTHER_ROLE = f"arn:aws:sts::{ACCOUNT}:assumed-role/billing/alice-laptop"


@pytest.mark.parametrize(
    ("caller", "owner"),
    [
        (SESSION_A, f"arn:aws:iam::{ACCOUNT}:role/reporting"),
        # Partitions other than `aws` keep theirs.
        (
            f"arn:aws-cn:sts::{ACCOUNT}:assumed-role/reporting/s1",
            f"arn:aws-cn:iam::{ACCOUNT}:role/reporting",
        ),
        (
            f"arn:aws-us-gov:sts::{ACCOUNT}:assumed-role/reporting/s1",
            f"arn:aws-us-gov:iam::{ACCOUNT}:role/reporting",
        ),
        # A session name may hold `@`, `=`, `,`, `.` and `-` (an email, an instance id).
        (
            f"arn:aws:sts::{ACCOUNT}:assumed-role/ops-Admin_1/alice@example.com",
            f"arn:aws:iam::{ACCOUNT}:role/ops-Admin_1",
        ),
        (ALICE, ALICE),  # an IAM user is already its principal
        (f"arn:aws:iam::{ACCOUNT}:role/service/reporting", f"arn:aws:iam::{ACCOUNT}:role/service/reporting"),
        # Not an assumed role (federated users, the root user): kept as given.
        (f"arn:aws:sts::{ACCOUNT}:federated-user/bob", f"arn:aws:sts::{ACCOUNT}:federated-user/bob"),
        (f"arn:aws:iam::{ACCOUNT}:root", f"arn:aws:iam::{ACCOUNT}:root"),
    ],
)
def test_the_owner_of_an_iam_caller_is_its_principal(caller: str, owner: str) -> None:
    assert owner_of(request("GET", "/jobs", owner=caller)) == owner


def test_two_sessions_of_one_role_see_the_same_jobs(call: Api) -> None:
    created = call("POST", "/jobs", body=job_body(), owner=SESSION_A)
    assert created.status == 201, created.body
    job_id = created.body["id"]

    listed = call("GET", "/jobs", owner=SESSION_B)
    fetched = call("GET", f"/jobs/{job_id}", owner=SESSION_B)
    paused = call("POST", f"/jobs/{job_id}/pause", query="note=test", owner=SESSION_B)

    assert listed.status == 200 and [j["id"] for j in listed.body["items"]] == [job_id]
    assert fetched.status == 200 and fetched.body["id"] == job_id
    assert paused.status == 200 and paused.body["state"] == "paused"


def test_a_session_of_another_role_does_not_see_them(call: Api) -> None:
    created = call("POST", "/jobs", body=job_body(), owner=SESSION_A)
    assert created.status == 201, created.body
    job_id = created.body["id"]

    listed = call("GET", "/jobs", owner=OTHER_ROLE)
    fetched = call("GET", f"/jobs/{job_id}", owner=OTHER_ROLE)
    deleted = call("DELETE", f"/jobs/{job_id}", query="note=test", owner=OTHER_ROLE)

    assert listed.status == 200 and listed.body["items"] == []
    assert fetched.status == 404
    assert deleted.status == 404
    assert call("GET", f"/jobs/{job_id}", owner=SESSION_A).status == 200  # still there for its role
