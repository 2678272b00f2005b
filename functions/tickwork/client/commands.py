"""The `tickwork` commands that drive the API: jobs, runs, apply, preview (click for the commands, rich for
tables and progress). Exit codes: 0 done, 1 the API refused (its problem's detail is printed), 2 a usage
error (bad flags, an unreadable file, nothing to connect to)."""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tickwork.client import apply as applying
from tickwork.client.connection import ApiClient, ApiError, ConnectionSetupError, resolve_endpoint

F = TypeVar("F", bound=Callable[..., Any])
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class Context:
    """What every command shares: how to reach the API and how to print."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options
        self.output: str = options["output"]
        self._client: ApiClient | None = None

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            endpoint = resolve_endpoint(
                url=self.options["url"],
                token=self.options["token"],
                state_dir=self.options["state_dir"],
                stack=self.options["stack"],
                region=self.options["region"],
                sigv4=self.options["sigv4"],
            )
            self._client = ApiClient(endpoint)
        return self._client

    def emit(self, data: Any, table: Callable[[], RenderableType]) -> None:
        if self.output == "json":
            click.echo(json.dumps(data, indent=2, default=str))
        else:
            out.print(table())


def api_call(command: F) -> F:
    """API errors are exit 1 with the problem's detail (and each field error); setup errors exit 2."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ConnectionSetupError as error:
            raise click.UsageError(str(error)) from None
        except ApiError as error:
            err.print(f"[red]error[/red]: {error}", highlight=False)
            for item in error.field_errors:
                err.print(f"  {item.get('field')}: {item.get('message')}", highlight=False)
            sys.exit(1)
        except applying.ApplyFileError as error:
            raise click.UsageError(str(error)) from None

    return run  # type: ignore[return-value]


def _since(text: str) -> datetime:
    """`1h`, `30m`, `2d`, `90s` ago, or an RFC 3339 instant."""
    match = _DURATION.match(text.strip())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        return datetime.now(UTC) - timedelta(**{_UNITS[unit]: amount})
    try:
        instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r}: give a duration (30m, 1h, 2d) or an RFC 3339 instant") from None
    if instant.tzinfo is None:
        raise click.BadParameter(f"{text!r} needs a time zone offset (e.g. Z)")
    return instant


def _instant(text: str) -> str:
    return _since(text).astimezone(UTC).isoformat().replace("+00:00", "Z")


def _read_body(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise click.UsageError(f"cannot read {path}: {error}") from None


def _short(value: Any, width: int = 40) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _jobs_table(jobs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(show_lines=False)
    for column in ("ID", "NAME", "STATE", "SCHEDULE", "ZONE", "NEXT FIRE (UTC)", "VERSION"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        table.add_row(
            job["id"],
            _short(job["name"]),
            job["state"],
            job["schedule"]["expression"],
            job["schedule"]["timezone"],
            str(job.get("next_fire_at") or "-"),
            str(job["version"]),
        )
    return table


def _job_detail(job: Mapping[str, Any]) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    schedule = job["schedule"]
    rows = [
        ("id", job["id"]),
        ("name", job["name"]),
        ("state", job["state"] + (f" ({job['paused_reason']})" if job.get("paused_reason") else "")),
        ("version", str(job["version"])),
        ("schedule", f"{schedule['expression']} ({schedule['timezone']}): {schedule['description']}"),
        ("next fire", str(job.get("next_fire_at") or "-")),
        ("target", f"{job['target']['kind']} {json.dumps(job['target']['config'])}"),
        ("policies", json.dumps(job["policies"])),
        ("timeout", f"{job['timeout_seconds']} s"),
        ("completion", completion_text(job)),
        ("concurrency", concurrency_text(job)),
        ("alerts", json.dumps(job.get("alerts") or {})),
        ("tags", json.dumps(job["tags"])),
        ("calendars", ", ".join(job.get("calendars") or []) or "-"),
        ("group", job.get("group") or "default"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def concurrency_text(job: Mapping[str, Any]) -> str:
    """A job's own bound, in words: `at most 2 at once of key api.example.com` (`-`: none)."""
    concurrency = (job.get("policies") or {}).get("concurrency")
    if not concurrency:
        return "-"
    return f"at most {concurrency['limit']} at once of key {concurrency['key']}"


def completion_text(job: Mapping[str, Any]) -> str:
    """How a job's runs end, in words: `callback, heartbeat every 60 s`."""
    completion = str(job.get("completion") or "response")
    heartbeat = job.get("heartbeat_seconds")
    if completion == "callback":
        return f"callback, heartbeat every {heartbeat} s" if heartbeat else "callback, no heartbeat"
    return completion


def run_state_text(run: Mapping[str, Any]) -> str:
    """A run's state as people read it: a delivery run that succeeded was `delivered` (the message was
    accepted), which says nothing of whether the work then succeeded."""
    return "delivered" if run.get("result") == "delivered" else str(run["state"])


_RUN_COLUMNS = (
    "RUN ID",
    "STATE",
    "ENDS BY",
    "TRIGGER",
    "ATTEMPT",
    "SCHEDULED FOR",
    "STARTED",
    "DELAY",
    "LEASE UNTIL",
    "LAST HEARTBEAT",
    "OUTCOME",
)


def _runs_table(runs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table()
    for column in _RUN_COLUMNS:
        table.add_column(column, overflow="fold")
    for run in runs:
        timings = run["timings"]
        delay = timings.get("start_delay_ms")
        lease = run.get("lease")
        table.add_row(
            run["id"],
            run_state_text(run),
            str(run.get("completion") or "response"),
            run["trigger"],
            str(run["attempt"]),
            str(timings["scheduled_for"]),
            str(timings.get("started_at") or "-"),
            "-" if delay is None else f"{delay} ms",
            str(lease["expires_at"]) if lease else "-",
            str(run.get("heartbeat_at") or "-"),
            _short(run.get("outcome") or run.get("reason") or ""),
        )
    return table


def _run_detail(run: Mapping[str, Any]) -> RenderableType:
    table = _runs_table([run])
    for attempt in run.get("attempts") or []:
        cells = {
            "RUN ID": f"  attempt {attempt.get('attempt')}",
            "STATE": "ok" if attempt.get("ok") else "failed",
            "TRIGGER": str(attempt.get("worker") or ""),
            "STARTED": str(attempt.get("finished_at") or ""),
            "DELAY": f"{attempt.get('latency_ms')} ms",
            "OUTCOME": _short(f"{attempt.get('status')}: {attempt.get('detail') or ''}"),
        }
        table.add_row(*(cells.get(column, "") for column in _RUN_COLUMNS))
    lease = run.get("lease")
    facts = [
        ("completion", _completion_fact(run)),
        ("lease", f"held by {lease['owner']} until {lease['expires_at']}" if lease else "-"),
        ("last heartbeat", str(run.get("heartbeat_at") or "-")),
    ]
    details = Table(show_header=False, box=None)
    details.add_column(style="bold")
    details.add_column(overflow="fold")
    for name, value in facts:
        details.add_row(name, value)
    return Group(table, details)


def _completion_fact(run: Mapping[str, Any]) -> str:
    completion = str(run.get("completion") or "response")
    if run.get("result") == "delivered":
        return f"{completion}: delivered (the message was accepted; the work itself is not followed)"
    if run.get("result") == "completed":
        return f"{completion}: completed"
    return completion


def _split_run_id(run_id: str) -> str:
    job_id, sep, stamp = run_id.rpartition(":")
    if not sep or not job_id or not stamp:
        raise click.BadParameter(f"{run_id!r} is not a run id (<job_id>:<time>)")
    return job_id


# --- the group -------------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--url", envvar="TICKWORK_URL", help="The API's base URL (default: the local instance).")
@click.option("--token", envvar="TICKWORK_TOKEN", help="Bearer token: a local token or a JWT.")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Find the running `tickwork local` here (default .tickwork).",
)
@click.option("--stack", help="A deployed stack's name: its ApiUrl output, signed with SigV4 unless --token.")
@click.option("--region", help="AWS region for --stack and SigV4.")
@click.option("--sigv4", is_flag=True, help="Sign requests with SigV4 (IAM auth) from the credential chain.")
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", help="Human tables or JSON."
)
@click.pass_context
def tickwork(ctx: click.Context, /, **options: Any) -> None:
    """Tickwork: a cron scheduler. `tickwork local` runs one on this machine; the other commands drive the
    API of a local instance or a deployed stack."""
    ctx.obj = Context(options)


@tickwork.command(
    "local",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def local(args: tuple[str, ...]) -> None:
    """Run the whole scheduler on this machine (`tickwork local --help` for its options)."""
    from tickwork.cli import run_local_command

    sys.exit(run_local_command(list(args)))


# --- jobs ------------------------------------------------------------------------------------------------


@tickwork.group()
def jobs() -> None:
    """Create, read, change and run jobs."""


@jobs.command("list")
@click.option("--state", type=click.Choice(["active", "paused"]))
@click.option("--tag", help="key=value")
@click.option("--group", help="Only this group's jobs.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--all", "every", is_flag=True, help="Every page, not only the first.")
@click.pass_obj
@api_call
def jobs_list(
    ctx: Context, state: str | None, tag: str | None, group: str | None, limit: int, every: bool
) -> None:
    """The caller's jobs in id order."""
    query = {"state": state, "tag": tag, "group": group}
    if every:
        items = list(ctx.client.pages("/jobs", query))
        ctx.emit({"items": items}, lambda: _jobs_table(items))
        return
    page = ctx.client.request("GET", "/jobs", query={**query, "limit": limit}).body
    ctx.emit(page, lambda: _jobs_table(page["items"]))
    if page.get("next_cursor") and ctx.output == "table":
        err.print("more: --all lists every page", highlight=False)


@jobs.command("get")
@click.argument("job_id")
@click.pass_obj
@api_call
def jobs_get(ctx: Context, job_id: str) -> None:
    """One job."""
    job = ctx.client.request("GET", f"/jobs/{job_id}").body
    ctx.emit(job, lambda: _job_detail(job))


_QUICK = [
    click.option("--name"),
    click.option("--schedule", "expression", help="Cron expression, e.g. '30 2 * * *'."),
    click.option("--tz", "timezone", help="IANA time zone (default UTC)."),
    click.option(
        "--http",
        "http_url",
        help="Target: call this URL (create: POST; update: moves the URL, keeps method, body and headers).",
    ),
    click.option(
        "--completion",
        type=click.Choice(["response", "callback", "delivery", "tracked"]),
        help="How a run ends (default: the target's own; callback: http; tracked: stepfunctions, ecs).",
    ),
    click.option(
        "--heartbeat",
        "heartbeat",
        type=click.IntRange(10, 86_400),
        help="Callback only: seconds of silence before an accepted attempt counts as dead.",
    ),
    click.option(
        "--timeout", "timeout", type=click.IntRange(1, 86_400), help="Seconds (840 at most unless callback)."
    ),
    click.option(
        "--concurrency-key",
        "concurrency_key",
        help="With --concurrency-limit: at most that many runs at once of your jobs naming this key "
        "(e.g. a host).",
    ),
    click.option(
        "--concurrency-limit",
        "concurrency_limit",
        type=click.IntRange(1, 10_000),
        help="Runs of the --concurrency-key at once.",
    ),
]


def _with_concurrency(body: dict[str, Any], key: str | None, limit: int | None) -> dict[str, Any]:
    """`body` with policies.concurrency set from --concurrency-key and --concurrency-limit (both or
    neither), the rest of its policies kept."""
    if key is None and limit is None:
        return body
    if key is None or limit is None:
        raise click.UsageError("give --concurrency-key and --concurrency-limit together")
    policies = body.get("policies")
    return {
        **body,
        "policies": {
            **(policies if isinstance(policies, dict) else {}),
            "concurrency": {"key": key, "limit": limit},
        },
    }


def _quick_options(command: F) -> F:
    for option in reversed(_QUICK):
        command = option(command)
    return command


def _quick_body(
    name: str | None,
    expression: str | None,
    timezone: str | None,
    http_url: str | None,
    completion: str | None = None,
    heartbeat: int | None = None,
    timeout: int | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if name:
        body["name"] = name
    if expression or timezone:
        body["schedule"] = {k: v for k, v in (("expression", expression), ("timezone", timezone)) if v}
    if http_url:
        body["target"] = {"kind": "http", "config": {"url": http_url, "method": "POST"}}
    if completion:
        body["completion"] = completion
    if heartbeat is not None:
        body["heartbeat_seconds"] = heartbeat
    if timeout is not None:
        body["timeout_seconds"] = timeout
    return body


@jobs.command("create")
@click.option(
    "-f", "--file", "file", type=click.Path(path_type=Path, dir_okay=False), help="A job as YAML/JSON."
)
@_quick_options
@click.option(
    "--calendar", "calendars", multiple=True, help="An exclusion calendar of yours (repeat for more)."
)
@click.option("--group", help="The group it belongs to (default: default).")
@click.option("--idempotency-key", help="The same key always names the same job (default: a new one).")
@click.pass_obj
@api_call
def jobs_create(
    ctx: Context,
    file: Path | None,
    name: str | None,
    expression: str | None,
    timezone: str | None,
    http_url: str | None,
    completion: str | None,
    heartbeat: int | None,
    timeout: int | None,
    concurrency_key: str | None,
    concurrency_limit: int | None,
    calendars: tuple[str, ...],
    group: str | None,
    idempotency_key: str | None,
) -> None:
    """Create a job from a file, or from --name, --schedule, --tz and --http (and --completion, --heartbeat,
    --timeout, --concurrency-key with --concurrency-limit, --calendar)."""
    body = _read_body(file) if file else {}
    if not isinstance(body, dict):
        raise click.UsageError(f"{file}: expected one job (a mapping)")
    body = {**body, **_quick_body(name, expression, timezone, http_url, completion, heartbeat, timeout)}
    body = _with_concurrency(body, concurrency_key, concurrency_limit)
    if calendars:
        body["calendars"] = list(calendars)
    if group:
        body["group"] = group
    missing = [k for k in ("name", "schedule", "target") if k not in body]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)}: give -f FILE or --name, --schedule and --http")
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    job = ctx.client.request("POST", "/jobs", body=body, headers={"Idempotency-Key": key}).body
    ctx.emit(job, lambda: _job_detail(job))


@jobs.command("update")
@click.argument("job_id")
@click.option(
    "-f", "--file", "file", type=click.Path(path_type=Path, dir_okay=False), help="Fields to change."
)
@_quick_options
@click.option("--no-heartbeat", is_flag=True, help="Remove the heartbeat of a callback job.")
@click.option("--no-concurrency-key", is_flag=True, help="Remove the job's concurrency key and limit.")
@click.option("--calendar", "calendars", multiple=True, help="Its exclusion calendars, replacing the list.")
@click.option("--no-calendars", is_flag=True, help="Name no exclusion calendar any more.")
@click.option("--group", help="Move it to this group.")
@click.option("--if-match", "if_match", type=int, help="Only if the job is still at this version.")
@click.option("--note", help="Why: recorded with the revision (tickwork jobs revisions, tickwork audit).")
@click.pass_obj
@api_call
def jobs_update(
    ctx: Context,
    job_id: str,
    file: Path | None,
    name: str | None,
    expression: str | None,
    timezone: str | None,
    http_url: str | None,
    completion: str | None,
    heartbeat: int | None,
    timeout: int | None,
    concurrency_key: str | None,
    concurrency_limit: int | None,
    no_heartbeat: bool,
    no_concurrency_key: bool,
    calendars: tuple[str, ...],
    no_calendars: bool,
    group: str | None,
    if_match: int | None,
    note: str | None,
) -> None:
    """Change some of a job's fields (PATCH): from a file, or --name, --schedule, --tz, --http, --completion,
    --heartbeat (--no-heartbeat), --timeout, --concurrency-key with --concurrency-limit
    (--no-concurrency-key)."""
    body = _read_body(file) if file else {}
    if not isinstance(body, dict):
        raise click.UsageError(f"{file}: expected the fields to change (a mapping)")
    if no_heartbeat and heartbeat is not None:
        raise click.UsageError("give --heartbeat or --no-heartbeat, not both")
    if no_concurrency_key and (concurrency_key is not None or concurrency_limit is not None):
        raise click.UsageError("give --concurrency-key and --concurrency-limit, or --no-concurrency-key")
    body = {**body, **_quick_body(name, expression, timezone, http_url, completion, heartbeat, timeout)}
    if http_url:
        body["target"], read_version = _moved_http_target(ctx, job_id, http_url)
        # The rest of the target is the job as read: written only if no one changed it since (412).
        if_match = read_version if if_match is None else if_match
    body = _with_concurrency(body, concurrency_key, concurrency_limit)
    if no_heartbeat:
        body["heartbeat_seconds"] = None
    if calendars and no_calendars:
        raise click.UsageError("give --calendar or --no-calendars, not both")
    if calendars or no_calendars:
        body["calendars"] = list(calendars)
    if group:
        body["group"] = group
    if no_concurrency_key:
        policies = body.get("policies")
        body["policies"] = {**(policies if isinstance(policies, dict) else {}), "concurrency": None}
    if not body:
        raise click.UsageError("nothing to change: give -f FILE or a field option")
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"'}
    job = ctx.client.request(
        "PATCH", f"/jobs/{job_id}", body=body, headers=headers, query={"note": note}
    ).body
    ctx.emit(job, lambda: _job_detail(job))


def _moved_http_target(ctx: Context, job_id: str, url: str) -> tuple[dict[str, Any], int]:
    """--http on an HTTP job moves its URL and keeps the rest of its target: method, body, headers, and its
    secret headers (answered "<redacted>", which the API reads as "keep the stored value"; only on the same
    scheme, host and port). With the version it was read at."""
    job = ctx.client.request("GET", f"/jobs/{job_id}").body
    target = job["target"]
    if target.get("kind") != "http":
        return {"kind": "http", "config": {"url": url, "method": "POST"}}, int(job["version"])
    return {"kind": "http", "config": {**target["config"], "url": url}}, int(job["version"])


def _state_change(action: str) -> Callable[[Context, str, int | None, str | None], None]:
    def change(ctx: Context, job_id: str, if_match: int | None, note: str | None) -> None:
        headers = {} if if_match is None else {"If-Match": f'"{if_match}"'}
        query = {"note": note}
        job = ctx.client.request("POST", f"/jobs/{job_id}/{action}", headers=headers, query=query).body
        ctx.emit(job, lambda: _job_detail(job))

    return change


_BULK_OPTIONS = [
    click.option(
        "--group", help="Every job of yours in this group (one request: tickwork bulk get ID follows it)."
    ),
    click.option(
        "--tag", "tags", multiple=True, help="Every job of yours with this tag, key=value (repeat)."
    ),
    click.option("--idempotency-key", help="The same key always names the same bulk action."),
]


def _bulk_options(command: F) -> F:
    for option in reversed(_BULK_OPTIONS):
        command = option(command)
    return command


def _selector(group: str | None, tags: tuple[str, ...]) -> dict[str, Any]:
    pairs = [tag.partition("=") for tag in tags]
    if any(not sep or not key for key, sep, _ in pairs):
        raise click.UsageError("--tag takes key=value")
    body: dict[str, Any] = {"tags": {key: value for key, _, value in pairs}}
    if group:
        body["group"] = group
    return body


def _one_or_many(job_id: str | None, group: str | None, tags: tuple[str, ...]) -> bool:
    """True for a bulk action (--group or --tag), False for one job; a usage error for neither or both."""
    many = bool(group or tags)
    if many == (job_id is not None):
        raise click.UsageError("give a JOB_ID, or --group and/or --tag (not both)")
    return many


def _run_bulk(ctx: Context, body: dict[str, Any], key: str | None) -> None:
    """Start a bulk action and follow it to its end: a progress bar over your jobs (or, in JSON, the
    action as it ended)."""
    headers = {"Idempotency-Key": key or f"cli-{uuid.uuid4()}"}
    action = ctx.client.request("POST", "/bulk-actions", body=body, headers=headers).body
    total = None
    if body["action"] != "retry_failed":
        total = ctx.client.request("GET", "/groups").body["scanned"]  # every job of yours is looked at
    started = time.monotonic()
    if ctx.output == "json":
        action = _follow(ctx, action, lambda _: None)
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=False) as bar:
            task = bar.add_task(body["action"], total=total)

            def show(current: Mapping[str, Any]) -> None:
                p = current["progress"]
                done = f"{p['changed']} changed, {p['unchanged']} same, {p['failed']} failed"
                text = f"{body['action']}: {done}"
                bar.update(task, completed=p["scanned"], description=text)

            action = _follow(ctx, action, show)
            if total is None:
                bar.update(task, total=action["progress"]["scanned"])
    took = time.monotonic() - started
    ctx.emit(action, lambda: _bulk_detail(action, took))


# A running action whose progress has not moved for this long is left: something is not working on it.
STALLED_SECONDS = 180.0


def _follow(ctx: Context, action: Mapping[str, Any], show: Callable[[Mapping[str, Any]], None]) -> Any:
    """Read the action again every half second until it is done (a scheduled one is answered as it is)."""
    show(action)
    moved = time.monotonic()
    while action["state"] == "running":
        time.sleep(0.5)
        before = action["progress"]
        action = ctx.client.request("GET", f"/bulk-actions/{action['id']}").body
        show(action)
        if action["progress"] != before:
            moved = time.monotonic()
        elif time.monotonic() - moved > STALLED_SECONDS:
            raise click.ClickException(
                f"bulk action {action['id']} has not moved for {STALLED_SECONDS:.0f} s: is the watcher "
                f"running? It goes on from where it stopped: tickwork bulk get {action['id']} --wait"
            )
    return action


def _bulk_detail(action: Mapping[str, Any], took: float | None = None) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    p = action["progress"]
    selector = " ".join([f"group={action['group']}"] if action["group"] else [])
    selector += "".join(f" {k}={v}" for k, v in action["tags"].items())
    rows = [
        ("id", action["id"]),
        ("action", f"{action['action']} of {selector.strip()}"),
        ("state", action["state"] + (f" in {took:.1f} s" if took and action["state"] == "done" else "")),
        ("note", action["note"]),
        ("jobs", f"{p['scanned']} looked at, {p['matched']} selected: {p['changed']} changed, "
                 f"{p['unchanged']} unchanged, {p['failed']} failed"),
    ]  # fmt: skip
    if action.get("resume_action"):
        rows.append(("resumes", f"at {action['resume_at']} ({action['resume_action']})"))
    rows.extend(("failure", failure) for failure in p["failures"])
    for name, value in rows:
        table.add_row(name, value)
    return table


@jobs.command("pause")
@click.argument("job_id", required=False)
@_bulk_options
@click.option("--until", help="With --group/--tag: a maintenance window's end (ISO 8601, or 2h ahead: +2h).")
@click.option("--if-match", "if_match", type=int)
@click.option("--note", required=True, help="Why: required, recorded with the revision (tickwork audit).")
@click.pass_obj
@api_call
def jobs_pause(
    ctx: Context,
    job_id: str | None,
    group: str | None,
    tags: tuple[str, ...],
    idempotency_key: str | None,
    until: str | None,
    if_match: int | None,
    note: str,
) -> None:
    """Pause a job, or every job of a group and/or tags (one request, with a progress bar): no run starts
    until it is resumed. --until resumes them then (a maintenance window)."""
    if not _one_or_many(job_id, group, tags):
        if until:
            raise click.UsageError("--until is for --group/--tag: pause one job and resume it yourself")
        _state_change("pause")(ctx, str(job_id), if_match, note)
        return
    body = {"action": "pause", "note": note, **_selector(group, tags)}
    if until:
        body["resume_at"] = _ahead(until)
    _run_bulk(ctx, body, idempotency_key)


@jobs.command("resume")
@click.argument("job_id", required=False)
@_bulk_options
@click.option("--if-match", "if_match", type=int)
@click.option("--note", help="Why: recorded with the revision (required with --group/--tag).")
@click.pass_obj
@api_call
def jobs_resume(
    ctx: Context,
    job_id: str | None,
    group: str | None,
    tags: tuple[str, ...],
    idempotency_key: str | None,
    if_match: int | None,
    note: str | None,
) -> None:
    """Resume a job, or every job of a group and/or tags; the fires missed while paused follow each job's
    missed-fire policy."""
    if not _one_or_many(job_id, group, tags):
        _state_change("resume")(ctx, str(job_id), if_match, note)
        return
    if not note:
        raise click.UsageError("--note is required with --group/--tag: say why")
    _run_bulk(ctx, {"action": "resume", "note": note, **_selector(group, tags)}, idempotency_key)


def _ahead(text: str) -> str:
    """An instant: ISO 8601, or +DURATION from now (+2h)."""
    if text.startswith("+"):
        match = _DURATION.match(text[1:])
        if match is None:
            raise click.UsageError(f"{text!r}: expected +N followed by s, m, h or d")
        later = datetime.now(UTC) + timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        return later.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return _instant(text)


@jobs.command("delete")
@click.argument("job_id")
@click.option("--if-match", "if_match", type=int)
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.option("--note", required=True, help="Why: required, recorded with the revision (tickwork audit).")
@click.pass_obj
@api_call
def jobs_delete(ctx: Context, job_id: str, if_match: int | None, yes: bool, note: str) -> None:
    """Delete a job (its run history stays until it expires)."""
    if not yes:
        click.confirm(f"delete {job_id}?", abort=True, err=True)
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"'}
    ctx.client.request("DELETE", f"/jobs/{job_id}", headers=headers, query={"note": note})
    ctx.emit({"deleted": job_id}, lambda: f"deleted {job_id}")


@jobs.command("run")
@click.argument("job_id")
@click.option("--even-if-paused", is_flag=True, help="Run a paused job anyway.")
@click.option("--idempotency-key", help="Default: a new key, so a retried request starts one run.")
@click.pass_obj
@api_call
def jobs_run(ctx: Context, job_id: str, even_if_paused: bool, idempotency_key: str | None) -> None:
    """Run a job now, besides its schedule."""
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    query = {"even_if_paused": "true"} if even_if_paused else None
    run = ctx.client.request(
        "POST", f"/jobs/{job_id}/runs", query=query, headers={"Idempotency-Key": key}
    ).body
    ctx.emit(run, lambda: _run_detail(run))


@jobs.command("backfill")
@click.argument("job_id")
@click.option("--from", "start", required=True, help="RFC 3339 instant, or a duration ago (2d).")
@click.option("--to", "end", default="1s", show_default=True, help="RFC 3339 instant, or a duration ago.")
@click.option("--rerun", is_flag=True, help="Also run the slots that already have a run.")
@click.option("--rate", type=float, default=10.0, show_default=True, help="Runs started per second.")
@click.option("--idempotency-key", help="Default: a new key.")
@click.pass_obj
@api_call
def jobs_backfill(
    ctx: Context, job_id: str, start: str, end: str, rerun: bool, rate: float, idempotency_key: str | None
) -> None:
    """Run every fire of the job's schedule in a past window (at most 1,000)."""
    body = {"from": _instant(start), "to": _instant(end), "rerun": rerun, "rate_per_second": rate}
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    result = ctx.client.request(
        "POST", f"/jobs/{job_id}/backfill", body=body, headers={"Idempotency-Key": key}
    ).body
    ctx.emit(
        result,
        lambda: (
            f"created {result['created']}, skipped {result['skipped']} (already had a run); "
            f"starting {result['first_due_at']} .. {result['last_due_at']}"
        ),
    )


@jobs.command("apply")
@click.option("-f", "--file", "file", type=click.Path(path_type=Path, dir_okay=False), required=True)
@click.option("--prune", is_flag=True, help="Delete your jobs whose names the file does not list.")
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask before writing.")
@click.option(
    "--concurrency", type=click.IntRange(1, 64), default=applying.DEFAULT_CONCURRENCY, show_default=True
)
@click.pass_obj
@api_call
def jobs_apply(ctx: Context, file: Path, prune: bool, dry_run: bool, yes: bool, concurrency: int) -> None:
    """Make your jobs what FILE says, keyed by name: create, update, leave equal ones, --prune the rest."""
    desired = applying.load_file(file)
    started = time.monotonic()
    with err.status("reading your jobs ...") if ctx.output == "table" else _nothing():
        current = list(ctx.client.pages("/jobs"))
    changes = applying.plan(desired, current, prune=prune)
    counts = applying.summary(changes)
    if ctx.output == "json":
        if dry_run:
            click.echo(
                json.dumps({"plan": list(applying.as_json(changes)), "counts": counts}, indent=2, default=str)
            )
            return
    else:
        _print_plan(changes, counts)
    writes = [c for c in changes if c.action is not applying.Action.UNCHANGED]
    if dry_run or not writes:
        if ctx.output == "table":
            out.print("dry run: nothing written" if dry_run else "nothing to change")
        elif not writes:
            click.echo(json.dumps({"counts": counts, "failed": [], "seconds": 0}, indent=2))
        return
    if not yes and ctx.output == "table" and not click.confirm(f"apply {len(writes)} change(s)?", err=True):
        raise click.Abort()
    outcome = _apply_with_progress(ctx, changes, writes, concurrency)
    seconds = time.monotonic() - started
    rate = len(writes) / seconds * 60 if seconds > 0 else 0.0
    if ctx.output == "json":
        click.echo(
            json.dumps(
                {
                    "counts": {a.value: n for a, n in outcome.done.items()},
                    "failed": [{"name": c.name, "error": e} for c, e in outcome.failed],
                    "seconds": round(seconds, 2),
                },
                indent=2,
            )
        )
    else:
        done = ", ".join(
            f"{n} {a.value}d" if a.value != "unchanged" else f"{n} unchanged" for a, n in outcome.done.items()
        )
        out.print(f"{done} in {seconds:.1f} s ({rate:,.0f} changes a minute)", highlight=False)
        for change, error in outcome.failed:
            err.print(f"[red]failed[/red] {change.action.value} {change.name!r}: {error}", highlight=False)
    if outcome.failed:
        sys.exit(1)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _print_plan(changes: Sequence[applying.Change], counts: Mapping[str, int]) -> None:
    symbols = {"create": "[green]+[/green]", "update": "[yellow]~[/yellow]", "delete": "[red]-[/red]"}
    shown = 0
    for change in changes:
        if change.action is applying.Action.UNCHANGED:
            continue
        shown += 1
        if shown > 200:
            continue
        out.print(
            f"{symbols[change.action.value]} {change.name}"
            + (f"  ({change.job_id})" if change.job_id else "")
        )
        for path, before, after in change.diff:
            out.print(
                f"    {path}: {applying.render_value(before)} -> {applying.render_value(after)}",
                highlight=False,
            )
    if shown > 200:
        out.print(f"... and {shown - 200} more")
    out.print(", ".join(f"{n} to {a}" if a != "unchanged" else f"{n} unchanged" for a, n in counts.items()))


def _apply_with_progress(
    ctx: Context, changes: Sequence[applying.Change], writes: Sequence[applying.Change], concurrency: int
) -> applying.Outcome:
    if ctx.output == "json":
        return applying.execute(ctx.client, changes, concurrency=concurrency)
    columns = (TextColumn("applying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("apply", total=len(writes))
        return applying.execute(
            ctx.client, changes, concurrency=concurrency, progress=lambda _: bar.advance(task)
        )


# --- runs ------------------------------------------------------------------------------------------------


@tickwork.group()
def runs() -> None:
    """Run history, one run, retries, and what failed."""


@runs.command("list")
@click.argument("job_id")
@click.option(
    "--state",
    type=click.Choice(
        [
            "planned",
            "queued",
            "running",
            "retry_wait",
            "succeeded",
            "failed",
            "skipped",
            "missed",
            "cancelled",
            "excluded",
        ]
    ),
)
@click.option("--from", "start", help="RFC 3339 instant, or a duration ago (2h).")
@click.option("--to", "end", help="RFC 3339 instant, or a duration ago.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.pass_obj
@api_call
def runs_list(
    ctx: Context, job_id: str, state: str | None, start: str | None, end: str | None, limit: int
) -> None:
    """A job's runs, newest first."""
    query = {
        "state": state,
        "from": None if start is None else _instant(start),
        "to": None if end is None else _instant(end),
        "limit": limit,
    }
    page = ctx.client.request("GET", f"/jobs/{job_id}/runs", query=query).body
    ctx.emit(page, lambda: _runs_table(page["items"]))


@runs.command("get")
@click.argument("run_id")
@click.pass_obj
@api_call
def runs_get(ctx: Context, run_id: str) -> None:
    """One run with its attempts (RUN_ID is <job_id>:<time>)."""
    run = ctx.client.request("GET", f"/jobs/{_split_run_id(run_id)}/runs/{run_id}").body
    ctx.emit(run, lambda: _run_detail(run))


@runs.command("retry-failed")
@_bulk_options
@click.option("--from", "start", required=True, help="Runs that failed at or after: RFC 3339, or 2h ago.")
@click.option("--to", "end", help="Runs that failed at or before (default: now).")
@click.option("--note", required=True, help="Why: required, recorded with the bulk action.")
@click.pass_obj
@api_call
def runs_retry_failed(
    ctx: Context,
    group: str | None,
    tags: tuple[str, ...],
    idempotency_key: str | None,
    start: str,
    end: str | None,
    note: str,
) -> None:
    """Retry every failed run of a group's (and/or tags') jobs that failed in a window: one request."""
    if not (group or tags):
        raise click.UsageError("give --group and/or --tag")
    body = {"action": "retry_failed", "note": note, "from": _instant(start), **_selector(group, tags)}
    body["to"] = (
        _instant(end) if end else datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )
    _run_bulk(ctx, body, idempotency_key)


@runs.command("retry")
@click.argument("run_id")
@click.option("--idempotency-key", help="Default: a new key.")
@click.pass_obj
@api_call
def runs_retry(ctx: Context, run_id: str, idempotency_key: str | None) -> None:
    """Start the next attempt of a failed or cancelled run."""
    key = idempotency_key or f"cli-{uuid.uuid4()}"
    run = ctx.client.request(
        "POST", f"/jobs/{_split_run_id(run_id)}/runs/{run_id}/retry", headers={"Idempotency-Key": key}
    ).body
    ctx.emit(run, lambda: _run_detail(run))


@runs.command("failed")
@click.option("--since", default="1h", show_default=True, help="A duration ago (30m, 1h, 2d) or an instant.")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.pass_obj
@api_call
def runs_failed(ctx: Context, since: str, limit: int) -> None:
    """Your failed runs across all jobs, newest first."""
    page = ctx.client.request(
        "GET", "/runs", query={"state": "failed", "from": _instant(since), "limit": limit}
    ).body
    ctx.emit(page, lambda: _runs_table(page["items"]))


# --- events --------------------------------------------------------------------------------------------


@tickwork.command("events")
@click.option("--job", "job_id", help="Only this job's events (default: across all your jobs).")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--cursor", help="The next page: the previous answer's next_cursor.")
@click.pass_obj
@api_call
def events(ctx: Context, job_id: str | None, limit: int, cursor: str | None) -> None:
    """What happened to your jobs, newest first: failures, late starts, missed deadlines, skipped slots,
    auto-pauses (docs/alerts.md)."""
    page = ctx.client.request(
        "GET", "/events", query={"job_id": job_id, "limit": limit, "cursor": cursor}
    ).body

    def table() -> Table:
        shown = Table()
        for column in ("at", "kind", "job", "run", "detail"):
            shown.add_column(column, overflow="fold")
        for event in page["items"]:
            shown.add_row(
                str(event["at"]), event["kind"], event["job_id"], event.get("run_id") or "-", event["detail"]
            )
        return shown

    ctx.emit(page, table)


# --- revisions and the audit log ---------------------------------------------------------------------------


def _revisions_table(revisions: Sequence[Mapping[str, Any]], *, with_job: bool) -> Table:
    shown = Table()
    columns = ("at", "job", "revision", "action", "actor", "changed", "note")
    for column in columns if with_job else tuple(c for c in columns if c != "job"):
        shown.add_column(column, overflow="fold")
    for revision in revisions:
        row = [
            str(revision["at"]),
            str(revision["revision"]),
            revision["action"],
            revision["actor"],
            ", ".join(revision["changed"]) or "-",
            revision.get("note") or "-",
        ]
        shown.add_row(*([row[0], revision["job_id"], *row[1:]] if with_job else row))
    return shown


@jobs.command("revisions")
@click.argument("job_id")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--cursor", help="The next page: the previous answer's next_cursor.")
@click.pass_obj
@api_call
def jobs_revisions(ctx: Context, job_id: str, limit: int, cursor: str | None) -> None:
    """A job's revisions, newest first: who changed what, when, and why."""
    page = ctx.client.request(
        "GET", f"/jobs/{job_id}/revisions", query={"limit": limit, "cursor": cursor}
    ).body
    ctx.emit(page, lambda: _revisions_table(page["items"], with_job=False))


@jobs.command("diff")
@click.argument("job_id")
@click.argument("before", type=click.IntRange(min=1))
@click.argument("after", type=click.IntRange(min=1))
@click.pass_obj
@api_call
def jobs_diff(ctx: Context, job_id: str, before: int, after: int) -> None:
    """What changed between two revisions of a job, field by field."""
    diff = ctx.client.request("GET", f"/jobs/{job_id}/diff", query={"from": before, "to": after}).body

    def table() -> Table:
        shown = Table(title=f"{job_id}: revision {before} -> {after}")
        for column in ("field", f"revision {before}", f"revision {after}"):
            shown.add_column(column, overflow="fold")
        for change in diff["changes"]:
            shown.add_row(change["field"], _short(change["before"], 60), _short(change["after"], 60))
        return shown

    ctx.emit(diff, table)


@jobs.command("rollback")
@click.argument("job_id")
@click.argument("revision", type=click.IntRange(min=1))
@click.option("--note", required=True, help="Why: required, recorded with the new revision.")
@click.option("--if-match", "if_match", type=int, help="Only if the job is still at this version.")
@click.pass_obj
@api_call
def jobs_rollback(ctx: Context, job_id: str, revision: int, note: str, if_match: int | None) -> None:
    """Write a job's definition at an earlier revision back (a new revision; its state stays)."""
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"'}
    body = {"revision": revision, "note": note}
    job = ctx.client.request("POST", f"/jobs/{job_id}/rollback", body=body, headers=headers).body
    ctx.emit(job, lambda: _job_detail(job))


@tickwork.command("audit")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@click.option("--cursor", help="The next page: the previous answer's next_cursor.")
@click.pass_obj
@api_call
def audit(ctx: Context, limit: int, cursor: str | None) -> None:
    """Every write of your jobs, newest first: who, what, when, why."""
    page = ctx.client.request("GET", "/audit", query={"limit": limit, "cursor": cursor}).body
    ctx.emit(page, lambda: _revisions_table(page["items"], with_job=True))


# --- preview ---------------------------------------------------------------------------------------------


_AFTER = click.option("--after", help="List fires after this instant (ISO 8601, or 2h ago; default: now).")
_COUNT = click.option("--count", type=click.IntRange(1, 100), default=10, show_default=True)


@tickwork.command("preview")
@click.argument("expression")
@click.option("--tz", "timezone", default="UTC", show_default=True, help="IANA time zone.")
@_COUNT
@_AFTER
@click.option(
    "--calendar", "calendars", multiple=True, help="Mark the fires this calendar of yours excludes."
)
@click.pass_obj
@api_call
def preview(
    ctx: Context, expression: str, timezone: str, count: int, after: str | None, calendars: tuple[str, ...]
) -> None:
    """The next fires of a cron expression, in UTC and local time, DST transitions and excluded fires
    marked."""
    body: dict[str, Any] = {"expression": expression, "timezone": timezone, "count": count}
    if after:
        body["after"] = _instant(after)
    if calendars:
        body["calendars"] = list(calendars)
    result = ctx.client.request("POST", "/schedules/preview", body=body).body
    ctx.emit(result, lambda: _preview_table(result))


@jobs.command("preview")
@click.argument("job_id")
@_COUNT
@_AFTER
@click.pass_obj
@api_call
def jobs_preview(ctx: Context, job_id: str, count: int, after: str | None) -> None:
    """A job's next fires; those its calendars exclude are marked (they are recorded `excluded`, not run)."""
    query = {"count": count, "after": None if after is None else _instant(after)}
    result = ctx.client.request("GET", f"/jobs/{job_id}/preview", query=query).body
    ctx.emit(result, lambda: _preview_table(result))


def _preview_table(result: Mapping[str, Any]) -> Table:
    shown = Table(title=f"{result['expression']} ({result['timezone']}): {result['description']}")
    for column in ("UTC", "LOCAL", "DST", "EXCLUDED"):
        shown.add_column(column, overflow="fold")
    for fire in result["fires"]:
        shown.add_row(str(fire["at"]), str(fire["local"]), fire.get("dst") or "", fire.get("excluded") or "")
    return shown


# --- groups and bulk actions ----------------------------------------------------------------------------


@tickwork.command("groups")
@click.pass_obj
@api_call
def groups(ctx: Context) -> None:
    """Your groups, with their jobs counted by state."""
    answer = ctx.client.request("GET", "/groups").body

    def table() -> Table:
        shown = Table(title=None if answer["complete"] else f"counted {answer['scanned']} jobs (cut short)")
        for column in ("GROUP", "JOBS", "ACTIVE", "PAUSED"):
            shown.add_column(column)
        for group in answer["items"]:
            shown.add_row(group["name"], str(group["jobs"]), str(group["active"]), str(group["paused"]))
        return shown

    ctx.emit(answer, table)


@tickwork.group("bulk")
def bulk() -> None:
    """Bulk actions: what `jobs pause|resume --group/--tag` and `runs retry-failed` started."""


@bulk.command("list")
@click.pass_obj
@api_call
def bulk_list(ctx: Context) -> None:
    """Your bulk actions, newest first."""
    page = ctx.client.request("GET", "/bulk-actions").body

    def table() -> Table:
        shown = Table()
        for column in ("ID", "ACTION", "GROUP", "STATE", "CHANGED", "FAILED", "NOTE"):
            shown.add_column(column, overflow="fold")
        for a in page["items"]:
            p = a["progress"]
            row = (a["id"], a["action"], a["group"] or "-", a["state"], str(p["changed"]), str(p["failed"]))
            shown.add_row(*row, _short(a["note"]))
        return shown

    ctx.emit(page, table)


@bulk.command("get")
@click.argument("action_id")
@click.option("--wait", is_flag=True, help="Follow it to its end.")
@click.pass_obj
@api_call
def bulk_get(ctx: Context, action_id: str, wait: bool) -> None:
    """One bulk action and its progress."""
    action = ctx.client.request("GET", f"/bulk-actions/{action_id}").body
    if wait:
        action = _follow(ctx, action, lambda _: None)
    ctx.emit(action, lambda: _bulk_detail(action))


# --- calendars -------------------------------------------------------------------------------------------


@tickwork.group()
def calendars() -> None:
    """Exclusion calendars: dates and windows your jobs' scheduled fires skip (each recorded `excluded`)."""


def _calendars_table(items: Sequence[Mapping[str, Any]]) -> Table:
    shown = Table()
    for column in ("NAME", "TZ", "DATES", "WINDOWS", "VERSION", "DESCRIPTION"):
        shown.add_column(column, overflow="fold")
    for item in items:
        shown.add_row(
            item["name"],
            item["timezone"],
            str(len(item["dates"])),
            str(len(item["windows"])),
            str(item["version"]),
            _short(item["description"]),
        )
    return shown


def _calendar_detail(item: Mapping[str, Any]) -> Table:
    shown = Table(title=f"{item['name']} ({item['timezone']}), version {item['version']}")
    for column in ("EXCLUDES", "LABEL"):
        shown.add_column(column, overflow="fold")
    for day in item["dates"]:
        shown.add_row(str(day["date"]), day["label"])
    for window in item["windows"]:
        shown.add_row(f"{window['start']} to {window['end']}", window["label"])
    return shown


@calendars.command("list")
@click.pass_obj
@api_call
def calendars_list(ctx: Context) -> None:
    """Your calendars."""
    page = ctx.client.request("GET", "/calendars").body
    ctx.emit(page, lambda: _calendars_table(page["items"]))


@calendars.command("get")
@click.argument("name")
@click.pass_obj
@api_call
def calendars_get(ctx: Context, name: str) -> None:
    """One calendar: every date and window it excludes."""
    item = ctx.client.request("GET", f"/calendars/{name}").body
    ctx.emit(item, lambda: _calendar_detail(item))


def _labelled(text: str) -> dict[str, str]:
    value, _, label = text.partition("=")
    return {"value": value.strip(), "label": label.strip()}


@calendars.command("put")
@click.argument("name")
@click.option(
    "-f", "--file", "file", type=click.Path(path_type=Path, dir_okay=False), help="The calendar as YAML/JSON."
)
@click.option("--tz", "timezone", help="IANA time zone its dates and windows are in.")
@click.option("--date", "dates", multiple=True, help="A local day to exclude: 2027-12-25[=label] (repeat).")
@click.option(
    "--window",
    "windows",
    multiple=True,
    help="Wall-clock START/END to exclude: 2027-11-07T01:00/02:30[=label].",
)
@click.option("--description", help="What the calendar is for.")
@click.option(
    "--if-match", "if_match", type=int, help="Only if it is still at this version (0: only if new)."
)
@click.pass_obj
@api_call
def calendars_put(
    ctx: Context,
    name: str,
    file: Path | None,
    timezone: str | None,
    dates: tuple[str, ...],
    windows: tuple[str, ...],
    description: str | None,
    if_match: int | None,
) -> None:
    """Create a calendar or replace it whole, from a file or --tz with --date and --window. An edit counts
    at the next claim of each job's runs."""
    body = _read_body(file) if file else {}
    if not isinstance(body, dict):
        raise click.UsageError(f"{file}: expected one calendar (a mapping)")
    if timezone:
        body["timezone"] = timezone
    if description is not None:
        body["description"] = description
    if dates:
        body["dates"] = [{"date": d["value"], "label": d["label"]} for d in map(_labelled, dates)]
    if windows:
        body["windows"] = [_window(w) for w in windows]
    if "timezone" not in body:
        raise click.UsageError("give --tz (or a file with timezone)")
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"'}
    item = ctx.client.request("PUT", f"/calendars/{name}", body=body, headers=headers).body
    ctx.emit(item, lambda: _calendar_detail(item))


def _window(text: str) -> dict[str, str]:
    """START/END[=label]; an END of only a time is on START's day."""
    given = _labelled(text)
    start, slash, end = given["value"].partition("/")
    if not slash or not start or not end:
        raise click.UsageError(f"--window {text!r}: expected START/END, e.g. 2027-11-07T01:00/02:30")
    if "T" not in end and "-" not in end:
        end = f"{start.partition('T')[0]}T{end}"
    return {"start": start, "end": end, "label": given["label"]}


@calendars.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.pass_obj
@api_call
def calendars_delete(ctx: Context, name: str, yes: bool) -> None:
    """Delete a calendar: the jobs that name it run every fire from then on."""
    if not yes:
        click.confirm(f"delete calendar {name}? its jobs will run every fire", abort=True, err=True)
    ctx.client.request("DELETE", f"/calendars/{name}")
    ctx.emit({"deleted": name}, lambda: f"deleted calendar {name}")


def main(argv: Iterable[str] | None = None) -> int:
    try:
        tickwork.main(args=None if argv is None else list(argv), prog_name="tickwork", standalone_mode=True)
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 1
    return 0
