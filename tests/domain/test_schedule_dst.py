"""DST behaviour, table-driven, anchored at fixed instants (default policy = Vixie/Debian cron)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from tickwork.domain.schedule import next_fire_after, parse_schedule, preview

from .test_schedule_helpers import fires, utc

NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"
LORD_HOWE = "Australia/Lord_Howe"  # +10:30 standard, +11:00 summer: 30-minute transitions


@pytest.mark.parametrize(
    ("expression", "zone", "after", "options", "expected"),
    [
        # Spring forward, fixed-time job whose wall-clock time does not exist that day.
        pytest.param(
            "30 2 * * *",
            NEW_YORK,
            "2026-03-07T12:00Z",
            {},
            ["2026-03-08T07:00Z", "2026-03-09T06:30Z"],
            id="ny_gap_shift_runs_at_0300_edt",
        ),
        pytest.param(
            "30 2 * * *",
            NEW_YORK,
            "2026-03-07T12:00Z",
            {"dst_gap": "skip"},
            ["2026-03-09T06:30Z", "2026-03-10T06:30Z"],
            id="ny_gap_skip_does_not_run_that_day",
        ),
        pytest.param(
            "0,30 2 * * *",
            NEW_YORK,
            "2026-03-07T12:00Z",
            {},
            ["2026-03-08T07:00Z", "2026-03-09T06:00Z"],
            id="ny_gap_two_fires_in_gap_run_once",
        ),
        pytest.param(
            "0 3 * * *",
            NEW_YORK,
            "2026-03-07T12:00Z",
            {},
            ["2026-03-08T07:00Z", "2026-03-09T07:00Z"],
            id="ny_time_right_after_gap_is_unaffected",
        ),
        pytest.param(
            "30 2 * * *",
            BERLIN,
            "2026-03-28T12:00Z",
            {},
            ["2026-03-29T01:00Z", "2026-03-30T00:30Z"],
            id="berlin_gap_shift_runs_at_0300_cest",
        ),
        pytest.param(
            "30 2 * * *",
            BERLIN,
            "2026-03-28T12:00Z",
            {"dst_gap": "skip"},
            ["2026-03-30T00:30Z"],
            id="berlin_gap_skip",
        ),
        pytest.param(
            "15 2 * * *",
            LORD_HOWE,
            "2026-10-03T00:00Z",
            {},
            ["2026-10-03T15:30Z", "2026-10-04T15:15Z"],
            id="lord_howe_gap_0215_shifts_to_0230",
        ),
        pytest.param(
            "15 2 * * *",
            LORD_HOWE,
            "2026-10-03T00:00Z",
            {"dst_gap": "skip"},
            ["2026-10-04T15:15Z"],
            id="lord_howe_gap_skip",
        ),
        pytest.param(
            "30 2 * * *",
            LORD_HOWE,
            "2026-10-03T00:00Z",
            {},
            ["2026-10-03T15:30Z", "2026-10-04T15:30Z"],
            id="lord_howe_0230_exists_after_30min_jump",
        ),
        # Fall back, fixed-time job whose wall-clock time occurs twice.
        pytest.param(
            "30 1 * * *",
            NEW_YORK,
            "2026-10-31T12:00Z",
            {},
            ["2026-11-01T05:30Z", "2026-11-02T06:30Z"],
            id="ny_repeat_first_runs_once_at_edt",
        ),
        pytest.param(
            "30 1 * * *",
            NEW_YORK,
            "2026-10-31T12:00Z",
            {"dst_repeat": "last"},
            ["2026-11-01T06:30Z", "2026-11-02T06:30Z"],
            id="ny_repeat_last_runs_once_at_est",
        ),
        pytest.param(
            "30 1 * * *",
            NEW_YORK,
            "2026-10-31T12:00Z",
            {"dst_repeat": "both"},
            ["2026-11-01T05:30Z", "2026-11-01T06:30Z", "2026-11-02T06:30Z"],
            id="ny_repeat_both",
        ),
        pytest.param(
            "30 1 * * *",
            NEW_YORK,
            "2026-11-01T05:30Z",
            {},
            ["2026-11-02T06:30Z"],
            id="ny_repeat_first_asked_from_inside_repeat",
        ),
        pytest.param(
            "30 2 * * *",
            BERLIN,
            "2026-10-24T12:00Z",
            {},
            ["2026-10-25T00:30Z", "2026-10-26T01:30Z"],
            id="berlin_repeat_first",
        ),
        pytest.param(
            "30 2 * * *",
            BERLIN,
            "2026-10-24T12:00Z",
            {"dst_repeat": "last"},
            ["2026-10-25T01:30Z", "2026-10-26T01:30Z"],
            id="berlin_repeat_last",
        ),
        pytest.param(
            "45 1 * * *",
            LORD_HOWE,
            "2026-04-04T00:00Z",
            {},
            ["2026-04-04T14:45Z", "2026-04-05T15:15Z"],
            id="lord_howe_repeat_first_0145_plus11",
        ),
        pytest.param(
            "45 1 * * *",
            LORD_HOWE,
            "2026-04-04T00:00Z",
            {"dst_repeat": "last"},
            ["2026-04-04T15:15Z", "2026-04-05T15:15Z"],
            id="lord_howe_repeat_last_0145_plus1030",
        ),
        pytest.param(
            "45 1 * * *",
            LORD_HOWE,
            "2026-04-04T00:00Z",
            {"dst_repeat": "both"},
            ["2026-04-04T14:45Z", "2026-04-04T15:15Z"],
            id="lord_howe_repeat_both",
        ),
        pytest.param(
            "15 1 * * *",
            LORD_HOWE,
            "2026-04-04T00:00Z",
            {"dst_repeat": "both"},
            ["2026-04-04T14:15Z", "2026-04-05T14:45Z"],
            id="lord_howe_0115_is_not_repeated",
        ),
        # Wildcard jobs follow real elapsed time.
        pytest.param(
            "0 * * * *",
            NEW_YORK,
            "2026-11-01T04:30Z",
            {},
            ["2026-11-01T05:00Z", "2026-11-01T06:00Z", "2026-11-01T07:00Z"],
            id="ny_hourly_fires_both_0100s_on_fall_back",
        ),
        pytest.param(
            "0 * * * *",
            NEW_YORK,
            "2026-03-08T05:30Z",
            {},
            ["2026-03-08T06:00Z", "2026-03-08T07:00Z", "2026-03-08T08:00Z"],
            id="ny_hourly_has_no_0200_on_spring_forward",
        ),
        pytest.param(
            "*/30 * * * *",
            LORD_HOWE,
            "2026-10-03T14:45Z",
            {},
            ["2026-10-03T15:00Z", "2026-10-03T15:30Z", "2026-10-03T16:00Z"],
            id="lord_howe_every_30_min_loses_0200_local",
        ),
        pytest.param(
            "*/30 * * * *",
            LORD_HOWE,
            "2026-04-04T14:15Z",
            {},
            ["2026-04-04T14:30Z", "2026-04-04T15:00Z", "2026-04-04T15:30Z", "2026-04-04T16:00Z"],
            id="lord_howe_every_30_min_fires_0130_twice",
        ),
        pytest.param(
            "*/15 1 * * *",
            NEW_YORK,
            "2026-11-01T05:50Z",
            {},
            [
                "2026-11-01T06:00Z",
                "2026-11-01T06:15Z",
                "2026-11-01T06:30Z",
                "2026-11-01T06:45Z",
                "2026-11-02T06:00Z",
            ],
            id="ny_step_minute_is_wildcard_and_repeats",
        ),
        # Zones that abolished DST: no transitions, fixed offset.
        pytest.param(
            "30 2 * * *",
            "America/Sao_Paulo",
            "2026-02-14T00:00Z",
            {},
            ["2026-02-14T05:30Z", "2026-02-15T05:30Z", "2026-02-16T05:30Z"],
            id="sao_paulo_2026_fixed_minus3",
        ),
        pytest.param(
            "0 0 * * *",
            "America/Sao_Paulo",
            "2018-11-02T12:00Z",
            {},
            ["2018-11-03T03:00Z", "2018-11-04T03:00Z", "2018-11-05T02:00Z"],
            id="sao_paulo_2018_midnight_gap_shifts_to_0100",
        ),
        pytest.param(
            "30 0 * * *",
            "Asia/Tehran",
            "2026-03-20T00:00Z",
            {},
            ["2026-03-20T21:00Z", "2026-03-21T21:00Z", "2026-03-22T21:00Z"],
            id="tehran_2026_fixed_plus0330",
        ),
    ],
)
def test_dst_transitions(
    expression: str, zone: str, after: str, options: dict[str, Any], expected: list[str]
) -> None:
    assert fires(expression, zone, after, len(expected), **options) == expected


@pytest.mark.parametrize(
    ("expression", "zone", "after", "options", "expected"),
    [
        pytest.param("30 2 * * *", NEW_YORK, "2026-03-08T06:00Z", {}, [("03:00", "shifted")], id="shifted"),
        pytest.param("30 1 * * *", NEW_YORK, "2026-11-01T05:00Z", {}, [("01:30", "repeated")], id="repeated"),
        pytest.param(
            "0 * * * *",
            NEW_YORK,
            "2026-11-01T04:30Z",
            {},
            [("01:00", "repeated"), ("01:00", "repeated"), ("02:00", None)],
            id="wildcard_repeated",
        ),
        pytest.param("30 9 * * *", NEW_YORK, "2026-11-01T05:00Z", {}, [("09:30", None)], id="ordinary"),
    ],
)
def test_preview_reports_local_time_and_dst_note(
    expression: str, zone: str, after: str, options: dict[str, Any], expected: list[tuple[str, str | None]]
) -> None:
    schedule = parse_schedule(expression, zone, **options)
    got = [(fire.local.strftime("%H:%M"), fire.dst) for fire in preview(schedule, utc(after), len(expected))]
    assert got == expected
    assert all(
        fire.local.tzinfo is not None and str(fire.local.tzinfo) == zone
        for fire in preview(schedule, utc(after), 1)
    )


def test_croniter_double_fire_on_fall_back_is_corrected() -> None:
    """croniter 7.0.0 fires `30 1 * * *` twice on 2026-11-01 in New York; Tickwork (default FIRST) once."""
    schedule = parse_schedule("30 1 * * *", NEW_YORK)
    start = datetime(2026, 11, 1, 0, 0, tzinfo=ZoneInfo(NEW_YORK))
    raw = croniter("30 1 * * *", start)
    croniter_fires = [raw.get_next(datetime) for _ in range(2)]
    assert [fire.date().isoformat() for fire in croniter_fires] == ["2026-11-01", "2026-11-01"]  # the quirk

    ours = preview(schedule, start, 2)
    assert [fire.at for fire in ours] == [utc("2026-11-01T05:30Z"), utc("2026-11-02T06:30Z")]


def test_results_strictly_increase_through_a_whole_dst_year() -> None:
    for zone in (NEW_YORK, BERLIN, LORD_HOWE):
        for expression, repeat in (
            ("*/30 * * * *", "first"),
            ("30 1,2 * * *", "both"),
            ("0 2 * * *", "last"),
        ):
            schedule = parse_schedule(expression, zone, dst_repeat=repeat)
            after = utc("2026-01-01T00:00Z")
            for _ in range(2000 if "*" in expression.split()[1] else 400):
                fire = next_fire_after(schedule, after)
                assert fire is not None and fire > after
                after = fire
