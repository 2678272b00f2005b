"""The web console's files, served by the API handler at /ui without credentials (they carry no data)."""

from __future__ import annotations

import json
from dataclasses import replace

from tests.api.conftest import Api
from tickwork import ui


def test_the_console_page_script_and_style_are_served_with_a_strict_policy(call: Api) -> None:
    page = call("GET", "/ui", owner=None)
    assert page.status == 200 and page.content_type.startswith("text/html")
    assert '<script src="/ui/app.js" defer></script>' in page.body
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
    script = call("GET", "/ui/app.js", owner=None)
    assert script.status == 200 and script.content_type.startswith("text/javascript")
    assert "function render" in script.body
    style = call("GET", "/ui/app.css", owner=None)
    assert style.status == 200 and style.content_type.startswith("text/css")


def test_the_console_config_says_how_callers_sign_in(call: Api) -> None:
    config = call("GET", "/ui/config.json", owner=None)
    assert config.status == 200
    body = config.body if isinstance(config.body, dict) else json.loads(config.body)
    # The test components run in local mode: bearer tokens, and no dashboard.
    assert body == {"auth": "bearer", "local": True, "dashboard_url": None}


def test_nothing_else_in_the_package_is_reachable_under_ui(call: Api) -> None:
    for name in ("__init__.py", "..%2F__init__.py", "static", "nope.js"):
        answer = call("GET", f"/ui/{name}", owner=None)
        assert answer.status == 404, (name, answer.status)
        assert answer.content_type.startswith("application/problem+json")


def test_in_aws_with_iam_the_config_says_iam_and_links_the_dashboard(call: Api) -> None:
    # As the stack configures the API function (infra/stack.py): IAM unless a JWT issuer is set.
    aws = {"mode": "aws", "api_auth": "iam", "dashboard_name": "tickwork-scheduler", "region": "eu-west-1"}
    call.parts.settings = replace(call.parts.settings, **aws)
    config = call("GET", "/ui/config.json", owner=None)
    body = config.body if isinstance(config.body, dict) else json.loads(config.body)
    assert body == {
        "auth": "iam",
        "local": False,
        "dashboard_url": "https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1"
        "#dashboards:name=tickwork-scheduler",
    }
    # The page that reads it tells an IAM deployment's visitor how to enable the JWT authorizer.
    script = call("GET", "/ui/app.js", owner=None).body
    assert "deploy the stack with a JWT authorizer" in script


def test_names_outside_the_console_are_not_remembered() -> None:
    # /ui/<name> is open to anyone: a cache of every name asked for would grow without bound.
    for i in range(1000):
        assert ui.asset(f"nope-{i}.js") is None
    assert ui.asset("app.js") is not None
    assert ui._read.cache_info().currsize <= len(ui.ASSETS)
