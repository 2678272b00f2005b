"""The real CDK stack, deployed into a fresh MiniStack with the stock CDK CLI, driven through its API URL.

`make e2e-aws` runs this module (and `make test` runs `make e2e-aws`). What it shows:
- the synthesized stack (emulator profile: single-metric alarms, a bundle for the emulator's interpreter)
  bootstraps and deploys;
- a job created through the deployed HTTP API, SigV4-signed with botocore as a real client signs, fires at a
  time beyond the API's own planning horizon, so only the deployed ticker Lambda (EventBridge, every minute)
  can plan it; the deployed executor Lambda, fed by its SQS event source mapping, runs it to `succeeded`
  and its target queue receives the call with the run's idempotency key;
- pause, resume, list, run history and delete through the API;
- a callback run (an HTTP target on 127.0.0.1 in this process, opened past the SSRF rule by the stack's
  `allowed_networks`) answers 202 and reports a heartbeat and its completion through the deployed API's open
  callback routes (no SigV4: the token is the credential); the run ends `succeeded` after one call, and a
  second completion is refused with 409;
- Step Functions runs tracked to their end: two state machines in the emulator (named by the executor's
  target naming convention, `<prefix>-target-*`), one that passes, waits and succeeds and one that fails
  with an error and a cause; jobs with completion `tracked` start an execution each, and the deployed
  executor follows it with DescribeExecution (its looks) until it ends: the runs end `succeeded` and
  `failed`, each attempt holding the execution's status, and the emulator ran exactly one execution each;
  the deployed watcher, fed by the runs table's stream through its event source mapping, records the failure
  as the job's `run_failed` event and sends it, once, to the job's webhook channel (a receiver on 127.0.0.1
  in this process, as the callback target): a JSON POST keyed by the event's id, signed with the owner's key
  (verified with the keys `GET /signing-keys` gives); `GET /events` lists the same event;
then the stack is destroyed. Every phase's duration is written to `.tickwork/e2e-aws.json` and printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tickwork.domain.timekeys import format_instant
from tickwork.local.emulator import DEFAULT_REGION, Emulator, EmulatorConfig, client_env
from tickwork.signing import SIGNATURE_HEADER, verify

REPO = Path(__file__).resolve().parents[2]
CDK_CLI = "aws-cdk@2.1148.1"  # pinned: the CLI this test was verified with
PREFIX = "twe2e"
# The API plans fires this close at create; the test's fire lies beyond it. 60 s: whatever the minutely
# ticker's phase, one tick falls in the minute before the fire and plans it ahead of time.
LOOKAHEAD_SECONDS = 60
FIRE_AFTER_SECONDS = 95  # beyond the lookahead, so the ticker must plan it
ACCOUNT = "000000000000"  # MiniStack's account
RUN_DEADLINE_SECONDS = 150
AUDIT_GRACE_SECONDS = 60
PURGED_JOBS = 5
# The executor Lambda runs inside MiniStack (a subprocess on this machine) in AWS mode, where loopback is
# refused by the SSRF rule: the stack opens it for this test's HTTP target, as an operator opens a VPC peer.
ALLOWED_NETWORKS = "127.0.0.1/32"
# A schedule that never fires during the test (1 January, midnight): its runs are made with "run now".
NEVER_DURING_THE_TEST = "0 0 1 1 *"
TIMINGS = REPO / ".tickwork" / "e2e-aws.json"

pytestmark = pytest.mark.e2e_aws


@dataclass
class Deployed:
    emulator: Emulator
    env: dict[str, str]
    outputs: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return self.emulator.endpoint_url


def _cdk(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    npx = shutil.which("npx")
    if npx is None:
        pytest.fail("npx (Node 20) is needed to run the CDK CLI")
    result = subprocess.run(
        [npx, "--yes", CDK_CLI, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"cdk {' '.join(args)} failed ({result.returncode}):\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
        )
    return result


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    out = tmp_path_factory.mktemp("e2e-aws")
    timings: dict[str, float] = {}
    started = time.monotonic()
    with Emulator(EmulatorConfig(log_file=out / "ministack.log")) as emulator:
        timings["emulator_start_s"] = time.monotonic() - started
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))},
            **client_env(emulator.endpoint_url),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        phase = time.monotonic()
        _cdk(env, "bootstrap", f"aws://{ACCOUNT}/{DEFAULT_REGION}", timeout=300)
        timings["bootstrap_s"] = time.monotonic() - phase
        outputs_file = out / "outputs.json"
        context = {
            "emulator": "true",
            "prefix": PREFIX,
            "lookahead_seconds": str(LOOKAHEAD_SECONDS),
            "concurrency_cap": "20",
            "allowed_networks": ALLOWED_NETWORKS,
            # The audit at its shortest, so a purged queue's runs come back within the test's minutes.
            "audit_grace_seconds": str(AUDIT_GRACE_SECONDS),
            "audit_segments": "1",
            # Who may call what: every caller may target this test's `twe2e-target-*` resources, no others.
            "target_grants": json.dumps({"*": [f"*:{PREFIX}-target-*"]}),
        }
        phase = time.monotonic()
        _cdk(
            env,
            "deploy",
            "--require-approval",
            "never",
            "--progress",
            "events",
            *[arg for key, value in context.items() for arg in ("-c", f"{key}={value}")],
            "--output",
            str(out / "cdk.out"),
            "--outputs-file",
            str(outputs_file),
            timeout=600,
        )
        timings["synth_and_deploy_s"] = time.monotonic() - phase
        outputs = json.loads(outputs_file.read_text())[f"Tickwork-{PREFIX}"]
        deployed = Deployed(emulator, env, outputs, timings)
        try:
            yield deployed
        finally:
            phase = time.monotonic()
            _cdk(
                env,
                "destroy",
                "--force",
                *[arg for key, value in context.items() for arg in ("-c", f"{key}={value}")],
                "--output",
                str(out / "cdk.out"),
                timeout=300,
            )
            timings["destroy_s"] = time.monotonic() - phase
            timings["total_s"] = time.monotonic() - started
            TIMINGS.parent.mkdir(exist_ok=True)
            TIMINGS.write_text(json.dumps(timings, indent=2) + "\n")
            print(f"\ne2e-aws timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")


class SignedApi:
    """The deployed API, called as a real client calls it: SigV4 over HTTP, via the emulator's gateway."""

    def __init__(self, deployed: Deployed) -> None:
        self.api_url = deployed.outputs["ApiUrl"].rstrip("/")
        self.host = urlsplit(self.api_url).netloc
        self.gateway = deployed.endpoint
        self.signer = SigV4Auth(Credentials("test", "test"), "execute-api", DEFAULT_REGION)
        api_id = self.host.split(".", 1)[0]
        port = urlsplit(self.gateway).port
        self.routing_host = f"{api_id}.execute-api.127.0.0.1:{port}"

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = AWSRequest(
            method=method,
            url=f"{self.api_url}{path}",
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        self.signer.add_auth(request)
        sent = urllib.request.Request(
            f"{self.gateway}{path}",
            data=data,
            method=method,
            headers={**dict(request.headers.items()), "Host": self.routing_host},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(sent, timeout=30) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        return status, json.loads(raw) if raw else None

    def post_open(self, url: str, body: Any = None) -> tuple[int, Any]:
        """POST to a URL on this API without a signature (the callback routes: the token is the
        credential), sent through the emulator's gateway with the API's routing host."""
        parts = urlsplit(url)
        assert parts.netloc == self.host, f"{url} is not on this stack's API ({self.host})"
        data = json.dumps({} if body is None else body).encode()
        sent = urllib.request.Request(
            f"{self.gateway}{parts.path}",
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "Host": self.routing_host},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(sent, timeout=30) as response:
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        return status, json.loads(raw) if raw else None

    def get_unsigned(self, path: str) -> tuple[int, str, bytes]:
        """A browser's GET: no signature (the console's own files are open routes)."""
        sent = urllib.request.Request(f"{self.gateway}{path}", headers={"Host": self.routing_host})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(sent, timeout=30) as response:
                return response.status, response.headers.get("Content-Type", ""), response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Content-Type", ""), error.read()


@dataclass(frozen=True)
class Call:
    path: str
    headers: dict[str, str]
    body: bytes
    at: datetime  # when it arrived (UTC)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body)


TARGET_PATH = "/work"
WEBHOOK_PATH = "/alerts"


class RecordingReceiver:
    """An HTTP server on 127.0.0.1 that records every POST (path, headers, raw body, arrival time) and
    answers by path: a callback target's call is taken for later (202, the headers carry the run's completion
    and heartbeat URLs); an alert webhook's message is received (204)."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        calls = self.calls
        answers = {TARGET_PATH: (202, b'{"accepted": true}'), WEBHOOK_PATH: (204, b"")}

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                calls.append(Call(self.path, dict(self.headers.items()), body, datetime.now(UTC)))
                status, answer = answers.get(self.path, (404, b""))
                self.send_response(status)
                if answer:
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                if answer:
                    self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url_for(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    @property
    def url(self) -> str:
        """A callback target's URL."""
        return self.url_for(TARGET_PATH)

    @property
    def webhook_url(self) -> str:
        """An alert channel's URL."""
        return self.url_for(WEBHOOK_PATH)

    def posts_to(self, path: str) -> list[Call]:
        return [call for call in list(self.calls) if call.path == path]

    def __enter__(self) -> RecordingReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _daily_at(instant: datetime) -> str:
    """A 6-field (seconds first) expression that fires once a day at `instant`'s UTC time of day."""
    return f"{instant.second} {instant.minute} {instant.hour} * * *"


def _wait_for(predicate: Any, deadline_s: float, every_s: float = 2.0) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            return value
        time.sleep(every_s)


def test_job_lifecycle_through_the_deployed_stack(deployed: Deployed) -> None:
    api = SignedApi(deployed)
    sqs = boto3.client(
        "sqs",
        endpoint_url=deployed.endpoint,
        region_name=DEFAULT_REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    target_url = sqs.create_queue(QueueName=f"{PREFIX}-target-e2e")["QueueUrl"]
    target_queue_url = f"https://sqs.{DEFAULT_REGION}.amazonaws.com/{ACCOUNT}/{PREFIX}-target-e2e"

    status, health = api.call("GET", "/health")
    assert status == 200, health

    # The web console's files through API Gateway: the page, and its config saying this stack's API takes
    # IAM (so the page explains how to enable JWT instead of asking for a token).
    status, content_type, page = api.get_unsigned("/ui")
    assert status == 200 and content_type.startswith("text/html") and b"/ui/app.js" in page, (status, page)
    status, _, config = api.get_unsigned("/ui/config.json")
    assert status == 200 and json.loads(config)["auth"] == "iam", config

    # A fire time beyond the lookahead: the API's own planning at create cannot plan it.
    created_at = datetime.now(UTC).replace(microsecond=0)
    fire = created_at + timedelta(seconds=FIRE_AFTER_SECONDS)
    phase = time.monotonic()
    status, job = api.call(
        "POST",
        "/jobs",
        {
            "name": "e2e daily",
            "schedule": {"expression": _daily_at(fire), "timezone": "UTC"},
            "target": {"kind": "sqs", "config": {"queue_url": target_queue_url, "message": "hello from e2e"}},
            "timeout_seconds": 60,
        },
    )
    assert status == 201, job
    job_id = job["id"]
    status, runs = api.call("GET", f"/jobs/{job_id}/runs")
    assert status == 200, runs
    assert runs["items"] == [], "the API planned a fire beyond its lookahead: the ticker path is not proven"

    def succeeded() -> dict[str, Any] | None:
        code, page = api.call("GET", f"/jobs/{job_id}/runs")
        assert code == 200, page
        done = [r for r in page["items"] if r["state"] == "succeeded"]
        return done[0] if done else None

    run = _wait_for(succeeded, FIRE_AFTER_SECONDS + RUN_DEADLINE_SECONDS)
    deployed.timings["create_to_succeeded_s"] = time.monotonic() - phase
    assert run, "the run did not reach succeeded through ticker, queue and executor"
    # `schedule` when a tick planned it before its fire; a tick that ran late (a loaded machine) plans it
    # after the fire as `catch-up`. Either way the ticker planned it (the API had not, see above).
    assert run["trigger"] in ("schedule", "catch-up"), run
    print(f"\nthe ticker planned the run as {run['trigger']!r}")
    assert datetime.fromisoformat(run["timings"]["scheduled_for"]) == fire, run

    messages = sqs.receive_message(
        QueueUrl=target_url, MaxNumberOfMessages=10, WaitTimeSeconds=5, MessageAttributeNames=["All"]
    ).get("Messages", [])
    assert len(messages) == 1, messages
    assert messages[0]["Body"] == "hello from e2e"
    sqs.delete_message(QueueUrl=target_url, ReceiptHandle=messages[0]["ReceiptHandle"])

    status, listing = api.call("GET", "/jobs")
    assert status == 200, listing
    assert [j["id"] for j in listing["items"]] == [job_id]

    # Run now through the deployed stack: the request's transaction (the job's counter, the run, the
    # Idempotency-Key record in the requests table), the executor, and the failed-runs index read.
    status, manual = api.call("POST", f"/jobs/{job_id}/runs", headers={"Idempotency-Key": "e2e-now"})
    assert status == 201, manual
    status, replayed = api.call("POST", f"/jobs/{job_id}/runs", headers={"Idempotency-Key": "e2e-now"})
    assert status == 200 and replayed["id"] == manual["id"], replayed

    def manual_succeeded() -> bool:
        code, one = api.call("GET", f"/jobs/{job_id}/runs/{manual['id']}")
        assert code == 200, one
        return bool(one["state"] == "succeeded")

    assert _wait_for(manual_succeeded, RUN_DEADLINE_SECONDS), "the run now did not succeed"
    status, failed = api.call("GET", "/runs?state=failed")
    assert status == 200 and failed["items"] == [], failed

    status, paused = api.call("POST", f"/jobs/{job_id}/pause?note=e2e")
    assert status == 200, paused
    assert paused["state"] == "paused"
    status, resumed = api.call("POST", f"/jobs/{job_id}/resume")
    assert status == 200, resumed
    assert resumed["state"] == "active"

    status, one = api.call("GET", f"/jobs/{job_id}/runs/{run['id']}")
    assert status == 200, one
    assert one["state"] == "succeeded"

    status, _ = api.call("DELETE", f"/jobs/{job_id}?note=e2e")
    assert status == 204
    status, gone = api.call("GET", f"/jobs/{job_id}")
    assert status == 404, gone
    status, history = api.call("GET", f"/jobs/{job_id}/runs")
    assert status in (200, 404), history


def _run_of(api: SignedApi, job_id: str, run_id: str) -> dict[str, Any]:
    status, run = api.call("GET", f"/jobs/{job_id}/runs/{run_id}")
    assert status == 200, run
    return dict(run)


E2E_BEARER = "Bearer e2e-secret-0c4b7d"


def test_callback_run_completes_through_api_gateway(deployed: Deployed) -> None:
    """A callback job's run: the deployed executor calls the target with its completion and heartbeat URLs,
    the target takes the work (202), then reports through the deployed API's open callback routes."""
    api = SignedApi(deployed)
    phase = time.monotonic()
    with RecordingReceiver() as target:
        status, job = api.call(
            "POST",
            "/jobs",
            {
                "name": "e2e callback",
                "schedule": {"expression": NEVER_DURING_THE_TEST, "timezone": "UTC"},
                # A secret header: stored in the emulator's Secrets Manager, resolved by the executor.
                "target": {
                    "kind": "http",
                    "config": {"url": target.url, "method": "POST", "headers": {"Authorization": E2E_BEARER}},
                },
                "completion": "callback",
                "heartbeat_seconds": 300,
                "timeout_seconds": 1800,
                "policies": {"retry": {"max_attempts": 1}},
            },
        )
        assert status == 201, job
        assert job["completion"] == "callback", job
        assert job["target"]["config"]["headers"] == {"Authorization": "<redacted>"}, job
        job_id = job["id"]
        status, run = api.call("POST", f"/jobs/{job_id}/runs", headers={"Idempotency-Key": "e2e-callback"})
        assert status == 201, run
        run_id = run["id"]

        # The deployed executor's call (past the SSRF rule through allowed_networks), answered 202: the run
        # stays running under its heartbeat lease.
        assert _wait_for(lambda: target.calls, RUN_DEADLINE_SECONDS, every_s=0.5), (
            f"the executor never called the target: {_run_of(api, job_id, run_id)}"
        )
        call = target.calls[0]
        headers = {name.lower(): value for name, value in call.headers.items()}
        assert headers.get("idempotency-key") == run_id, headers
        assert headers.get("authorization") == E2E_BEARER, "the secret header did not reach the target"
        completion_url = headers["x-tickwork-completion-url"]
        heartbeat_url = headers["x-tickwork-heartbeat-url"]
        assert completion_url.startswith(api.api_url + "/callbacks/"), (completion_url, api.api_url)
        assert heartbeat_url.startswith(api.api_url + "/callbacks/"), (heartbeat_url, api.api_url)

        def accepted() -> dict[str, Any] | None:
            one = _run_of(api, job_id, run_id)
            return one if one["state"] == "running" and one["heartbeat_at"] else None

        awaiting = _wait_for(accepted, 60, every_s=0.5)
        assert awaiting, f"the 202 did not keep the run running: {_run_of(api, job_id, run_id)}"
        assert awaiting["completion"] == "callback" and awaiting["attempt"] == 1, awaiting

        # A heartbeat, unsigned through API Gateway: the lease moves (never shorter).
        status, beat = api.post_open(heartbeat_url)
        assert status == 200, beat
        assert beat["run_id"] == run_id and beat["attempt"] == 1 and beat["state"] == "running", beat
        moved = datetime.fromisoformat(beat["lease_expires_at"])
        assert moved >= datetime.fromisoformat(awaiting["lease"]["expires_at"]), (beat, awaiting)

        # The completion: taken (202), then applied by the deployed executor from its finish message.
        report = {"outcome": "succeeded", "status": "0", "detail": "e2e callback done"}
        status, taken = api.post_open(completion_url, report)
        assert status == 202, taken
        assert taken["state"] == "completing", taken

        def ended() -> dict[str, Any] | None:
            one = _run_of(api, job_id, run_id)
            return one if one["state"] not in ("planned", "running") else None

        done = _wait_for(ended, RUN_DEADLINE_SECONDS, every_s=1.0)
        deployed.timings["callback_run_s"] = time.monotonic() - phase
        assert done, f"the completion was never applied: {_run_of(api, job_id, run_id)}"
        assert done["state"] == "succeeded" and done["result"] == "completed", done
        assert done["attempt"] == 1 and len(done["attempts"]) == 1, done
        assert done["outcome"] == "0", done

        # The attempt is over: a second completion and a late heartbeat are refused and change nothing.
        status, again = api.post_open(completion_url, {"outcome": "failed", "detail": "late"})
        assert status == 409, again
        status, late = api.post_open(heartbeat_url)
        assert status == 409, late
        assert _run_of(api, job_id, run_id)["state"] == "succeeded"
        # One call in all: the 202 was not taken for a failure, and nothing called the target again.
        assert len(target.calls) == 1, target.calls

    status, _ = api.call("DELETE", f"/jobs/{job_id}?note=e2e")
    assert status == 204


# A tracked run's first look comes 5 s after its start (domain/delivery.POLL_FIRST), the next 10 s later: a
# wait of 8 s shows the run running at the first look and ends it at the second.
SFN_WAIT_SECONDS = 8
SFN_ERROR = "ExportFailed"
SFN_CAUSE = "e2e: the export found no rows"
WATCHER_DEADLINE_SECONDS = 60  # the stream poller invokes within seconds, a cold start takes a few more
# The webhook is sent by the stream batch's own outbox pass (or, failing that, the next minutely one).
WEBHOOK_DEADLINE_SECONDS = 90
SECOND_MESSAGE_GRACE_SECONDS = 10  # after the first: long enough for a duplicate send to show up


def _state_machine(sfn: Any, name: str, states: dict[str, Any], start: str) -> str:
    definition = json.dumps({"StartAt": start, "States": states})
    role = f"arn:aws:iam::{ACCOUNT}:role/{PREFIX}-e2e-states"
    return str(sfn.create_state_machine(name=name, definition=definition, roleArn=role)["stateMachineArn"])


@pytest.fixture
def webhook() -> Iterator[RecordingReceiver]:
    """An alert channel's receiver on 127.0.0.1, reached by the deployed watcher through allowed_networks."""
    with RecordingReceiver() as receiver:
        yield receiver


def test_step_functions_runs_end_with_their_execution(deployed: Deployed, webhook: RecordingReceiver) -> None:
    """Completion `tracked`: the deployed executor starts the execution, keeps the run running while the
    emulator runs the workflow, and ends the run with the execution's end, success and failure both. The
    failing job's webhook channel gets the watcher's one signed `run_failed` message, the event the API
    lists."""
    api = SignedApi(deployed)
    sfn = boto3.client(
        "stepfunctions",
        endpoint_url=deployed.endpoint,
        region_name=DEFAULT_REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    machines = {
        "succeeds": _state_machine(
            sfn,
            f"{PREFIX}-target-sfn-ok",
            {
                "Prepare": {"Type": "Pass", "Result": {"rows": 3}, "Next": "Export"},
                "Export": {"Type": "Wait", "Seconds": SFN_WAIT_SECONDS, "Next": "Done"},
                "Done": {"Type": "Succeed"},
            },
            "Prepare",
        ),
        "fails": _state_machine(
            sfn,
            f"{PREFIX}-target-sfn-fail",
            {"Export": {"Type": "Fail", "Error": SFN_ERROR, "Cause": SFN_CAUSE}},
            "Export",
        ),
    }
    channel = {"kind": "webhook", "url": webhook.webhook_url}
    phase = time.monotonic()
    jobs: dict[str, str] = {}
    runs: dict[str, str] = {}
    for outcome, arn in machines.items():
        status, job = api.call(
            "POST",
            "/jobs",
            {
                "name": f"e2e step functions {outcome}",
                "schedule": {"expression": NEVER_DURING_THE_TEST, "timezone": "UTC"},
                "target": {
                    "kind": "stepfunctions",
                    "config": {"state_machine_arn": arn, "input": {"e2e": 1}},
                },
                "completion": "tracked",
                "timeout_seconds": 600,
                "policies": {"retry": {"max_attempts": 1}},
                # The failing job's owner is told on a webhook (on_failure is on by default).
                **({"alerts": {"channels": [channel]}} if outcome == "fails" else {}),
            },
        )
        assert status == 201, job
        assert job["completion"] == "tracked", job
        assert job["alerts"]["channels"] == ([channel] if outcome == "fails" else []), job
        jobs[outcome] = job["id"]
        status, run = api.call(
            "POST", f"/jobs/{job['id']}/runs", headers={"Idempotency-Key": f"e2e-{outcome}"}
        )
        assert status == 201, run
        runs[outcome] = run["id"]

    # The succeeding workflow waits: its run is seen running (followed, not delivered) before it ends.
    seen_running: dict[str, Any] = {}

    def ended() -> bool:
        done = True
        for outcome in machines:
            one = _run_of(api, jobs[outcome], runs[outcome])
            if one["state"] == "running":
                seen_running.setdefault(outcome, one)
            done = done and one["state"] not in ("planned", "running")
        return done

    finished = _wait_for(ended, RUN_DEADLINE_SECONDS, every_s=1.0)
    deployed.timings["step_functions_runs_s"] = time.monotonic() - phase
    final = {outcome: _run_of(api, jobs[outcome], runs[outcome]) for outcome in machines}
    assert finished, f"the tracked runs did not end: {final}"
    assert "succeeds" in seen_running, f"the waiting workflow's run was never seen running: {final}"
    assert seen_running["succeeds"]["completion"] == "tracked", seen_running

    ok = final["succeeds"]
    assert ok["state"] == "succeeded" and ok["result"] == "completed", ok
    assert ok["outcome"] == "SUCCEEDED" and ok["attempt"] == 1, ok
    assert [a["status"] for a in ok["attempts"]] == ["SUCCEEDED"], ok
    failed = final["fails"]
    assert failed["state"] == "failed" and failed["result"] is None, failed
    assert failed["outcome"] == "FAILED" and failed["attempt"] == 1, failed
    assert [a["status"] for a in failed["attempts"]] == ["FAILED"], failed
    assert SFN_ERROR in (failed["attempts"][0]["detail"] or ""), failed
    assert SFN_CAUSE in (failed["attempts"][0]["detail"] or ""), failed

    # The deployed watcher saw the failure in the runs table's stream (its event source mapping) and recorded
    # it for the job's owner; the run that succeeded is nothing to tell.
    dynamodb = boto3.client(
        "dynamodb",
        endpoint_url=deployed.endpoint,
        region_name=DEFAULT_REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )

    def events_of(job_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = dynamodb.query(
            TableName=f"{PREFIX}-events",
            KeyConditionExpression="#s = :j AND begins_with(#k, :e)",
            ExpressionAttributeNames={"#s": "scope", "#k": "key"},
            ExpressionAttributeValues={":j": {"S": job_id}, ":e": {"S": "e#"}},
            ConsistentRead=True,
        )["Items"]
        return items

    told = _wait_for(lambda: events_of(jobs["fails"]), WATCHER_DEADLINE_SECONDS, every_s=1.0)
    assert [(e["kind"]["S"], e["run_id"]["S"]) for e in told] == [("run_failed", runs["fails"])], told
    assert events_of(jobs["succeeds"]) == []

    # ...and sent it to the job's webhook: one signed JSON POST from the deployed watcher Lambda (past the
    # SSRF rule through allowed_networks), keyed by the event's dedupe key.
    arrived = _wait_for(lambda: webhook.posts_to(WEBHOOK_PATH), WEBHOOK_DEADLINE_SECONDS, every_s=0.5)
    assert arrived, (
        f"no webhook message within {WEBHOOK_DEADLINE_SECONDS} s of the event; calls: {webhook.calls}, "
        f"events: {told}"
    )
    message = arrived[0]
    finished_at = datetime.fromisoformat(failed["timings"]["finished_at"])
    took = (message.at - finished_at).total_seconds()
    deployed.timings["failure_to_webhook_s"] = took
    print(f"\nthe run_failed webhook arrived {took:.2f} s after the run failed")
    time.sleep(SECOND_MESSAGE_GRACE_SECONDS)  # a second send of the same event would show up by now
    posts = webhook.posts_to(WEBHOOK_PATH)
    assert len(posts) == 1, [(p.headers, p.body) for p in posts]
    body = message.json()
    assert body["type"] == "tickwork.event", body
    assert body["kind"] == "run_failed", body
    assert (body["job_id"], body["run_id"]) == (jobs["fails"], runs["fails"]), body
    # The event's dedupe key (docs/alerts.md: `<job>|<kind>|<run>|<time>`), the same on every retry.
    assert body["id"] == f"{jobs['fails']}|run_failed|{runs['fails']}|{body['at']}", body
    assert message.header("Idempotency-Key") == body["id"], message.headers
    assert message.header("X-Tickwork-Run-Id") == body["id"], message.headers
    assert message.header("X-Tickwork-Attempt") == "1", message.headers
    assert message.header("Content-Type") == "application/json", message.headers
    signature = message.header(SIGNATURE_HEADER)
    assert signature, message.headers
    # Signed with the owner's own key, as a target call is: verified as a receiver does, with the keys the
    # owner reads from GET /signing-keys, over the URL as configured on the channel.
    status, keys = api.call("GET", "/signing-keys")
    assert status == 200 and keys["items"], keys
    assert verify(
        {key["key_id"]: bytes.fromhex(key["key"]) for key in keys["items"]},
        signature,
        method="POST",
        url=webhook.webhook_url,
        run_id=message.header("Idempotency-Key") or "",
        attempt=message.header("X-Tickwork-Attempt") or "",
        body=message.body,
        now=int(time.time()),
    ), signature

    # The owner reads the same event through the deployed API; the channel never failed, so no health.
    status, listed = api.call("GET", f"/events?job_id={jobs['fails']}")
    assert status == 200, listed
    assert [(e["id"], e["kind"], e["job_id"], e["run_id"]) for e in listed["items"]] == [
        (body["id"], "run_failed", jobs["fails"], runs["fails"])
    ], listed
    assert listed["channel_health"] == [], listed
    status, quiet = api.call("GET", f"/events?job_id={jobs['succeeds']}")
    assert status == 200 and quiet["items"] == [], quiet

    # The emulator ran one execution per run, and ended them as the runs say.
    for outcome, arn in machines.items():
        executions = sfn.list_executions(stateMachineArn=arn)["executions"]
        assert len(executions) == 1, executions
        expected = "SUCCEEDED" if outcome == "succeeds" else "FAILED"
        assert executions[0]["status"] == expected, executions
        status, _ = api.call("DELETE", f"/jobs/{jobs[outcome]}?note=e2e")
        assert status == 204


def test_losses_around_the_code_lose_no_run(deployed: Deployed) -> None:
    """Issue 30 on the deployed stack, all on one fire time: five jobs whose planned messages are purged
    from every dispatch queue, two whose `due` entry is removed as they are created, and two whose planned
    run records are deleted (as a restore of the runs table would) and their messages purged too. The
    sweeper's audit (grace 60 s, one segment) puts every one back, and each target message arrives once."""
    api = SignedApi(deployed)
    clients: dict[str, Any] = {
        name: boto3.client(
            name,
            endpoint_url=deployed.endpoint,
            region_name=DEFAULT_REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        for name in ("sqs", "dynamodb")
    }
    sqs, dynamodb = clients["sqs"], clients["dynamodb"]
    target_url = sqs.create_queue(QueueName=f"{PREFIX}-target-losses")["QueueUrl"]
    target_queue_url = f"https://sqs.{DEFAULT_REGION}.amazonaws.com/{ACCOUNT}/{PREFIX}-target-losses"
    fire = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=FIRE_AFTER_SECONDS)
    groups = {"purged": PURGED_JOBS, "stranded": 2, "restored": 2}
    jobs: dict[str, list[str]] = {group: [] for group in groups}
    for group, count in groups.items():
        for index in range(count):
            status, job = api.call(
                "POST",
                "/jobs",
                {
                    "name": f"e2e {group} {index}",
                    "schedule": {"expression": _daily_at(fire), "timezone": "UTC"},
                    "target": {
                        "kind": "sqs",
                        "config": {"queue_url": target_queue_url, "message": f"{group} {index}"},
                    },
                    "timeout_seconds": 60,
                },
            )
            assert status == 201, job
            jobs[group].append(job["id"])
            if group == "stranded":  # its due entry gone: no tick would ever read it
                dynamodb.update_item(
                    TableName=f"{PREFIX}-jobs",
                    Key={"job_id": {"S": job["id"]}},
                    UpdateExpression="REMOVE due_key",
                )
    every = [job_id for ids in jobs.values() for job_id in ids]

    def runs(job_ids: list[str], state: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for job_id in job_ids:
            code, page = api.call("GET", f"/jobs/{job_id}/runs")
            assert code == 200, page
            found.extend(r for r in page["items"] if r["state"] == state)
        return found

    ticked = jobs["purged"] + jobs["restored"]
    planned = _wait_for(lambda: len(runs(ticked, "planned")) == len(ticked), FIRE_AFTER_SECONDS)
    assert planned, "the ticker did not plan the fires before they were due"
    for job_id in jobs["restored"]:  # the runs table restored to before they were planned
        dynamodb.delete_item(
            TableName=f"{PREFIX}-runs",
            Key={"job_id": {"S": job_id}, "scheduled_for": {"S": format_instant(fire)}},
        )
    assert runs(jobs["restored"], "planned") == []
    queues = sqs.list_queues(QueueNamePrefix=f"{PREFIX}-dispatch-")["QueueUrls"]
    purged = [url for url in queues if not url.endswith(("-dlq", "-long-call"))]
    assert purged, queues
    for url in purged:  # the incident reflex the runbook forbids
        sqs.purge_queue(QueueUrl=url)
    for url in purged:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["ApproximateNumberOfMessagesDelayed"] == "0", attributes
        assert attributes["ApproximateNumberOfMessages"] == "0", attributes

    phase = time.monotonic()
    # Due, then the grace (or the 2 minutes a lost record must be old), the sweeper's next minute, the
    # executor: well inside 4 minutes of the fire.
    deadline = (fire - datetime.now(UTC)).total_seconds() + AUDIT_GRACE_SECONDS + 180
    done = _wait_for(lambda: len(runs(every, "succeeded")) == len(every), deadline, every_s=5.0)
    deployed.timings["losses_to_succeeded_s"] = time.monotonic() - phase
    left = [
        (r["id"], r["state"]) for state in ("planned", "running", "retry_wait") for r in runs(every, state)
    ]
    assert done, f"runs not back after the losses: {left}"
    received: list[str] = []
    while True:
        batch = sqs.receive_message(QueueUrl=target_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        )
        if not batch:
            break
        received.extend(m["Body"] for m in batch)
        for message in batch:
            sqs.delete_message(QueueUrl=target_url, ReceiptHandle=message["ReceiptHandle"])
    expected = [f"{group} {i}" for group, count in groups.items() for i in range(count)]
    assert sorted(received) == sorted(expected)  # each once
    print(
        f"\n{len(every)} fires ({', '.join(f'{n} {g}' for g, n in groups.items())}), "
        f"{len(received)} executed, the last {time.monotonic() - phase:.0f} s after the queues were purged"
    )
    for job_id in every:
        assert api.call("DELETE", f"/jobs/{job_id}?note=e2e")[0] == 204


def test_a_job_at_another_tenants_resource_is_refused(deployed: Deployed) -> None:
    """Issue 31 on the deployed stack: the registry (context target_grants) grants `twe2e-target-*` only; a
    job at another team's queue is refused with a 403 problem naming it, and nothing is stored."""
    api = SignedApi(deployed)
    other_team = f"https://sqs.{DEFAULT_REGION}.amazonaws.com/{ACCOUNT}/{PREFIX}-billing-inbox"
    status, refused = api.call(
        "POST",
        "/jobs",
        {
            "name": "e2e not granted",
            "schedule": {"expression": "0 3 * * *", "timezone": "UTC"},
            "target": {"kind": "sqs", "config": {"queue_url": other_team, "message": "x"}},
        },
    )
    assert status == 403, refused
    assert f"sqs:{PREFIX}-billing-inbox is not granted to" in refused["detail"], refused
    status, listing = api.call("GET", "/jobs")
    assert status == 200 and all(j["name"] != "e2e not granted" for j in listing["items"]), listing
