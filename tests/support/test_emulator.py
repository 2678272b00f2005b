"""The embedded MiniStack harness: start/stop, loopback-only binding, atomic transactions, persistence.

These tests need MiniStack (`make install` puts it in .venv-ministack). When it is missing they FAIL, on
purpose: CI installs it, and a silently skipped race test would hide a broken harness.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.local.harness import alive, become_subreaper, wait_until
from tickwork.local.emulator import (
    DEFAULT_REGION,
    Emulator,
    EmulatorConfig,
    EmulatorNotInstalledError,
    client_env,
)

pytestmark = pytest.mark.ministack

_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=16)


def _start(config: EmulatorConfig) -> Emulator:
    emulator = Emulator(config)
    try:
        emulator.start()
    except EmulatorNotInstalledError as exc:
        pytest.fail(f"MiniStack is required for these tests and was not found: {exc}", pytrace=False)
    return emulator


def _client(emulator: Emulator, service: str) -> Any:
    return boto3.session.Session().client(
        service,
        endpoint_url=emulator.endpoint_url,
        region_name=DEFAULT_REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=_CLIENT_CONFIG,
    )


def _create_table(ddb: Any, name: str) -> None:
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    emu = _start(EmulatorConfig())
    try:
        yield emu
    finally:
        emu.stop()


def test_missing_binary_fails_with_install_hint(tmp_path: Path) -> None:
    with pytest.raises(EmulatorNotInstalledError, match="make install"):
        Emulator(EmulatorConfig(executable=tmp_path / "no-such-ministack")).start()


def test_dynamodb_and_sqs_work(emulator: Emulator) -> None:
    assert emulator.endpoint_url == f"http://127.0.0.1:{emulator.port}"
    ddb = _client(emulator, "dynamodb")
    table = f"basic-{uuid.uuid4().hex[:8]}"
    _create_table(ddb, table)
    ddb.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    assert ddb.get_item(TableName=table, Key={"pk": {"S": "a"}})["Item"]["v"] == {"N": "1"}
    assert table in ddb.list_tables()["TableNames"]

    sqs = _client(emulator, "sqs")
    url = sqs.create_queue(QueueName=f"basic-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    messages = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1).get("Messages", [])
    assert [m["Body"] for m in messages] == ["hello"]


def test_client_env_points_default_boto3_clients_at_it(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    for key, value in client_env(emulator.endpoint_url).items():
        monkeypatch.setenv(key, value)
    ddb = boto3.session.Session().client("dynamodb")
    assert ddb.meta.endpoint_url == emulator.endpoint_url
    assert isinstance(ddb.list_tables()["TableNames"], list)


def _listening_sockets(pid: int) -> list[tuple[str, str, int]]:
    """(family, hex local address, port) of the TCP sockets in LISTEN state owned by ``pid``."""
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found: list[tuple[str, str, int]] = []
    for family in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{family}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A = TCP_LISTEN
                address, port = local.split(":")
                found.append((family, address, int(port, 16)))
    return found


def test_binds_loopback_only(emulator: Emulator) -> None:
    assert emulator.pid is not None
    sockets = _listening_sockets(emulator.pid)
    assert sockets, "the emulator has no listening TCP socket"
    assert (("tcp", "0100007F", emulator.port)) in sockets  # 127.0.0.1, little-endian hex
    not_loopback = [
        s for s in sockets if not (s[0] == "tcp" and s[1].endswith("7F")) and s[1] != "0" * 24 + "01000000"
    ]
    assert not not_loopback, f"the emulator listens beyond loopback: {not_loopback}"


def _claim(
    client: Any, barrier: threading.Barrier, jobs: str, locks: str, rnd: int, worker: int
) -> ClientError | None:
    """One contender: lock row put-if-absent + job row PENDING->CLAIMED, in one transaction.

    Returns None when it won, the ClientError when it lost; anything else propagates.
    """
    barrier.wait()
    try:
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": locks,
                        "Item": {"pk": {"S": f"lock#{rnd}"}, "owner": {"N": str(worker)}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Update": {
                        "TableName": jobs,
                        "Key": {"pk": {"S": f"job#{rnd}"}},
                        "UpdateExpression": "SET #s = :claimed, #o = :me",
                        "ConditionExpression": "#s = :pending",
                        "ExpressionAttributeNames": {"#s": "status", "#o": "owner"},
                        "ExpressionAttributeValues": {
                            ":claimed": {"S": "CLAIMED"},
                            ":pending": {"S": "PENDING"},
                            ":me": {"N": str(worker)},
                        },
                    }
                },
            ]
        )
    except ClientError as exc:
        return exc
    return None


def test_conditional_transaction_race_has_exactly_one_winner(emulator: Emulator) -> None:
    contenders, rounds = 8, 20
    ddb = _client(emulator, "dynamodb")
    suffix = uuid.uuid4().hex[:8]
    jobs, locks = f"race-jobs-{suffix}", f"race-locks-{suffix}"
    _create_table(ddb, jobs)
    _create_table(ddb, locks)
    clients = [_client(emulator, "dynamodb") for _ in range(contenders)]

    with ThreadPoolExecutor(max_workers=contenders) as pool:
        for rnd in range(rounds):
            job_key = {"pk": {"S": f"job#{rnd}"}}
            ddb.put_item(TableName=jobs, Item={**job_key, "status": {"S": "PENDING"}})
            barrier = threading.Barrier(contenders)
            futures = [
                pool.submit(_claim, clients[w], barrier, jobs, locks, rnd, w) for w in range(contenders)
            ]
            outcomes = [f.result(timeout=30) for f in futures]

            winners = [w for w, outcome in enumerate(outcomes) if outcome is None]
            losers = [outcome for outcome in outcomes if outcome is not None]
            assert len(winners) == 1, f"round {rnd}: winners {winners}"
            for exc in losers:
                assert exc.response["Error"]["Code"] == "TransactionCanceledException", exc.response
                reasons = exc.response.get("CancellationReasons")
                assert reasons is not None and len(reasons) == 2, exc.response
                codes = {r["Code"] for r in reasons}
                assert "ConditionalCheckFailed" in codes and codes <= {"ConditionalCheckFailed", "None"}
            winner = {"N": str(winners[0])}
            job = ddb.get_item(TableName=jobs, Key=job_key, ConsistentRead=True)["Item"]
            assert job["status"] == {"S": "CLAIMED"} and job["owner"] == winner
            lock_key = {"pk": {"S": f"lock#{rnd}"}}
            assert ddb.get_item(TableName=locks, Key=lock_key, ConsistentRead=True)["Item"]["owner"] == winner


def test_state_survives_graceful_restart(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    first = _start(EmulatorConfig(state_dir=state_dir))
    try:
        ddb = _client(first, "dynamodb")
        _create_table(ddb, "persisted")
        ddb.put_item(TableName="persisted", Item={"pk": {"S": "kept"}, "v": {"S": "yes"}})
    finally:
        first.stop()
    assert first.pid is None
    assert any(state_dir.iterdir()), "stop() wrote no state"

    second = _start(EmulatorConfig(state_dir=state_dir))
    try:
        item = _client(second, "dynamodb").get_item(TableName="persisted", Key={"pk": {"S": "kept"}})
        assert item.get("Item", {}).get("v") == {"S": "yes"}
    finally:
        second.stop()


def test_kill_is_immediate_and_loses_unsaved_state(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    emu = _start(EmulatorConfig(state_dir=state_dir, log_file=tmp_path / "ministack.log"))
    pid = emu.pid
    assert pid is not None
    _create_table(_client(emu, "dynamodb"), "lost")
    started = time.monotonic()
    emu.kill()
    assert time.monotonic() - started < 5
    assert emu.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert (tmp_path / "ministack.log").exists()

    again = _start(EmulatorConfig(state_dir=state_dir))
    try:
        assert "lost" not in _client(again, "dynamodb").list_tables()["TableNames"]
    finally:
        again.stop()


OWNER = """
import sys, time
from pathlib import Path
from tickwork.local.emulator import Emulator, EmulatorConfig
emulator = Emulator(EmulatorConfig(state_dir=Path(sys.argv[1])))
emulator.start()
print(emulator.pid, emulator.endpoint_url, flush=True)
time.sleep(120)
"""


def test_the_emulator_stops_and_saves_its_state_when_its_owner_is_sigkilled(tmp_path: Path) -> None:
    become_subreaper()  # the orphaned emulator is re-parented to this process, which reaps it
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "state")], stdout=subprocess.PIPE, start_new_session=True
    )
    emulator_pid = 0
    try:
        assert owner.stdout is not None
        pid_text, endpoint = owner.stdout.readline().decode().split()
        emulator_pid = int(pid_text)
        sqs = boto3.session.Session().client(
            "sqs",
            endpoint_url=endpoint,
            region_name=DEFAULT_REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        sqs.create_queue(QueueName="kept")
        owner.kill()
        owner.wait()

        took = wait_until("the emulator to exit", lambda: not alive(emulator_pid), timeout=15)
        assert took < 10, took
        assert any(p.is_file() for p in (tmp_path / "state").rglob("*")), "no state written"
    finally:
        owner.kill()
        owner.wait()
        if emulator_pid and alive(emulator_pid):
            os.killpg(emulator_pid, signal.SIGKILL)
            wait_until("the emulator to be reaped", lambda: not alive(emulator_pid), timeout=5)
