"""Starting warm (domain/prescale.py): after a tick, the mappings' minimum pollers follow the bursts the
tick has just planned. One ticker invocation decides (the one that plans shard 0), from its own shards'
share. A failure to scale (ScalingError) is the caller's to count, never a failed tick: planning is done,
and the next tick tries again."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from tickwork.domain.prescale import expected_burst, pollers_for
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
        # What this process last set. None after a cold start: the first tick sets it once, whatever it is,
        # so a minimum left raised by a process that died is lowered again.
        self._last: int | None = None

    def after_tick(self, tick: TickSummary, now: datetime) -> int | None:
        """Set the mappings' minimum pollers for the bursts ahead; returns what was set (None: unchanged)."""
        c = self._config
        if not any(report.shard == 0 for report in tick.reports):
            return None  # another invocation decides: one caller, one answer a minute
        planned: Counter[datetime] = Counter()
        for report in tick.reports:
            planned.update(report.planned_by_minute)
        burst = expected_burst(planned, now, len(tick.reports), c.shard_count)
        pollers = pollers_for(burst, c.queues, c.batch_size, c.min_pollers, c.max_pollers)
        if pollers == self._last:
            return None
        self._control.set_min_pollers(pollers)  # ScalingError: the caller counts it; tried again next tick
        logger.info("executor minimum pollers: %d (burst ahead: %d runs)", pollers, burst)
        self._last = pollers
        return pollers
