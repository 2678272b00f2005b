"""Starting warm (domain/prescale.py): after a tick, the mappings' minimum pollers follow the burst the tick
has just planned. One ticker invocation decides (the one given shard 0), from its own shards' share; it
reads what the mappings are set to, so nothing depends on which Lambda environment ran the last tick. A
failure to scale (ScalingError) is the caller's to count, never a failed tick: planning is done, and the
next tick reads the mappings again and catches up."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from tickwork.domain.prescale import burst_ahead, changes, pollers_for
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

    def after_tick(self, tick: TickSummary, now: datetime) -> dict[str, int]:
        """Set the mappings' minimum pollers for the burst this tick planned; returns what was changed."""
        c = self._config
        planned: Counter[datetime] = Counter()
        for report in tick.reports:
            planned.update(report.planned_by_minute)
        burst = burst_ahead(planned, len(tick.reports) + len(tick.failed_shards), c.shard_count)
        wanted = pollers_for(burst, c.queues, c.batch_size, c.min_pollers, c.max_pollers)
        changed = changes(self._control.states(), wanted, c.min_pollers, now)
        if changed:
            self._control.set_min_pollers(changed)  # ScalingError: counted by the caller; caught up next tick
            logger.info("executor minimum pollers: %s (burst ahead: %d runs)", changed, burst)
        return changed
