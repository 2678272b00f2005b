"""docs/design.md's rough numbers are what the load model prints (issue 29: every figure from one model)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MODEL = Path(__file__).resolve().parent.parent / "benchmarks" / "load_model.py"


def _load_model() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load_model", MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["load_model"] = module
    spec.loader.exec_module(module)
    return module


def test_the_design_docs_rough_numbers_are_the_load_models() -> None:
    model = _load_model()
    text = model.DOC.read_text()
    block = text[text.index(model.START) + len(model.START) : text.index(model.END)]
    assert block.strip() == "\n".join(model.model()).strip(), (
        "docs/design.md's rough numbers differ: `python benchmarks/load_model.py --write` rewrites them"
    )


def test_the_burst_is_derived_from_the_mix_not_stated() -> None:
    model = _load_model()
    per_minute = model.fires_per_minute(model.datetime(2026, 12, 2, tzinfo=model.UTC))
    on_the_hour = sum(
        s.jobs
        for s in model.MIX
        if s.expressions[0] in ("0 * * * *", "*/15 * * * *", "*/5 * * * *", "* * * * *")
    )
    assert max(per_minute.values()) == on_the_hour == 60_000
    assert (
        sum(per_minute.values())
        == 40_000 * 24 + 10_000 * 96 + 5_000 * 288 + 5_000 * 1_440 + 30_000 * 24 + 10_000
    )


def test_the_default_stack_has_the_shards_the_models_burst_needs() -> None:
    # Issue 29: the shard count is sized by the load model. A deployment whose mix is busier reads its own
    # figure from `load_model.py --jobs FILE` and sets `-c shard_count=N`.
    model = _load_model()
    burst = max(model.fires_per_minute(model.datetime(2026, 12, 2, tzinfo=model.UTC)).values())
    needed = model.shards_for(burst)
    assert needed == 6  # 60,000 x 2.32 ms / min(50 s / 2, 40 s)
    assert model.DeploymentConfig().shard_count >= needed
    assert model.DeploymentConfig(production=True).shard_count >= needed


def test_production_warms_every_table_to_what_the_models_burst_takes() -> None:
    model = _load_model()
    burst = max(model.fires_per_minute(model.datetime(2026, 12, 2, tzinfo=model.UTC)).values())
    plan_s = burst / model.SHARDS * model.PLAN_SECONDS_PER_FIRE_PER_SHARD
    writes = model.warm_writes(burst, plan_s)
    assert set(writes) == {"jobs", "runs", "slots"}
    for table, (need, warmed) in writes.items():
        assert need <= warmed, f"{table}: the burst takes {need:,} units/s, production warms {warmed:,}"


def test_a_running_instances_jobs_give_its_next_24_hours_peak_and_the_jitter_to_flatten_it(
    tmp_path: Path,
) -> None:
    model = _load_model()
    jobs = [
        *(
            {"state": "active", "schedule": {"expression": "0 * * * *", "timezone": "UTC"}}
            for _ in range(300)
        ),
        *(
            {"state": "active", "schedule": {"expression": "30 9 * * *", "timezone": "Europe/Paris"}}
            for _ in range(50)
        ),
        {"state": "paused", "schedule": {"expression": "* * * * *", "timezone": "UTC"}},
    ]
    start = model.datetime(2026, 12, 2, 0, 0, tzinfo=model.UTC)

    per_minute = model.instance_per_minute(jobs, start)
    report = "\n".join(model.instance_report(jobs, start, cap=100))

    assert sum(per_minute.values()) == 300 * 24 + 50  # the paused job counts for nothing
    assert per_minute[model.datetime(2026, 12, 2, 8, 30, tzinfo=model.UTC)] == 50  # 09:30 in Paris, winter
    assert (
        "350 active jobs: 7,250 runs" in report
        and "peak minute 2026-12-02T00:00:00+00:00: 300 runs" in report
    )
    assert "J >= 3" in report and report.count("\n  ") == 24  # one bar an hour
