"""The executor's SQS event source mappings (services.ports.PollerControl): their provisioned minimum
pollers, raised before a burst and lowered after (services/prescaling.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.errors import ScalingError


class LambdaPollerControl:
    def __init__(self, client: Any, mapping_ids: Sequence[str], max_pollers: int) -> None:
        self._client = client
        self._mapping_ids = list(mapping_ids)
        self._max_pollers = max_pollers

    def set_min_pollers(self, pollers: int) -> None:
        failed: list[str] = []
        for mapping_id in self._mapping_ids:
            try:
                self._client.update_event_source_mapping(
                    UUID=mapping_id,
                    ProvisionedPollerConfig={"MinimumPollers": pollers, "MaximumPollers": self._max_pollers},
                )
            except (ClientError, BotoCoreError) as error:
                failed.append(f"{mapping_id}: {type(error).__name__}: {error}")
        if failed:
            raise ScalingError(f"{len(failed)} of {len(self._mapping_ids)} mappings: " + "; ".join(failed))
