"""Starting warm (domain/prescale.py): after a tick, the mappings' minimum pollers follow the bursts the
tick has just planned. One ticker invocation decides (the one that plans shard 0), from its own shards'
share. A failure to scale (ScalingError) is the caller's to count, never a failed tick: planning is done,
and the next tick tries again."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwork.domain.prescale import SETTLED_TICKS, burst_ahead, pollers_for, scaled_to_all_shards
from tickwork.services.planning import TickSummary
from tickwork.services.ports import PollerControl

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PrescaleConfig:
    shard_count: int
    queues: int
    batch_size: int
    min_pollers: int  # the deployment's warm minimum: what the mappings go back to
    max_pollers: int


class Prescaler:
    def __init__(self, control: PollerControl, config: PrescaleConfig) -> None:
        self._control = control
        self._config = config
        self._due: Counter[datetime] = (
            Counter()
        )  # runs due a minute, as the ticks this process saw planned them
        self._ticks = 0
        # What this process last set. None after a cold start: it sets the floor once it has seen enough
        # ticks to know no burst is ahead, so a minimum left raised by a process that died is lowered.
        self._last: int | None = None

    def after_tick(self, tick: TickSummary, now: datetime) -> int | None:
        """Set the mappings' minimum pollers for the bursts ahead; returns what was set (None: unchanged)."""
        c = self._config
        if not any(report.shard == 0 for report in tick.reports):
            return None  # another invocation decides: one caller, one answer a minute
        planned: Counter[datetime] = Counter()
        for report in tick.reports:
            planned.update(report.planned_by_minute)
        self._due.update(scaled_to_all_shards(planned, len(tick.reports), c.shard_count))
        for minute in [m for m in self._due if m < now - timedelta(minutes=2)]:
            del self._due[minute]
        self._ticks += 1
        burst = burst_ahead(self._due, now)
        pollers = pollers_for(burst, c.queues, c.batch_size, c.min_pollers, c.max_pollers)
        raising = pollers > (self._last if self._last is not None else c.min_pollers)
        if pollers == self._last or (not raising and self._ticks < SETTLED_TICKS):
            return None
        self._control.set_min_pollers(pollers)  # ScalingError: the caller counts it; tried again next tick
        logger.info("executor minimum pollers: %d (burst ahead: %d runs)", pollers, burst)
        self._last = pollers
        return pollers
