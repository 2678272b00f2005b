"""DynamoDB's attribute-value format: records (adapters/records.py) to and from the low-level client's
typed values."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo(v) for v in value]
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    return value


def serialize(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(_to_dynamo(v)) for k, v in item.items() if v is not None}


def deserialize(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _from_dynamo(_deserializer.deserialize(v)) for k, v in item.items()}
