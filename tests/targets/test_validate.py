"""validate_target: good configs normalise, bad ones name the offending field."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.domain.errors import ValidationError
from tickwork.domain.targets import MAX_PAYLOAD_BYTES, TARGET_KINDS, validate_target

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
TOPIC = "arn:aws:sns:us-east-1:123456789012:alerts"
MACHINE = "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly-etl"
BIG = "x" * (MAX_PAYLOAD_BYTES + 1)

GOOD: list[Any] = [
    pytest.param(
        "http",
        {"url": "https://example.com/hook"},
        {"method": "POST", "url": "https://example.com/hook", "headers": {}, "body": ""},
        id="http-defaults-to-post",
    ),
    pytest.param(
        "http",
        {
            "url": "http://example.com:8080/a?b=c",
            "method": "patch",
            "headers": {"Authorization": "Bearer t"},
            "body": "{}",
        },
        {
            "method": "PATCH",
            "url": "http://example.com:8080/a?b=c",
            "headers": {},
            # a credential-like header is secret: kept apart, stored as a reference (domain/secrets.py)
            "secret_headers": {"Authorization": "Bearer t"},
            "body": "{}",
        },
        id="http-method-upper-cased",
    ),
    pytest.param(
        "http",
        {"url": "http://[2001:db8::1]/x", "method": "GET", "body": None},
        {"method": "GET", "url": "http://[2001:db8::1]/x", "headers": {}, "body": ""},
        id="http-ipv6-literal-null-body",
    ),
    pytest.param("http", {"url": "https://h/", "body": "é" * 1000}, None, id="http-unicode-body"),
    pytest.param(
        "sqs", {"queue_url": QUEUE, "message": "hi"}, {"queue_url": QUEUE, "message": "hi"}, id="sqs"
    ),
    pytest.param(
        "sqs",
        {
            "queue_url": "http://127.0.0.1:4566/000000000000/jobs.fifo",
            "message": "m",
            "message_group_id": "g1",
        },
        {
            "queue_url": "http://127.0.0.1:4566/000000000000/jobs.fifo",
            "message": "m",
            "message_group_id": "g1",
        },
        id="sqs-fifo-local-emulator",
    ),
    pytest.param(
        "sns", {"topic_arn": TOPIC, "message": "m", "subject": "Nightly"}, None, id="sns-with-subject"
    ),
    pytest.param(
        "sns",
        {"topic_arn": "arn:aws-us-gov:sns:us-gov-west-1:123456789012:t.fifo", "message": "m"},
        None,
        id="sns-govcloud-fifo",
    ),
    pytest.param(
        "eventbridge",
        {"source": "my.app", "detail_type": "Tick"},
        {"event_bus_name": "default", "source": "my.app", "detail_type": "Tick", "detail": {}},
        id="eventbridge-defaults",
    ),
    pytest.param(
        "eventbridge",
        {
            "event_bus_name": "arn:aws:events:us-east-1:123456789012:event-bus/ops",
            "source": "a",
            "detail_type": "b",
            "detail": {"n": [1, 2.5, None, True]},
        },
        None,
        id="eventbridge-bus-arn",
    ),
    pytest.param(
        "lambda",
        {"function_name": "report"},
        {"function_name": "report", "invocation_type": "RequestResponse", "payload": {}},
        id="lambda-defaults",
    ),
    pytest.param(
        "lambda",
        {
            "function_name": "arn:aws:lambda:us-east-1:123456789012:function:report:live",
            "invocation_type": "Event",
            "payload": [1, "two"],
        },
        None,
        id="lambda-arn-alias",
    ),
    pytest.param("lambda", {"function_name": "123456789012:function:report"}, None, id="lambda-partial-arn"),
    pytest.param("lambda", {"function_name": "report:$LATEST"}, None, id="lambda-latest"),
    pytest.param(
        "stepfunctions",
        {"state_machine_arn": MACHINE},
        {"state_machine_arn": MACHINE, "input": {}},
        id="stepfunctions-defaults",
    ),
    pytest.param(
        "stepfunctions",
        {"state_machine_arn": MACHINE + ":prod", "input": "text"},
        None,
        id="stepfunctions-alias-string-input",
    ),
]


@pytest.mark.parametrize(("kind", "config", "expected"), GOOD)
def test_valid_targets_normalise(kind: str, config: dict[str, Any], expected: dict[str, Any] | None) -> None:
    target = validate_target(kind, config)

    assert target.kind == kind
    if expected is not None:
        assert dict(target.config) == expected
    assert validate_target(kind, target.config) == target  # normalising is idempotent


BAD: list[Any] = [
    pytest.param("ftp", {}, "target.kind", "unknown target kind", id="unknown-kind"),
    pytest.param("http", [], "target.config", "object", id="config-not-a-mapping"),
    pytest.param("http", {}, "target.config.url", "required", id="http-url-missing"),
    pytest.param(
        "http", {"url": "https://h/", "timeout": 3}, "target.config.timeout", "unknown key", id="extra-key"
    ),
    pytest.param("http", {"url": "file:///etc/passwd"}, "target.config.url", "http", id="url-file-scheme"),
    pytest.param("http", {"url": "gopher://h/"}, "target.config.url", "http", id="url-gopher"),
    pytest.param("http", {"url": "https:///path"}, "target.config.url", "no host", id="url-no-host"),
    pytest.param("http", {"url": "https://u:p@h/"}, "target.config.url", "credentials", id="url-credentials"),
    pytest.param(
        "http", {"url": "https://h:99999/"}, "target.config.url", "not a valid URL", id="url-bad-port"
    ),
    pytest.param("http", {"url": "https://h/a b"}, "target.config.url", "whitespace", id="url-space"),
    pytest.param("http", {"url": "https://h/\r\nX: y"}, "target.config.url", "control", id="url-crlf"),
    pytest.param("http", {"url": "https://h/a\tb"}, "target.config.url", "control", id="url-tab"),
    pytest.param("http", {"url": "https://h/a\x7fb"}, "target.config.url", "control", id="url-del"),
    pytest.param("http", {"url": "https://h/a\x01b"}, "target.config.url", "control", id="url-control"),
    pytest.param("http", {"url": "https://h/a\u00a0b"}, "target.config.url", "whitespace", id="url-nbsp"),
    pytest.param("http", {"url": "https://h/a\u2028b"}, "target.config.url", "whitespace", id="url-line-sep"),
    pytest.param("http", {"url": 5}, "target.config.url", "string", id="url-not-string"),
    pytest.param(
        "http", {"url": "https://h/", "method": "TRACE"}, "target.config.method", "one of", id="bad-method"
    ),
    pytest.param(
        "http", {"url": "https://h/", "headers": []}, "target.config.headers", "object", id="headers-list"
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"Bad Name": "v"}},
        "target.config.headers.Bad Name",
        "header name",
        id="header-name-space",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"X-A\n": "v"}},
        "target.config.headers.X-A\n",
        "header name",
        id="header-name-final-newline",  # a "$" anchor passes a final newline
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"X-A": "v\r\nInjected: 1"}},
        "target.config.headers.X-A",
        "CR, LF",
        id="header-value-crlf",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"X-A": 1}},
        "target.config.headers.X-A",
        "string",
        id="header-value-not-string",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"Host": "internal"}},
        "target.config.headers.Host",
        "cannot be overridden",
        id="header-host-reserved",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"X-Tickwork-Run-Id": "forged"}},
        "target.config.headers.X-Tickwork-Run-Id",
        "cannot be overridden",
        id="header-tickwork-reserved",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"idempotency-key": "k"}},
        "target.config.headers.idempotency-key",
        "cannot be overridden",
        id="header-idempotency-reserved",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {"X-A": "1", "x-a": "2"}},
        "target.config.headers.x-a",
        "twice",
        id="header-duplicate-case",
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "headers": {f"X-{i}": "v" for i in range(51)}},
        "target.config.headers",
        "at most",
        id="too-many-headers",
    ),
    pytest.param(
        "http", {"url": "https://h/", "body": BIG}, "target.config.body", "64 KiB", id="body-too-large"
    ),
    pytest.param(
        "http", {"url": "https://h/", "body": {"a": 1}}, "target.config.body", "string", id="body-object"
    ),
    pytest.param(
        "http", {"url": "https://h/", "body": "\ud800"}, "target.config.body", "Unicode", id="body-surrogate"
    ),
    pytest.param(
        "http",
        {"url": "https://h/", "method": "GET", "body": "x"},
        "target.config.body",
        "GET",
        id="get-with-body",
    ),
    pytest.param("sqs", {"message": "m"}, "target.config.queue_url", "required", id="sqs-queue-missing"),
    pytest.param(
        "sqs",
        {"queue_url": "arn:aws:sqs:us-east-1:123456789012:q", "message": "m"},
        "target.config.queue_url",
        "queue URL",
        id="sqs-arn-not-url",
    ),
    pytest.param(
        "sqs",
        {"queue_url": "https://sqs.us-east-1.amazonaws.com/12345/q", "message": "m"},
        "target.config.queue_url",
        "queue URL",
        id="sqs-short-account",
    ),
    pytest.param("sqs", {"queue_url": QUEUE}, "target.config.message", "required", id="sqs-message-missing"),
    pytest.param(
        "sqs", {"queue_url": QUEUE, "message": ""}, "target.config.message", "empty", id="sqs-message-empty"
    ),
    pytest.param(
        "sqs",
        {"queue_url": QUEUE, "message": "a\x00b"},
        "target.config.message",
        "control",
        id="sqs-message-nul",
    ),
    pytest.param(
        "sqs", {"queue_url": QUEUE, "message": BIG}, "target.config.message", "64 KiB", id="sqs-too-large"
    ),
    pytest.param(
        "sqs",
        {"queue_url": QUEUE, "message": "m", "message_group_id": "g"},
        "target.config.message_group_id",
        "FIFO",
        id="sqs-group-on-standard-queue",
    ),
    pytest.param(
        "sns",
        {"topic_arn": "arn:aws:sns:us-east-1:123:t", "message": "m"},
        "target.config.topic_arn",
        "topic ARN",
        id="sns-bad-account",
    ),
    pytest.param(
        "sns",
        {"topic_arn": "arn:aws:sqs:us-east-1:123456789012:t", "message": "m"},
        "target.config.topic_arn",
        "topic ARN",
        id="sns-wrong-service",
    ),
    pytest.param(
        "sns",
        {"topic_arn": TOPIC, "message": "m", "subject": "a\nb"},
        "target.config.subject",
        "printable",
        id="sns-subject-newline",
    ),
    pytest.param(
        "eventbridge",
        {"source": "aws.ec2", "detail_type": "x"},
        "target.config.source",
        "reserved",
        id="eb-aws-source",
    ),
    pytest.param(
        "eventbridge", {"detail_type": "x"}, "target.config.source", "required", id="eb-source-missing"
    ),
    pytest.param(
        "eventbridge",
        {"source": "a", "detail_type": ""},
        "target.config.detail_type",
        "1-128",
        id="eb-detail-type-empty",
    ),
    pytest.param(
        "eventbridge",
        {"source": "a", "detail_type": "b", "detail": [1]},
        "target.config.detail",
        "JSON object",
        id="eb-detail-list",
    ),
    pytest.param(
        "eventbridge",
        {"source": "a", "detail_type": "b", "detail": {"tickwork": 1}},
        "target.config.detail.tickwork",
        "reserved",
        id="eb-detail-reserved-key",
    ),
    pytest.param(
        "eventbridge",
        {"source": "a", "detail_type": "b", "detail": {"v": float("nan")}},
        "target.config.detail",
        "plain JSON",
        id="eb-detail-nan",
    ),
    pytest.param(
        "eventbridge",
        {"source": "a", "detail_type": "b", "event_bus_name": "bad bus"},
        "target.config.event_bus_name",
        "bus",
        id="eb-bus-name",
    ),
    pytest.param(
        "lambda",
        {"function_name": "has space"},
        "target.config.function_name",
        "function",
        id="lambda-bad-name",
    ),
    pytest.param(
        "lambda",
        {"function_name": "arn:aws:lambda:us-east-1:123456789012:layer:x"},
        "target.config.function_name",
        "function",
        id="lambda-layer-arn",
    ),
    pytest.param(
        "lambda",
        {"function_name": "f", "invocation_type": "DryRun"},
        "target.config.invocation_type",
        "one of",
        id="lambda-dry-run",
    ),
    pytest.param(
        "lambda",
        {"function_name": "f", "payload": {1, 2}},
        "target.config.payload",
        "plain JSON",
        id="lambda-payload-set",
    ),
    pytest.param(
        "lambda",
        {"function_name": "f", "payload": {"x": BIG}},
        "target.config.payload",
        "64 KiB",
        id="lambda-payload-large",
    ),
    pytest.param(
        "stepfunctions",
        {"state_machine_arn": "arn:aws:states:us-east-1:123456789012:execution:m:e"},
        "target.config.state_machine_arn",
        "state machine ARN",
        id="sfn-execution-arn",
    ),
    pytest.param(
        "stepfunctions",
        {"state_machine_arn": MACHINE, "input": object()},
        "target.config.input",
        "plain JSON",
        id="sfn-input-object",
    ),
]


@pytest.mark.parametrize(("kind", "config", "field", "message"), BAD)
def test_invalid_targets_name_the_field(kind: str, config: Any, field: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate_target(kind, config)

    assert caught.value.field == field
    assert message in caught.value.message


def test_every_kind_has_a_validator() -> None:
    minimal: dict[str, dict[str, Any]] = {
        "http": {"url": "https://h/"},
        "sqs": {"queue_url": QUEUE, "message": "m"},
        "sns": {"topic_arn": TOPIC, "message": "m"},
        "eventbridge": {"source": "a", "detail_type": "b"},
        "lambda": {"function_name": "f"},
        "stepfunctions": {"state_machine_arn": MACHINE},
        "ecs": {"cluster": "c", "task_definition": "t", "container": "main", "subnets": ["subnet-0123abcd"]},
    }
    assert set(minimal) == set(TARGET_KINDS)
    for kind, config in minimal.items():
        assert validate_target(kind, config).kind == kind


def test_json_values_are_copied_not_shared() -> None:
    payload = {"nested": {"n": 1}}
    target = validate_target("lambda", {"function_name": "f", "payload": payload})
    payload["nested"]["n"] = 2

    assert target.config["payload"] == {"nested": {"n": 1}}


@pytest.mark.parametrize("name", ["Transfer-Encoding", "X-Tickwork-Run-Id", "Bad Name"])
def test_a_stored_secret_ref_must_name_a_header_a_job_may_set(name: str) -> None:
    # Tickwork writes the refs from checked names: one that is not was written around the API.
    config = {"url": "https://h/", "secret_refs": {name: "ref-1"}}
    with pytest.raises(ValidationError) as refused:
        validate_target("http", config, stored=True)
    assert refused.value.field == f"target.config.secret_refs.{name}"
