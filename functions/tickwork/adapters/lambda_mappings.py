"""The executor's SQS event source mappings (services.ports.PollerControl): their provisioned minimum
pollers, read and set for starting warm (services/prescaling.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tickwork.domain.errors import ScalingError
from tickwork.domain.prescale import MappingState


class LambdaPollerControl:
    def __init__(self, client: Any, mapping_ids: Sequence[str], max_pollers: int) -> None:
        self._client = client
        self._mapping_ids = list(mapping_ids)
        self._max_pollers = max_pollers

    def states(self) -> dict[str, MappingState]:
        states: dict[str, MappingState] = {}
        for mapping_id in self._mapping_ids:
            try:
                answer = self._client.get_event_source_mapping(UUID=mapping_id)
            except (ClientError, BotoCoreError) as error:
                raise ScalingError(f"{mapping_id}: {type(error).__name__}: {error}") from error
            config = answer.get("ProvisionedPollerConfig") or {}
            states[mapping_id] = MappingState(int(config.get("MinimumPollers", 0)), answer["LastModified"])
        return states

    def set_min_pollers(self, changes: Mapping[str, int]) -> None:
        failed: list[str] = []
        for mapping_id, pollers in changes.items():
            try:
                self._client.update_event_source_mapping(
                    UUID=mapping_id,
                    ProvisionedPollerConfig={"MinimumPollers": pollers, "MaximumPollers": self._max_pollers},
                )
            except (ClientError, BotoCoreError) as error:
                failed.append(f"{mapping_id}: {type(error).__name__}: {error}")
        if failed:
            raise ScalingError(f"{len(failed)} of {len(changes)} mappings: " + "; ".join(failed))
