"""Secret header values (domain/secrets.py): which headers are secret, how a request names them, and the
target as it is stored (references only)."""

from __future__ import annotations

import pytest

from tickwork.domain.errors import ValidationError
from tickwork.domain.models import Target
from tickwork.domain.secrets import is_credential_header, kept_reference, sealed, with_plain_values
from tickwork.domain.targets import validate_target

URL = "https://hooks.example.com/x"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("Authorization", True),
        ("Proxy-Authorization", True),
        ("Cookie", True),
        ("X-Api-Key", True),
        ("X-Auth-Token", True),
        ("X-Client-Secret", True),
        ("X-Auth-Key", True),
        ("X-Auth-Token", True),
        ("Ocp-Apim-Subscription-Key", True),
        ("X-Functions-Key", True),
        ("x_api_key", True),
        ("X-Amz-Security-Token", True),
        # whole parts only: ordinary headers that merely contain a word stay plain (and visible)
        ("X-Routing-Key", False),
        ("X-Session-Id", False),
        ("X-Author", False),
        ("X-Keyword", False),
        ("X-Hub-Signature", False),
        ("Content-Type", False),
        ("X-Team", False),
    ],
)
def test_a_credential_like_name_makes_a_header_secret(name: str, secret: bool) -> None:
    assert is_credential_header(name) is secret
    target = validate_target("http", {"url": URL, "headers": {name: "v"}})
    assert (name in target.config.get("secret_headers", {})) is secret
    assert (name in target.config["headers"]) is not secret


def test_marked_and_credential_like_headers_are_kept_apart_from_the_plain_ones() -> None:
    target = validate_target(
        "http",
        {
            "url": URL,
            "headers": {"Authorization": "Bearer a", "X-Team": "p"},
            "secret_headers": {"X-Signature-Seed": "s"},
        },
    )
    assert target.config["headers"] == {"X-Team": "p"}
    assert target.config["secret_headers"] == {"Authorization": "Bearer a", "X-Signature-Seed": "s"}


@pytest.mark.parametrize(
    ("config", "field", "message"),
    [
        (
            {"headers": {"X-Key": "a"}, "secret_headers": {"x-key": "b"}},
            "target.config.headers.x-key",
            "appears twice",
        ),
        (
            {"secret_headers": {"X-Tickwork-Run": "a"}},
            "target.config.secret_headers.X-Tickwork-Run",
            "set by",
        ),
        ({"secret_headers": {"X-A": "a\r\nX-B: b"}}, "target.config.secret_headers.X-A", "CR, LF"),
        ({"secret_headers": ["X-A"]}, "target.config.secret_headers", "must be an object"),
        (
            {"secret_refs": {"Authorization": "tickwork/headers/abc"}},
            "target.config.secret_refs",
            "written by",
        ),
        (
            {
                "headers": {f"X-{i}": "v" for i in range(30)},
                "secret_headers": {f"X-S{i}": "v" for i in range(21)},
            },
            "target.config.headers",
            "secret ones included",
        ),
    ],
)
def test_a_bad_secret_header_is_refused_naming_its_field(config: dict, field: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as refused:
        validate_target("http", {"url": URL, **config})
    assert refused.value.field == field


def test_a_stored_target_holds_references_and_validates_as_stored() -> None:
    given = validate_target("http", {"url": URL, "headers": {"Authorization": "Bearer a", "X-Team": "p"}})
    stored: dict[str, str] = {}

    def put(name: str, value: str) -> str:
        stored[f"ref-{len(stored)}"] = value
        return f"ref-{len(stored) - 1}"

    kept = sealed(given, put)
    assert kept.config["secret_refs"] == {"Authorization": "ref-0"} and stored == {"ref-0": "Bearer a"}
    assert "secret_headers" not in kept.config and "Bearer a" not in repr(kept)
    assert validate_target("http", kept.config, stored=True) == kept  # the executor's check at call time
    assert sealed(kept, put) == kept and len(stored) == 1  # nothing left to seal
    plain = Target("http", {"url": URL, "headers": {}})
    assert sealed(plain, put) is plain


def test_an_answers_placeholder_sent_back_keeps_the_stored_reference() -> None:
    """'<redacted>' (how answers show a secret) in an edit means "keep it": it becomes a secret header, and
    sealing takes the reference the job keeps for that name, in any case; with none to keep it is refused."""
    current = Target("http", {"url": URL, "headers": {}, "secret_refs": {"authorization": "ref-a"}})
    given = validate_target(
        "http", {"url": URL, "headers": {"Authorization": "<redacted>", "X-Sig": "<redacted>"}}
    )
    assert given.config["secret_headers"] == {"Authorization": "<redacted>", "X-Sig": "<redacted>"}
    with pytest.raises(ValidationError, match="keeps none") as refused:
        sealed(given, lambda name, value: kept_reference(current, name))
    assert refused.value.field == "target.config.headers.X-Sig"
    one = validate_target("http", {"url": URL, "headers": {"Authorization": "<redacted>"}})
    assert sealed(one, lambda name, value: kept_reference(current, name)).config["secret_refs"] == {
        "Authorization": "ref-a"
    }
    with pytest.raises(ValidationError, match="as a stored value"):
        validate_target("http", {"url": URL, "headers": {"X": "<redacted>"}}, stored=True)


def test_a_plain_credential_from_before_is_what_a_kept_value_means() -> None:
    legacy = Target("http", {"url": URL, "headers": {"Authorization": "Bearer old"}})
    given = validate_target("http", {"url": URL, "headers": {"authorization": "<redacted>"}})
    assert with_plain_values(given, legacy).config["secret_headers"] == {"authorization": "Bearer old"}
    assert with_plain_values(given, None) == given
