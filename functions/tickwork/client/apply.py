"""`tickwork jobs apply -f jobs.yaml`: make the caller's jobs what a file says, keyed by name.

A file is a list of jobs (or `{jobs: [...]}`), each in the shape `POST /jobs` takes. The plan compares each
with the job of the same name: new names are created, changed ones updated (PATCH with If-Match, so a job
someone else changed meanwhile is reported, not overwritten), equal ones left alone, and with `prune` the
caller's jobs whose names the file does not list are deleted. Applying the same file twice changes nothing
the second time."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError as PydanticValidationError

from tickwork.api.models import JobCreate, ScheduleIn
from tickwork.client.connection import ApiClient, ApiError
from tickwork.domain.alert_rules import NO_ALERTS, alerts_to_mapping
from tickwork.domain.errors import ValidationError
from tickwork.domain.secrets import REDACTED, is_credential_header

DEFAULT_CONCURRENCY = 8


class ApplyFileError(Exception):
    """The file cannot be applied as it is (not YAML, not jobs, a job the API would refuse, a name twice)."""


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class Change:
    action: Action
    name: str
    job_id: str | None = None
    version: int | None = None  # If-Match for an update or a delete
    body: Mapping[str, Any] | None = None  # the job as the file has it (create, update)
    diff: tuple[tuple[str, Any, Any], ...] = ()  # (field, current, desired) for an update


@dataclass
class Outcome:
    done: dict[Action, int] = field(default_factory=lambda: dict.fromkeys(Action, 0))
    failed: list[tuple[Change, str]] = field(default_factory=list)


def load_file(path: Path) -> list[dict[str, Any]]:
    """The jobs a file describes, each checked as `POST /jobs` would check it (ApplyFileError names the
    job and the field otherwise)."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise ApplyFileError(f"cannot read {path}: {error}") from None
    except yaml.YAMLError as error:
        raise ApplyFileError(f"{path} is not valid YAML: {error}") from None
    if isinstance(document, dict) and set(document) == {"jobs"}:
        document = document["jobs"]
    if document is None:
        document = []
    if not isinstance(document, list):
        raise ApplyFileError(f"{path}: expected a list of jobs (or a mapping with one key, jobs)")
    jobs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, raw in enumerate(document):
        label = f"jobs[{index}]" + (f" ({raw.get('name')!r})" if isinstance(raw, dict) else "")
        try:
            job = JobCreate.model_validate(raw)
            # The rules JSON Schema cannot state (time zone, expression, retry bounds), and the job as the
            # API stores it (a target's defaults filled in), so an unchanged job compares equal.
            spec = job.to_spec()
        except PydanticValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ApplyFileError(f"{label}: {where}: {first['msg']}") from None
        except ValidationError as error:
            raise ApplyFileError(f"{label}: {error}") from None
        if job.name in seen:
            raise ApplyFileError(f"{label}: the name {job.name!r} is listed twice; apply keys jobs by name")
        seen.add(job.name)
        body = job.model_dump(mode="json")
        body["target"]["config"] = json.loads(json.dumps(dict(spec.target.config), default=str))
        body["schedule"].update(expression=spec.schedule.expression, timezone=spec.schedule.timezone)
        # A job that does not name its completion has its target's (as the API stores it), and no heartbeat.
        body["completion"] = str(spec.resolved_completion)
        body["heartbeat_seconds"] = spec.heartbeat_seconds
        # Its alert rules as the API answers them (every field). A job that names none leaves them alone:
        # created, it gets its owner's defaults; applied again, its rules are not compared.
        if spec.alerts is None:
            del body["alerts"]
        else:
            body["alerts"] = alerts_to_mapping(spec.alerts)
        jobs.append(body)
    return jobs


def comparable(job: Mapping[str, Any]) -> dict[str, Any]:
    """A job as the API answers it, in the shape of a create request (what a file holds)."""
    schedule = job["schedule"]
    return {
        "name": job["name"],
        "description": job["description"],
        "tags": dict(job["tags"]),
        "schedule": {k: schedule[k] for k in ScheduleIn.model_fields},
        "target": {"kind": job["target"]["kind"], "config": dict(job["target"]["config"])},
        "policies": job["policies"],
        "timeout_seconds": job["timeout_seconds"],
        "retention_days": job["retention_days"],
        "completion": job.get("completion"),
        "heartbeat_seconds": job.get("heartbeat_seconds"),
        "alerts": dict(job.get("alerts") or alerts_to_mapping(NO_ALERTS)),
        "calendars": list(job.get("calendars") or []),
        "group": job.get("group", "default"),
    }


def _unredacted(current: dict[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """Secret header values are never answered (they read "<redacted>"): take the file's value for them, so
    they do not look changed. A change of such a value alone is therefore not seen: rotate a secret with
    `tickwork jobs update` (docs/targets.md, "Secret headers")."""
    headers = current["target"]["config"].get("headers")
    wanted = desired["target"]["config"].get("headers")
    if isinstance(headers, dict) and isinstance(wanted, dict):
        current["target"]["config"]["headers"] = {
            k: wanted.get(k, v) if v == REDACTED else v for k, v in headers.items()
        }
    return current


def _as_answered(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """A file's job as the API would answer it: `secret_headers` are answered among the headers."""
    config = body.get("target", {}).get("config", {})
    if not isinstance(config, Mapping) or not config.get("secret_headers"):
        return body
    merged = {k: v for k, v in config.items() if k != "secret_headers"}
    merged["headers"] = {**(config.get("headers") or {}), **config["secret_headers"]}
    return {**body, "target": {**body["target"], "config": merged}}


def _without_secrets(change: tuple[str, Any, Any], secret: set[str]) -> tuple[str, Any, Any]:
    """A secret header's change as it may be printed (CI logs keep what apply prints): values hidden."""
    path, before, after = change
    name = path.removeprefix("target.config.headers.")
    if name == path or not (name in secret or is_credential_header(name)):
        return change
    return path, None if before is None else REDACTED, None if after is None else REDACTED


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def differences(current: Mapping[str, Any], desired: Mapping[str, Any]) -> tuple[tuple[str, Any, Any], ...]:
    before, after = _flatten(current), _flatten(desired)
    return tuple(
        (path, before.get(path), after.get(path))
        for path in sorted(set(before) | set(after))
        if before.get(path) != after.get(path)
    )


def plan(
    desired: Sequence[Mapping[str, Any]], current: Iterable[Mapping[str, Any]], *, prune: bool
) -> list[Change]:
    """What applying `desired` to the caller's `current` jobs does, name by name."""
    by_name: dict[str, Mapping[str, Any]] = {}
    for job in current:
        if job["name"] in by_name:
            raise ApplyFileError(
                f"two of your jobs are named {job['name']!r} ({by_name[job['name']]['id']}, {job['id']}): "
                "apply keys jobs by name; rename or delete one first"
            )
        by_name[job["name"]] = job
    changes: list[Change] = []
    for body in desired:
        existing = by_name.pop(str(body["name"]), None)
        if existing is None:
            config = body.get("target", {}).get("config", {})
            headers = {**(config.get("headers") or {}), **(config.get("secret_headers") or {})}
            if REDACTED in headers.values():
                raise ApplyFileError(
                    f"{body['name']!r} is new here and its target holds {REDACTED!r}, which keeps a stored "
                    "secret value: give the value itself"
                )
            changes.append(Change(Action.CREATE, str(body["name"]), body=body))
            continue
        answered = _as_answered(body)
        secret = set(body.get("target", {}).get("config", {}).get("secret_headers") or {})
        stored = comparable(existing)
        if "alerts" not in answered:
            del stored["alerts"]  # the file does not manage them (see load_file)
        diff = tuple(
            _without_secrets(change, secret)
            for change in differences(_unredacted(stored, answered), answered)
        )
        action = Action.UPDATE if diff else Action.UNCHANGED
        changes.append(
            Change(action, str(body["name"]), existing["id"], int(existing["version"]), body, diff)
        )
    if prune:
        changes.extend(
            Change(Action.DELETE, name, job["id"], int(job["version"]))
            for name, job in sorted(by_name.items())
        )
    return changes


def execute(
    client: ApiClient,
    changes: Sequence[Change],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Callable[[Change], None] = lambda _: None,
) -> Outcome:
    """Carry out the changes, `concurrency` at a time; a change the API refuses is reported with the
    problem's detail and the others go on."""
    outcome = Outcome()
    # Creates carry an Idempotency-Key per apply and job: a create retried after a lost answer does not
    # make a second job.
    apply_id = uuid.uuid4().hex
    work = [c for c in changes if c.action is not Action.UNCHANGED]
    outcome.done[Action.UNCHANGED] = len(changes) - len(work)
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="apply") as pool:
        futures = {pool.submit(_carry_out, client, change, apply_id): change for change in work}
        for future in as_completed(futures):
            change = futures[future]
            try:
                future.result()
                outcome.done[change.action] += 1
            except ApiError as error:
                outcome.failed.append((change, str(error)))
            progress(change)
    return outcome


def _carry_out(client: ApiClient, change: Change, apply_id: str) -> None:
    if change.action is Action.CREATE:
        key = hashlib.sha256(f"{apply_id}\0{change.name}".encode()).hexdigest()
        client.request(
            "POST", "/jobs", body=dict(change.body or {}), headers={"Idempotency-Key": f"apply-{key}"}
        )
    elif change.action is Action.UPDATE:
        client.request(
            "PATCH",
            f"/jobs/{change.job_id}",
            body=dict(change.body or {}),
            headers={"If-Match": f'"{change.version}"'},
        )
    elif change.action is Action.DELETE:
        client.request(
            "DELETE",
            f"/jobs/{change.job_id}",
            headers={"If-Match": f'"{change.version}"'},
            query={"note": "tickwork apply --prune: not in the applied file"},
        )


def summary(changes: Sequence[Change]) -> dict[str, int]:
    counts = dict.fromkeys((a.value for a in Action), 0)
    for change in changes:
        counts[change.action.value] += 1
    return counts


def as_json(changes: Sequence[Change]) -> Iterator[dict[str, Any]]:
    for change in changes:
        yield {
            "action": change.action.value,
            "name": change.name,
            "id": change.job_id,
            "changes": [{"field": f, "from": a, "to": b} for f, a, b in change.diff],
        }


def render_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
