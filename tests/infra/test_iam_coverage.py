"""IAM coverage: every AWS operation a Lambda handler performs is granted by that function's SYNTHESIZED
role, on the resource it touched. moto enforces no IAM, so without this test a missing grant shows up only in
AWS (it did: `GET /jobs` answered 500 once the caller owned a job, because `list_jobs` uses BatchGetItem).

How. Each handler runs against moto with components whose boto3 clients carry a botocore hook
(`before-parameter-build.*.*`: the operation and its parameters as the code passed them, before
serialization). Each recorded call becomes the IAM (action, resource ARN) pairs AWS authorizes it against: a
transaction needs the action of each of its items on each item's table, a query on an index needs the index's
ARN, a batch send needs sqs:SendMessage on its queue. The test names (`test-...`) are mapped onto the stack's
(`tickwork-...`), and the template's statements are resolved (Fn::GetAtt, Ref, Fn::Join) to ARNs in the same
account and region.

Two rules. A call on one of the stack's own resources (tables, indexes, queues, the signing secret) must be
granted strictly: an Allow statement without conditions that names the action and the exact ARN (no wildcard
on either side). A call on anything else is a target call (user data): it must be granted by one of the
target statements (`infra.constructs.targets`: one action per resource type, ARN patterns from configuration;
iam:PassRole only with its condition, towards ECS tasks).
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import re
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from infra.constructs.targets import PASS_ROLE_CONDITION, TARGET_ACTIONS

from tests.api.conftest import Api, job_body
from tests.conftest import ANCHOR, NAMES, build_components
from tests.fakes import CrashError, RecordingMetrics, ScriptedInvoker
from tests.infra.conftest import Synth, as_list, policy_statements
from tests.scans import stream_records
from tickwork.adapters.secrets import header_secrets_prefix
from tickwork.adapters.targets.aws import boto3_client_factory
from tickwork.composition import Components
from tickwork.domain.alert_rules import AlertRules, Channel, ChannelKind
from tickwork.domain.clock import FakeClock
from tickwork.domain.dispatch import RunMessage, queue_index
from tickwork.domain.jobs import JobSpec
from tickwork.domain.models import Run, RunState, Trigger
from tickwork.domain.schedule import parse_schedule
from tickwork.domain.targets import Invocation, validate_target
from tickwork.handlers import executor, runtime, sweeper, ticker, watcher
from tickwork.resources import RUNS
from tickwork.services.executing import Executor, ExecutorConfig
from tickwork.services.jobs import Author
from tickwork.services.planning import Planner

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
PARTITION = "aws"
OWNER = "arn:aws:iam::123456789012:user/alice"
FIRE = datetime(2026, 12, 2, 12, 5, tzinfo=UTC)  # the first fire of "*/5 * * * *" after ANCHOR
PLAN_AT = datetime(2026, 12, 2, 12, 3, 0, 500000, tzinfo=UTC)  # FIRE is inside the ticker's lookahead
RUN_AT = FIRE + timedelta(milliseconds=100)

Need = tuple[str, str]  # (IAM action, resource ARN with the stack's names)
# What a tracked run's look does (the executor follows the execution or task its start began), and what
# RunTask makes IAM check besides ecs:RunTask: passing the task definition's roles to ECS.
LOOK_ACTIONS = frozenset({"states:DescribeExecution", "ecs:DescribeTasks"})
START_ACTIONS = TARGET_ACTIONS - LOOK_ACTIONS - {"iam:PassRole"}
# The request context of an iam:PassRole that RunTask checks.
PASSED_TO_ECS = {"iam:PassedToService": "ecs-tasks.amazonaws.com"}


# --- recording ---


@dataclass(frozen=True)
class Call:
    service: str  # the IAM prefix (the client's signing name)
    operation: str
    params: Mapping[str, Any]


@dataclass
class Recorder:
    """Records the calls of every client it is attached to, while `recording()` is open."""

    calls: list[Call] = field(default_factory=list)
    active: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, client: Any) -> Any:
        client.meta.events.register(
            "before-parameter-build.*.*", self._hook, unique_id=f"iam-coverage-{id(self)}"
        )
        return client

    def _hook(self, params: Mapping[str, Any], model: Any, **_: Any) -> None:
        if self.active:
            call = Call(model.service_model.signing_name, model.name, copy.deepcopy(dict(params)))
            with self._lock:
                self.calls.append(call)

    @contextmanager
    def recording(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False


def recording_components(base: Components, recorder: Recorder, **settings: Any) -> Components:
    """The same deployment as `base` (tables, queues, settings, clock), as one Lambda function's environment
    would build it: boto3 clients from the production factory, each with the recorder attached."""
    factory = boto3_client_factory(region_name=REGION)
    return Components(
        dataclasses.replace(base.settings, **settings),
        base.clock,
        lambda service: recorder.attach(factory(service)),
        RecordingMetrics(),
    )


# --- from a recorded call to what IAM checks ---

_TRANSACT_ACTION = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
_SQS_ACTION = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_TEST_PREFIX = re.compile(rf"(?<=[:/]){re.escape(NAMES.prefix)}(?=[-/])")
_SECRET_SUFFIX = re.compile(r"-[A-Za-z0-9]{6}$")  # Secrets Manager appends it to the name in the ARN


def _secret(secret_id: str) -> str:
    """A secret's ARN without Secrets Manager's suffix, from its ARN or its name (header secrets' ids)."""
    if secret_id.startswith("arn:"):
        return _SECRET_SUFFIX.sub("", secret_id)
    return _arn("secretsmanager", f"secret:{secret_id}")


def _arn(service: str, resource: str) -> str:
    return f"arn:{PARTITION}:{service}:{REGION}:{ACCOUNT}:{resource}"


def _table(params: Mapping[str, Any], name: str | None = None) -> str:
    arn = _arn("dynamodb", f"table/{name or params['TableName']}")
    return f"{arn}/index/{params['IndexName']}" if params.get("IndexName") else arn


def _queue(url: str) -> str:
    account, name = urlsplit(url).path.strip("/").split("/")[-2:]
    return f"arn:{PARTITION}:sqs:{REGION}:{account}:{name}"


def _function(name: str) -> str:
    return name if name.startswith("arn:") else _arn("lambda", f"function:{name}")


def _bus(name: str) -> str:
    return name if name.startswith("arn:") else _arn("events", f"event-bus/{name}")


def _task_definition(name: str) -> str:
    return name if name.startswith("arn:") else _arn("ecs", f"task-definition/{name}")


def needs_of(call: Call) -> list[Need]:
    """The (action, resource) pairs AWS authorizes `call` against, in the test's names."""
    p, op = call.params, call.operation
    found: list[Need]
    if call.service == "dynamodb":
        if op in ("TransactWriteItems", "TransactGetItems"):
            found = [
                (f"dynamodb:{_TRANSACT_ACTION[kind]}", _table(body))
                for item in p["TransactItems"]
                for kind, body in item.items()
            ]
        elif op in ("BatchGetItem", "BatchWriteItem"):
            found = [(f"dynamodb:{op}", _table(p, name)) for name in p["RequestItems"]]
        else:
            found = [(f"dynamodb:{op}", _table(p))]
    elif call.service == "sqs":
        found = [(f"sqs:{_SQS_ACTION.get(op, op)}", _queue(p["QueueUrl"]))]
    elif call.service == "sns" and op == "Publish":
        found = [("sns:Publish", p.get("TopicArn") or p["TargetArn"])]
    elif call.service == "sns" and op == "CreateTopic":
        topic = _arn("sns", p["Name"])  # (a create with tags is also authorized as tagging it)
        found = [("sns:CreateTopic", topic)] + ([("sns:TagResource", topic)] if p.get("Tags") else [])
    elif call.service == "sns" and op == "ListTagsForResource":
        found = [("sns:ListTagsForResource", p["ResourceArn"])]
    elif call.service == "sns" and op == "Subscribe":
        found = [("sns:Subscribe", p["TopicArn"])]
    elif call.service == "events" and op == "PutEvents":
        found = [("events:PutEvents", _bus(e.get("EventBusName", "default"))) for e in p["Entries"]]
    elif call.service == "lambda" and op == "Invoke":
        found = [("lambda:InvokeFunction", _function(p["FunctionName"]))]
    elif call.service == "states" and op == "StartExecution":
        found = [("states:StartExecution", p["stateMachineArn"])]
    elif call.service == "states" and op == "DescribeExecution":
        found = [("states:DescribeExecution", p["executionArn"])]
    elif call.service == "ecs" and op == "RunTask":
        found = [("ecs:RunTask", _task_definition(p["taskDefinition"]))]
    elif call.service == "ecs" and op == "DescribeTasks":
        found = [("ecs:DescribeTasks", task) for task in p["tasks"]]
    elif call.service == "secretsmanager" and op == "GetSecretValue":
        found = [("secretsmanager:GetSecretValue", _secret(p["SecretId"]))]
    elif call.service == "secretsmanager" and op == "CreateSecret":
        found = [("secretsmanager:CreateSecret", _secret(p["Name"]))]
    else:
        raise AssertionError(f"no IAM mapping for {call.service}:{op}: add one to needs_of")
    return found


def deployed(need: Need, prefix: str) -> Need:
    """The need with the stack's names (`test-jobs` -> `<prefix>-jobs`, `test/signing-secret` -> ...)."""
    action, arn = need
    return action, _TEST_PREFIX.sub(prefix, arn)


# --- the synthesized policies ---


@dataclass(frozen=True)
class Statement:
    actions: frozenset[str]
    resources: tuple[str, ...]  # resolved ARNs (target statements hold patterns)
    # StringEquals conditions (key -> value): only iam:PassRole has one (passed to ECS tasks only).
    conditions: Mapping[str, str] = field(default_factory=dict)

    def grants_strictly(self, action: str, arn: str) -> bool:
        return not self.conditions and action in self.actions and arn in self.resources

    def grants_pattern(self, action: str, arn: str, context: Mapping[str, str] | None = None) -> bool:
        given = context or {}
        return (
            action in self.actions
            and any(fnmatchcase(arn, pattern) for pattern in self.resources)
            and all(given.get(key) == value for key, value in self.conditions.items())
        )


class Template:
    """The synthesized template's resources and policies, with intrinsics resolved to ARNs."""

    def __init__(self, synth: Synth) -> None:
        self.resources: dict[str, dict[str, Any]] = synth.template.to_json()["Resources"]
        self.prefix = synth.stack.config.prefix

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, Mapping) and "Fn::Join" in value:
            separator, parts = value["Fn::Join"]
            return str(separator).join(self.resolve(part) for part in parts)
        if isinstance(value, Mapping) and "Ref" in value:
            pseudo = {"AWS::Partition": PARTITION, "AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
            if value["Ref"] in pseudo:
                return pseudo[value["Ref"]]
            resource = self.resources[value["Ref"]]
            if resource["Type"] == "AWS::SecretsManager::Secret":
                return _arn("secretsmanager", f"secret:{resource['Properties']['Name']}")
        if isinstance(value, Mapping) and "Fn::GetAtt" in value and value["Fn::GetAtt"][1] == "Arn":
            resource = self.resources[value["Fn::GetAtt"][0]]
            properties = resource["Properties"]
            if resource["Type"] == "AWS::DynamoDB::Table":
                return _arn("dynamodb", f"table/{properties['TableName']}")
            if resource["Type"] == "AWS::SQS::Queue":
                return _arn("sqs", properties["QueueName"])
        return f"unresolved:{json.dumps(value, sort_keys=True)}"

    def owned_arns(self) -> set[str]:
        """The stack's own data resources: tables and their indexes, queues, secrets."""
        owned: set[str] = set()
        for logical, resource in self.resources.items():
            if resource["Type"] in ("AWS::DynamoDB::Table", "AWS::SQS::Queue"):
                arn = self.resolve({"Fn::GetAtt": [logical, "Arn"]})
                owned.add(arn)
                for index in resource["Properties"].get("GlobalSecondaryIndexes", []):
                    owned.add(f"{arn}/index/{index['IndexName']}")
            elif resource["Type"] == "AWS::SecretsManager::Secret":
                owned.add(self.resolve({"Ref": logical}))
        return owned

    def statements(self, function: str) -> list[Statement]:
        """The Allow statements of every AWS::IAM::Policy attached to the named function's role."""
        [role] = [
            r["Properties"]["Role"]["Fn::GetAtt"][0]
            for r in self.resources.values()
            if r["Type"] == "AWS::Lambda::Function"
            and r["Properties"].get("FunctionName") == f"{self.prefix}-{function}"
        ]
        policies = {
            logical: resource
            for logical, resource in self.resources.items()
            if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]
        }
        found: list[Statement] = []
        for raw in policy_statements(policies, "PolicyDocument"):
            actions = frozenset(as_list(raw["Action"]))
            assert raw["Effect"] == "Allow", f"unmodelled statement {raw}"
            conditions: dict[str, str] = {}
            if "Condition" in raw:
                # The one conditioned statement: the ECS tasks' roles, passed to ECS only.
                assert actions == {"iam:PassRole"} and raw["Condition"] == PASS_ROLE_CONDITION, raw
                conditions = dict(raw["Condition"]["StringEquals"])
            resources = tuple(self.resolve(r) for r in as_list(raw["Resource"]))
            found.append(Statement(actions, resources, conditions))
        return found


def missing_grants(
    synth: Synth, function: str, calls: Sequence[Call], implied: Sequence[Need] = ()
) -> list[str]:
    """Every recorded need the function's role does not grant, as readable lines (empty: all granted).
    `implied`: needs no call names (the roles RunTask passes to ECS, `passed_roles`)."""
    template = Template(synth)
    statements = template.statements(function)
    owned = template.owned_arns()
    target_statements = [
        s for s in statements if len(s.actions) == 1 and next(iter(s.actions)) in TARGET_ACTIONS
    ]
    header_secrets = _arn("secretsmanager", f"secret:{header_secrets_prefix(template.prefix)}")
    mail_topics = _arn("sns", f"{template.prefix}-mail-")
    needs = [(need, f"{call.service}:{call.operation}") for call in calls for need in needs_of(call)]
    needs += [(need, "implied") for need in implied]
    missing: list[str] = []
    for need, why in needs:
        action, arn = deployed(need, template.prefix)
        if arn in owned:
            granted = any(s.grants_strictly(action, arn) for s in statements)
        elif arn.startswith(mail_topics):
            # E-mail channels' topics (one per address): granted on their name prefix only.
            granted = any(action in s.actions and f"{mail_topics}*" in s.resources for s in statements)
        elif arn.startswith(header_secrets):
            # Jobs' secret header values (one secret per owner and value): granted on their prefix only,
            # by a statement of that one action.
            granted = any(
                s.actions == {action} and s.resources == (f"{header_secrets}*",) for s in statements
            )
        else:
            context = PASSED_TO_ECS if action == "iam:PassRole" else None
            granted = any(s.grants_pattern(action, arn, context) for s in target_statements)
        if not granted:
            line = f"{action} on {arn} ({why})"
            if line not in missing:
                missing.append(line)
    return missing


def performed(calls: Sequence[Call], prefix: str) -> set[Need]:
    return {deployed(need, prefix) for call in calls for need in needs_of(call)}


# --- the deployment on moto ---


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status = 500 if self.path.endswith("/fail") else 404 if self.path.endswith("/gone") else 204
        self.send_response(status)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def hook_url() -> Iterator[str]:
    """A loopback HTTP target: `<url>/ok` answers 204, `<url>/fail` 500 (retried), `<url>/gone` 404 (not)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def base(dynamodb: Any) -> Iterator[Components]:
    """The deployment (tables, two dispatch queues, DLQ) with a FakeClock at ANCHOR; not recorded (setup)."""
    parts = build_components(dynamodb, FakeClock(ANCHOR))
    yield parts
    runtime.reset_for_tests(None)


@pytest.fixture
def secret_arn(moto: None) -> str:
    client = boto3.client("secretsmanager", region_name=REGION)
    arn: str = client.create_secret(Name=f"{NAMES.prefix}/signing-secret", SecretString="s3cret")["ARN"]
    return arn


def create_job(parts: Components, kind: str, config: Mapping[str, Any], **spec: Any) -> str:
    job = parts.job_service().create(
        OWNER,
        JobSpec(
            name=f"{kind}-job",
            schedule=parse_schedule("*/5 * * * *"),
            target=validate_target(kind, config),
            **spec,
        ),
    )
    return job.job_id


def plan(parts: Components) -> None:
    """The ticker's planning of FIRE, as setup (not recorded): on one thread (the planner's defaults),
    since moto is not safe for threads (the composition's planner commits on eight: a transaction's copy
    of a table met another's write)."""
    assert isinstance(parts.clock, FakeClock)
    parts.clock.set(PLAN_AT)
    planner = Planner(parts.store, parts.dispatcher, parts.clock)
    for shard in range(parts.settings.shard_count):
        planner.plan(shard, PLAN_AT)


def planned_run(parts: Components, job_id: str) -> Run:
    run = parts.store.get_run(job_id, FIRE)
    assert run is not None, f"{job_id} has no run at {FIRE}"
    return run


def sqs_event(runs: Sequence[Run], queue_urls: Sequence[str]) -> dict[str, Any]:
    """An SQS event source batch carrying the runs' dispatch messages, each from its run's queue."""
    sent_ms = str(int(PLAN_AT.timestamp() * 1000) + 100)
    return {
        "Records": [
            {
                "messageId": f"m-{number}",
                "receiptHandle": f"r-{number}",
                "body": RunMessage.for_run(run).to_json(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": sent_ms},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": _queue(queue_urls[queue_index(run.run_id, len(queue_urls))]),
                "awsRegion": REGION,
            }
            for number, run in enumerate(runs)
        ]
    }


class LambdaContext:
    function_name = "tickwork-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tickwork-test"
    aws_request_id = "req-iam-1"


def aws_targets(prefix: str) -> dict[str, dict[str, Any]]:
    """One resource of each AWS target kind on moto, named by the default convention (`<prefix>-target-*`),
    and the target config that calls it."""
    sqs = boto3.client("sqs", region_name=REGION)
    sns = boto3.client("sns", region_name=REGION)
    events = boto3.client("events", region_name=REGION)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    iam = boto3.client("iam", region_name=REGION)
    lambda_ = boto3.client("lambda", region_name=REGION)
    name = f"{prefix}-target-reports"
    role = iam.create_role(RoleName="target-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("index.py", "def handler(event, context):\n    return event\n")
    lambda_.create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": archive.getvalue()},
    )
    events.create_event_bus(Name=name)
    machine = sfn.create_state_machine(
        name=name,
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}),
        roleArn=role,
    )["stateMachineArn"]
    return {
        "sqs": {"queue_url": sqs.create_queue(QueueName=name)["QueueUrl"], "message": "rebuild"},
        "sns": {"topic_arn": sns.create_topic(Name=name)["TopicArn"], "message": "report ready"},
        "eventbridge": {"event_bus_name": name, "source": "my.app", "detail_type": "Nightly", "detail": {}},
        "lambda": {"function_name": name, "invocation_type": "Event", "payload": {"k": 1}},
        "stepfunctions": {"state_machine_arn": machine, "input": {"day": "monday"}},
        "ecs": ecs_target(prefix),
    }


def ecs_target(prefix: str) -> dict[str, Any]:
    """A Fargate task definition, its cluster and its two roles on moto, all named by the convention, and a
    subnet and security group to run it in (moto places the task's network interface there)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    iam = boto3.client("iam", region_name=REGION)
    ecs = boto3.client("ecs", region_name=REGION)
    name = f"{prefix}-target-reports"
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # moto names the task's ENI
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName=name, Description="tasks", VpcId=vpc)["GroupId"]
    roles = {
        kind: iam.create_role(RoleName=f"{prefix}-target-{kind}", AssumeRolePolicyDocument="{}")["Role"][
            "Arn"
        ]
        for kind in ("task-role", "execution-role")
    }
    ecs.create_cluster(clusterName=name)
    ecs.register_task_definition(
        family=name,
        containerDefinitions=[{"name": "main", "image": "busybox", "essential": True, "memory": 128}],
        requiresCompatibilities=["FARGATE"],
        networkMode="awsvpc",
        cpu="256",
        memory="512",
        taskRoleArn=roles["task-role"],
        executionRoleArn=roles["execution-role"],
    )
    return {
        "cluster": name,
        "task_definition": name,
        "container": "main",
        "subnets": [subnet],
        "security_groups": [group],
    }


def passed_roles(calls: Sequence[Call]) -> list[Need]:
    """iam:PassRole on each role of the task definitions the recorded RunTask calls ran (IAM checks it
    with ecs:RunTask; no call names the roles)."""
    ecs = boto3.client("ecs", region_name=REGION)
    needs: list[Need] = []
    for call in calls:
        if (call.service, call.operation) == ("ecs", "RunTask"):
            found = ecs.describe_task_definition(taskDefinition=call.params["taskDefinition"])
            for key in ("taskRoleArn", "executionRoleArn"):
                if found["taskDefinition"].get(key):
                    needs.append(("iam:PassRole", found["taskDefinition"][key]))
    return needs


# --- one test per function ---


def test_the_api_role_grants_every_operation_of_the_api(base: Components, default: Synth) -> None:
    recorder = Recorder()
    parts = recording_components(base, recorder)
    runtime.reset_for_tests(parts)
    assert isinstance(parts.clock, FakeClock)
    call = Api(parts, parts.clock)

    with recorder.recording():
        # Its Authorization header is secret: stored in Secrets Manager, the job keeps a reference.
        secret = {
            "kind": "http",
            "config": {"url": "https://h.example.com/x", "headers": {"Authorization": "t"}},
        }
        created = call("POST", "/jobs", body=job_body(target=secret))
        assert created.status == 201, created.body
        job_id, version = created.body["id"], created.headers["ETag"]
        # Every minute: the first fire is inside the lookahead, so the create plans and sends it at once.
        minutely_body = job_body(schedule={"expression": "* * * * *"})
        minutely = call("POST", "/jobs", body=minutely_body, headers={"Idempotency-Key": "k1"})
        assert minutely.status == 201, minutely.body
        replayed = call("POST", "/jobs", body=minutely_body, headers={"Idempotency-Key": "k1"})
        assert replayed.status == 200 and replayed.body["id"] == minutely.body["id"]
        assert call("GET", f"/jobs/{job_id}").status == 200
        listed = call("GET", "/jobs")
        assert listed.status == 200 and len(listed.body["items"]) == 2
        assert call("GET", "/jobs", query="state=active&tag=a%3Db").status == 200
        patched = call("PATCH", f"/jobs/{job_id}", body={"name": "renamed"}, headers={"If-Match": version})
        assert patched.status == 200, patched.body
        patched = call("PATCH", f"/jobs/{job_id}", body={"schedule": {"expression": "* * * * *"}})
        assert patched.status == 200, patched.body
        assert call("POST", f"/jobs/{job_id}/pause", query="note=test").status == 200
        assert call("POST", f"/jobs/{job_id}/resume").status == 200
        runs = call("GET", f"/jobs/{minutely.body['id']}/runs")
        assert runs.status == 200 and runs.body["items"], runs.body
        assert call("GET", f"/jobs/{minutely.body['id']}/runs/{runs.body['items'][0]['id']}").status == 200
        assert call("GET", f"/jobs/{job_id}/preview").status == 200
        assert call("POST", "/schedules/preview", body={"expression": "0 9 * * *"}).status == 200
        # Runs on request: run now (with its Idempotency-Key record), a backfill, the failed-runs index.
        now = call("POST", f"/jobs/{minutely.body['id']}/runs", headers={"Idempotency-Key": "r1"})
        assert now.status == 201, now.body
        again = call("POST", f"/jobs/{minutely.body['id']}/runs", headers={"Idempotency-Key": "r1"})
        assert again.status == 200 and again.body["id"] == now.body["id"]
        filled = call(
            "POST",
            f"/jobs/{minutely.body['id']}/backfill",
            body={"from": "2026-12-02T11:50:00Z", "to": "2026-12-02T11:55:00Z"},
        )
        assert filled.status == 202 and filled.body["created"] == 6, filled.body
        assert call("GET", "/runs", query="state=failed").status == 200
        refused = call("POST", f"/jobs/{minutely.body['id']}/runs/{now.body['id']}/retry")
        assert refused.status == 409, refused.body
        # Revisions and the audit log (the events table), a diff and a rollback (an edit).
        assert call("GET", f"/jobs/{job_id}/revisions").body["items"]
        assert call("GET", f"/jobs/{job_id}/revisions/1").status == 200
        assert call("GET", f"/jobs/{job_id}/diff", query="from=1&to=2").status == 200
        rolled = call("POST", f"/jobs/{job_id}/rollback", body={"revision": 1, "note": "undo"})
        assert rolled.status == 200, rolled.body
        assert call("GET", "/audit").body["items"]
        assert call("DELETE", f"/jobs/{job_id}", query="note=done").status == 204

    prefix = default.stack.config.prefix
    done = performed(recorder.calls, prefix)
    jobs_table = _arn("dynamodb", f"table/{prefix}-jobs")
    assert ("dynamodb:BatchGetItem", jobs_table) in done, "list_jobs was not exercised"
    assert ("dynamodb:Query", f"{jobs_table}/index/by_owner") in done
    runs_table = _arn("dynamodb", f"table/{prefix}-runs")
    assert ("dynamodb:Query", f"{runs_table}/index/failed_runs") in done, "failed runs were not listed"
    events_table = _arn("dynamodb", f"table/{prefix}-events")
    assert ("dynamodb:PutItem", events_table) in done, "no revision was written with its job"
    assert ("dynamodb:Query", events_table) in done, "no revision or audit entry was read"
    requests_table = _arn("dynamodb", f"table/{prefix}-requests")
    assert ("dynamodb:PutItem", requests_table) in done or (
        "dynamodb:TransactWriteItems",
        requests_table,
    ) in done, "no Idempotency-Key record was written"
    dispatch_queues = {_arn("sqs", f"{prefix}-dispatch-{i}") for i in range(2)}
    assert {("sqs:SendMessage", q) for q in dispatch_queues} & done, "no immediate fire was dispatched"
    stored = [arn for action, arn in done if action == "secretsmanager:CreateSecret"]
    assert stored and all(f":secret:{prefix}/headers/" in arn for arn in stored), done
    assert missing_grants(default, "api", recorder.calls) == []


def test_the_ticker_role_grants_every_operation_of_planning(
    base: Components, default: Synth, hook_url: str
) -> None:
    for _ in range(3):
        create_job(base, "http", {"url": f"{hook_url}/ok"})
    recorder = Recorder()
    parts = recording_components(base, recorder)
    runtime.reset_for_tests(parts)
    assert isinstance(parts.clock, FakeClock)
    parts.clock.set(PLAN_AT)

    with recorder.recording():
        event = {"version": "0", "source": "aws.events", "time": "2026-12-02T12:03:00Z", "shards": [0, 1]}
        summary = ticker.handler(event, LambdaContext())

    assert summary["RunsPlanned"] == 3 and summary["incomplete_shards"] == [], summary
    prefix = default.stack.config.prefix
    done = performed(recorder.calls, prefix)
    assert ("dynamodb:Query", _arn("dynamodb", f"table/{prefix}-jobs/index/due")) in done
    assert ("dynamodb:PutItem", _arn("dynamodb", f"table/{prefix}-shards")) in done
    assert missing_grants(default, "ticker", recorder.calls) == []


def test_the_executor_role_grants_every_operation_of_success_retry_and_every_target(
    base: Components, default: Synth, hook_url: str, secret_arn: str
) -> None:
    targets = aws_targets(NAMES.prefix)
    ok = create_job(base, "http", {"url": f"{hook_url}/ok", "secret_headers": {"X-Key": "k3y"}})
    failing = create_job(base, "http", {"url": f"{hook_url}/fail"})
    by_kind = {kind: create_job(base, kind, config) for kind, config in targets.items()}
    plan(base)
    runs = [planned_run(base, job_id) for job_id in (ok, failing, *by_kind.values())]
    recorder = Recorder()
    # In AWS the executor reads the signing secret from Secrets Manager at cold start.
    parts = recording_components(base, recorder, signing_secret="", signing_secret_arn=secret_arn)
    runtime.reset_for_tests(parts)
    assert isinstance(parts.clock, FakeClock)
    parts.clock.set(RUN_AT)

    with recorder.recording():
        response = executor.handler(sqs_event(runs, base.settings.dispatch_queue_urls), LambdaContext())

    assert response == {"batchItemFailures": []}
    assert planned_run(base, ok).state is RunState.SUCCEEDED
    assert planned_run(base, failing).state is RunState.RETRY_WAIT  # 500: retried, its message re-sent
    prefix = default.stack.config.prefix
    done = performed(recorder.calls, prefix)
    assert {action for action, _ in done} >= {
        *START_ACTIONS,
        "secretsmanager:GetSecretValue",
        "sqs:SendMessage",
        "dynamodb:UpdateItem",  # the claim and the finish: conditional updates, never a whole-item put
    }, done
    read = {arn for action, arn in done if action == "secretsmanager:GetSecretValue"}
    assert any(f":secret:{prefix}/headers/" in arn for arn in read), "no secret header value was resolved"
    assert missing_grants(default, "executor", recorder.calls, passed_roles(recorder.calls)) == []


def test_the_executor_role_grants_starting_and_following_tracked_runs(
    base: Components, default: Synth, secret_arn: str
) -> None:
    """A tracked start and the looks that follow it (moto's executions and tasks stay running: each look
    answers None), through the executor's own target registry and clients."""
    targets = aws_targets(NAMES.prefix)
    recorder = Recorder()
    parts = recording_components(base, recorder, signing_secret="", signing_secret_arn=secret_arn)
    invocation = Invocation(
        run_id=f"job_1:{FIRE:%Y%m%dT%H%M%SZ}",
        job_id="job_1",
        scheduled_for=FIRE,
        attempt=1,
        timeout_seconds=60,
        track=True,
    )

    with recorder.recording():
        for kind in ("stepfunctions", "ecs"):
            target = validate_target(kind, targets[kind])
            started = parts.targets.invoke(target, invocation)
            assert started.accepted and started.handle is not None, started
            assert parts.targets.track(target, started.handle) is None  # still running

    prefix = default.stack.config.prefix
    done = {action for action, _ in performed(recorder.calls, prefix)}
    assert done >= {"states:StartExecution", "states:DescribeExecution", "ecs:RunTask", "ecs:DescribeTasks"}
    implied = passed_roles(recorder.calls)
    assert len(implied) == 2, implied
    assert missing_grants(default, "executor", recorder.calls, implied) == []


def test_a_role_is_passed_to_ecs_tasks_only(default: Synth) -> None:
    """iam:PassRole is granted on the convention's roles towards ecs-tasks.amazonaws.com, and no further."""
    role = f"arn:{PARTITION}:iam::{ACCOUNT}:role/test-target-task-role"
    need = [("iam:PassRole", role)]
    assert missing_grants(default, "executor", [], need) == []
    [statement] = [s for s in Template(default).statements("executor") if s.actions == {"iam:PassRole"}]
    deployed_role = deployed(need[0], default.stack.config.prefix)[1]
    assert statement.grants_pattern("iam:PassRole", deployed_role, PASSED_TO_ECS)
    assert not statement.grants_pattern("iam:PassRole", deployed_role, {"iam:PassedToService": "lambda"})
    assert not statement.grants_pattern("iam:PassRole", deployed_role)
    other = f"arn:{PARTITION}:iam::{ACCOUNT}:role/admin"
    assert missing_grants(default, "executor", [], [("iam:PassRole", other)]) != []


def test_the_sweeper_role_grants_every_operation_of_repairs_and_the_dead_letter_drain(
    base: Components, default: Synth, hook_url: str
) -> None:
    stalled = create_job(base, "http", {"url": f"{hook_url}/ok"})  # planned; its message never arrives
    crashed = create_job(base, "http", {"url": f"{hook_url}/ok"})  # its worker dies holding the lease
    dead = create_job(base, "http", {"url": f"{hook_url}/ok"})  # its message ends in the DLQ
    plan(base)
    for job_id in (stalled, crashed):
        # As if sent after their commit (runs the API makes): the sweeper's to repair. The ticker's own runs
        # are queue-carried and never in its work list (tests/services/test_queue_carried.py).
        run = planned_run(base, job_id)
        base.store.transition_run(run, replace(run, queue_carried=False))
    assert isinstance(base.clock, FakeClock)
    base.clock.set(RUN_AT)
    dying = Executor(
        base.store,
        ScriptedInvoker(crash=True),
        base.dispatcher,
        base.clock,
        RecordingMetrics(),
        ExecutorConfig(worker_id="dies", lease_margin=timedelta(seconds=30)),
    )
    with pytest.raises(CrashError):
        dying.execute(RunMessage.for_run(planned_run(base, crashed)))
    boto3.client("sqs", region_name=REGION).send_message(
        QueueUrl=base.settings.dead_letter_queue_url,
        MessageBody=RunMessage.for_run(planned_run(base, dead)).to_json(),
    )
    recorder = Recorder()
    parts = recording_components(base, recorder)
    runtime.reset_for_tests(parts)
    base.clock.set(FIRE + timedelta(minutes=5))  # past the dispatch grace and the crashed run's lease

    with recorder.recording():
        report = sweeper.handler({"source": "aws.events"}, LambdaContext())

    assert report["redispatched"] >= 1 and report["expired_leases"] == 1, report
    assert report["dead_lettered"] == 1 and report["errors"] == [], report
    assert planned_run(base, stalled).redispatched_at is not None
    prefix = default.stack.config.prefix
    done = performed(recorder.calls, prefix)
    dlq = _arn("sqs", f"{prefix}-dispatch-dlq")
    assert {("sqs:ReceiveMessage", dlq), ("sqs:DeleteMessage", dlq)} <= done
    assert ("dynamodb:Query", _arn("dynamodb", f"table/{prefix}-runs/index/open_runs")) in done
    assert missing_grants(default, "sweeper", recorder.calls) == []


def runs_stream() -> list[dict[str, Any]]:
    """The runs table's stream on moto, as its event source mapping hands the records to the watcher."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    streams = boto3.client("dynamodbstreams", region_name=REGION)
    return stream_records(dynamodb, streams, NAMES.table(RUNS))


def test_the_watcher_role_grants_every_operation_of_watching_sending_and_pausing(
    base: Components, default: Synth, hook_url: str, secret_arn: str
) -> None:
    """Two late runs that fail in a row, of a job whose rules pause it at the second: events recorded, one
    message per channel (a webhook, one that fails and is retried, one that is gone, an SNS topic, an
    e-mail address's topic), the
    rest folded into a digest, the job paused (its planned runs' views rewritten); then the minutely pass:
    the retry, the digests, and the deadline timers of the runs still planned."""
    topic = boto3.client("sns", region_name=REGION).create_topic(Name=f"{NAMES.prefix}-target-alerts")[
        "TopicArn"
    ]
    rules = AlertRules(
        late_after_seconds=1,
        deadline_seconds=60,
        auto_pause_after=2,
        window_seconds=300,  # the second run's lateness and failure are folded into digests
        channels=(
            Channel(ChannelKind.WEBHOOK, f"{hook_url}/ok"),
            Channel(ChannelKind.WEBHOOK, f"{hook_url}/fail"),
            Channel(ChannelKind.SLACK, f"{hook_url}/gone"),
            Channel(ChannelKind.SNS, topic),
            Channel(ChannelKind.EMAIL, "ops@example.com"),
        ),
    )
    mail = _arn("sns", f"{NAMES.prefix}-mail-")
    base.settings = dataclasses.replace(base.settings, email_topic_prefix=mail)
    base.__dict__.pop("email", None)  # (cached: built again from the settings)
    job = base.job_service().create(
        OWNER,
        JobSpec(
            name="watched",
            schedule=parse_schedule("* * * * *"),  # its next fires are planned at once: pausing rewrites them
            target=validate_target("http", {"url": f"{hook_url}/ok"}),
            alerts=rules,
        ),
    )
    assert base.store.claimable_runs(job.job_id, ANCHOR), "no planned run for the pause to rewrite"
    for minutes in (3, 2):  # two fires before now, each started late and failed
        fire = ANCHOR.replace(second=0) - timedelta(minutes=minutes)
        run = Run.for_fire(job, fire, now=fire, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
        base.store.restore_runs([run])
        running = replace(run, state=RunState.RUNNING, attempt=1, started_at=fire + timedelta(seconds=5))
        running = replace(running, start_delay_ms=5000)
        base.store.transition_run(run, running)
        failed = replace(
            running, state=RunState.FAILED, finished_at=fire + timedelta(seconds=8), reason="HTTP 500"
        )
        base.store.transition_run(running, failed)
    records = runs_stream()
    recorder = Recorder()
    parts = recording_components(base, recorder, signing_secret="", signing_secret_arn=secret_arn)
    runtime.reset_for_tests(parts)
    assert isinstance(parts.clock, FakeClock)

    with recorder.recording():
        parts.clock.set(ANCHOR)
        streamed = watcher.handler({"Records": records}, LambdaContext())
        parts.clock.set(ANCHOR + timedelta(minutes=20))  # past every window, retry and deadline
        scheduled = watcher.handler({}, LambdaContext())

    observed, first, later = streamed["observed"], streamed["delivered"], scheduled["delivered"]
    assert observed["kinds"].keys() >= {"run_late", "run_failed", "auto_paused"}, observed
    assert observed["timers"] >= 3, observed  # the two past runs and the planned ones
    assert first["sent"] >= 2 and first["failed_sends"] >= 2, first  # /ok and SNS; /fail and /gone
    assert later["digests"] >= 1 and later["events"] >= 1, (
        later
    )  # the runs still planned missed their deadline
    assert base.store.get_job(job.job_id).state.value == "paused"  # type: ignore[union-attr]
    prefix = default.stack.config.prefix
    done = performed(recorder.calls, prefix)
    events = _arn("dynamodb", f"table/{prefix}-events")
    runs = _arn("dynamodb", f"table/{prefix}-runs")
    jobs = _arn("dynamodb", f"table/{prefix}-jobs")
    assert any(a == "sns:Publish" and r.startswith(_arn("sns", f"{prefix}-mail-")) for a, r in done), done
    assert {
        ("sns:Publish", deployed(("sns:Publish", topic), prefix)[1]),
        ("dynamodb:Query", f"{events}/index/outbox"),
        ("dynamodb:PutItem", events),  # a timer, a retry, a channel's health
        ("dynamodb:DeleteItem", events),  # a message sent, a timer spent
        ("dynamodb:Query", runs),  # the streak, and the pause's claimable runs
        ("dynamodb:GetItem", runs),  # a run at its deadline
        ("dynamodb:UpdateItem", jobs),  # the auto-pause
        ("dynamodb:UpdateItem", runs),  # the pause rewrites its planned runs' views
    } <= done, done
    assert any(action == "secretsmanager:GetSecretValue" for action, _ in done)
    assert missing_grants(default, "watcher", recorder.calls) == []


@pytest.fixture
def deployed_api(base: Components, secret_arn: str) -> Iterator[tuple[Components, Recorder]]:
    """The API function's components as the stack configures them: the signing secret and the callback key
    by their ARNs (the API may read the callback key only), every client recorded."""
    client = boto3.client("secretsmanager", region_name=REGION)
    callback_key = client.create_secret(Name=f"{NAMES.prefix}/callback-token-key", SecretString="k3y")["ARN"]
    recorder = Recorder()
    parts = recording_components(
        base,
        recorder,
        signing_secret="",
        signing_secret_arn=secret_arn,
        callback_key_arn=callback_key,
        email_topic_prefix=_arn("sns", f"{NAMES.prefix}-mail-"),
    )
    runtime.reset_for_tests(parts)
    yield parts, recorder


def test_the_api_role_grants_alert_defaults_and_reading_events(
    deployed_api: tuple[Components, Recorder], default: Synth
) -> None:
    """PUT, GET and DELETE /alert-defaults (an item of the events table), a job created without `alerts`
    (it gets the defaults), and GET /events: a job's (the table, and its channels' health) and an owner's
    (the `by_owner` index)."""
    parts, recorder = deployed_api
    assert isinstance(parts.clock, FakeClock)
    call = Api(parts, parts.clock)
    rules = {
        "failures_in_a_row": 3,
        "channels": [
            {"kind": "webhook", "url": "https://hooks.example.com/t"},
            {"kind": "email", "address": "ops@example.com"},  # its topic created, tagged, subscribed
        ],
    }

    with recorder.recording():
        put = call("PUT", "/alert-defaults", body=rules)
        assert put.status == 200, put.body
        assert call("GET", "/alert-defaults").status == 200
        created = call("POST", "/jobs", body=job_body())
        assert created.status == 201, created.body
        assert created.body["alerts"]["failures_in_a_row"] == 3, created.body
        assert call("DELETE", "/alert-defaults").status == 204
        of_job = call("GET", "/events", query=f"job_id={created.body['id']}")
        assert of_job.status == 200 and of_job.body["items"] == [], of_job.body
        of_owner = call("GET", "/events")
        assert of_owner.status == 200 and of_owner.body["items"] == [], of_owner.body

    prefix = default.stack.config.prefix
    events = _arn("dynamodb", f"table/{prefix}-events")
    done = performed(recorder.calls, prefix)
    assert {"sns:CreateTopic", "sns:TagResource", "sns:ListTagsForResource", "sns:Subscribe"} <= {
        action for action, _ in done
    }
    assert {
        ("dynamodb:PutItem", events),
        ("dynamodb:DeleteItem", events),
        ("dynamodb:GetItem", events),
        ("dynamodb:Query", events),
        ("dynamodb:Query", f"{events}/index/by_owner"),
    } <= performed(recorder.calls, prefix)
    assert missing_grants(default, "api", recorder.calls) == []


def test_the_api_role_grants_recording_a_resume_that_clears_an_auto_pause(
    deployed_api: tuple[Components, Recorder], default: Synth, base: Components
) -> None:
    parts, recorder = deployed_api
    assert isinstance(parts.clock, FakeClock)
    job = create_job(base, "http", {"url": "https://hooks.example.com/x"})
    base.job_service().pause(OWNER, job, reason="3 failures in a row", cause_at=ANCHOR)
    call = Api(parts, parts.clock)

    with recorder.recording():
        resumed = call("POST", f"/jobs/{job}/resume")
        assert resumed.status == 200, resumed.body

    events, _ = base.event_log.job_events(job, 10, None)
    assert [str(e.kind) for e in events] == ["resumed"], events
    assert missing_grants(default, "api", recorder.calls) == []


def test_a_missing_grant_is_reported_with_its_resource(base: Components, default: Synth) -> None:
    """The checker itself: an index query is not covered by a grant on its table, nor a table by its index."""
    calls = [
        Call("dynamodb", "Query", {"TableName": f"{NAMES.prefix}-runs", "IndexName": "open_runs"}),
        Call("dynamodb", "BatchGetItem", {"RequestItems": {f"{NAMES.prefix}-runs": {"Keys": []}}}),
        Call("sqs", "ReceiveMessage", {"QueueUrl": base.settings.dispatch_queue_urls[0]}),
        Call("sqs", "SendMessage", {"QueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/elsewhere"}),
    ]
    prefix = default.stack.config.prefix
    assert missing_grants(default, "ticker", calls) == [
        f"dynamodb:Query on {_arn('dynamodb', f'table/{prefix}-runs/index/open_runs')} (dynamodb:Query)",
        f"dynamodb:BatchGetItem on {_arn('dynamodb', f'table/{prefix}-runs')} (dynamodb:BatchGetItem)",
        f"sqs:ReceiveMessage on {_arn('sqs', f'{prefix}-dispatch-0')} (sqs:ReceiveMessage)",
        f"sqs:SendMessage on {_arn('sqs', 'elsewhere')} (sqs:SendMessage)",
    ]


class TimedContext(LambdaContext):
    """A context that says how long the invocation has left (the watcher's bulk pass uses what is left)."""

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def test_the_watcher_role_grants_bulk_pauses_resumes_and_retries(base: Components, default: Synth) -> None:
    """Issue 33, part 1: the minutely pass works on due bulk actions: a pause, a resume (it plans and sends
    the resumed jobs' next fires) and a retry of failed runs (a request record, the run, its message)."""
    from tickwork.domain.bulk import BulkKind, Selector
    from tickwork.services.bulk import BulkRequest

    minutely = base.job_service().create(
        OWNER, JobSpec(name="m", schedule=parse_schedule("* * * * *"), target=validate_target("http", {
            "url": "https://h.example.com/x"}), group="etl")
    )  # fmt: skip
    paused = create_job(base, "http", {"url": "https://h.example.com/y"}, group="etl")
    base.job_service().pause(OWNER, paused, by=Author(OWNER, "x"))
    failed = create_job(base, "http", {"url": "https://h.example.com/z"}, group="etl")
    job = base.store.get_job(failed)
    assert job is not None
    fire = FIRE - timedelta(minutes=10)
    run = Run.for_fire(job, fire, now=fire, trigger=Trigger.SCHEDULE, state=RunState.PLANNED)
    base.store.restore_runs([run])
    running = replace(run, state=RunState.RUNNING, attempt=1, started_at=fire, lease_owner="w")
    base.store.transition_run(run, running)
    base.store.transition_run(
        running, replace(running, state=RunState.FAILED, finished_at=fire, lease_owner=None)
    )
    bulk = base.bulk_service()
    etl = Selector(group="etl")
    for request in (
        BulkRequest(BulkKind.PAUSE, Selector(group="etl", tags={"none": "x"}), "nothing matches"),
        BulkRequest(BulkKind.RESUME, etl, "back"),
        BulkRequest(BulkKind.RETRY_FAILED, etl, "again", runs_from=fire - timedelta(hours=1), runs_to=ANCHOR),
    ):
        bulk.start(OWNER, OWNER, request, None, lambda: f"{request.kind}")  # noqa: B023 (called at once)
    recorder = Recorder()
    parts = recording_components(base, recorder)
    runtime.reset_for_tests(parts)
    with recorder.recording():
        report = watcher.handler({}, TimedContext())
    assert report["bulk_done"] >= 2, report
    assert base.store.get_job(paused).state.value == "active"  # type: ignore[union-attr]
    assert base.store.get_run(failed, fire).state is RunState.RETRY_WAIT  # type: ignore[union-attr]
    assert minutely.job_id
    missing = missing_grants(default, "watcher", recorder.calls)
    assert missing == [], "\n".join(missing)


def test_the_api_and_executor_roles_grant_calendars_and_bulk_actions(
    base: Components, default: Synth, hook_url: str
) -> None:
    """Issue 33, parts 1 and 2: the API writes, lists and deletes calendars and starts and reads bulk
    actions (their first slice of work included); the executor reads a job's calendars at its claim."""
    recorder = Recorder()
    parts = recording_components(base, recorder)
    runtime.reset_for_tests(parts)
    assert isinstance(parts.clock, FakeClock)
    call = Api(parts, parts.clock)
    holiday = {"timezone": "UTC", "dates": [{"date": FIRE.date().isoformat(), "label": "holiday"}]}
    with recorder.recording():
        assert call("PUT", "/calendars/h", body=holiday).status == 201
        assert call("GET", "/calendars").status == 200 and call("GET", "/calendars/h").status == 200
        body = job_body(schedule={"expression": "*/5 * * * *"}, calendars=["h"], group="g",
                        target={"kind": "http", "config": {"url": f"{hook_url}/ok"}})  # fmt: skip
        created = call("POST", "/jobs", body=body)
        assert created.status == 201, created.body
        assert call("GET", "/groups").status == 200
        started = call("POST", "/bulk-actions", body={"action": "pause", "group": "g", "note": "x"})
        assert started.status == 202 and started.body["progress"]["changed"] == 1, started.body
        started = call("POST", "/bulk-actions", body={"action": "resume", "group": "g", "note": "x"})
        assert started.status == 202 and started.body["progress"]["changed"] == 1, started.body
        assert call("GET", "/bulk-actions").status == 200
        assert call("GET", f"/bulk-actions/{started.body['id']}").status == 200
    assert missing_grants(default, "api", recorder.calls) == []

    plan(base)
    run = planned_run(base, created.body["id"])
    executing = Recorder()
    parts = recording_components(base, executing)
    runtime.reset_for_tests(parts)
    assert isinstance(parts.clock, FakeClock)
    parts.clock.set(RUN_AT)
    with executing.recording():
        response = executor.handler(sqs_event([run], base.settings.dispatch_queue_urls), LambdaContext())
    assert response == {"batchItemFailures": []}
    assert planned_run(base, created.body["id"]).state is RunState.EXCLUDED
    call_after = Api(parts, parts.clock)
    assert call_after("DELETE", "/calendars/h").status == 204
    assert missing_grants(default, "executor", executing.calls) == []
