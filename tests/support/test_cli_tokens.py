"""`tickwork local --token`: naming tokens replaces the default one (issue 12)."""

from __future__ import annotations

import pytest

from tickwork.cli import _tokens


def test_without_tokens_the_development_token_works() -> None:
    assert _tokens([]) == {"local-dev-token": "local-user"}


def test_named_tokens_are_the_only_tokens() -> None:
    assert _tokens(["s3cret=alice", "other=bob"]) == {"s3cret": "alice", "other": "bob"}


@pytest.mark.parametrize("bad", ["no-owner", "=alice", "token="])
def test_a_malformed_token_is_a_cli_error(bad: str) -> None:
    with pytest.raises(SystemExit, match="expects TOKEN=OWNER"):
        _tokens([bad])
