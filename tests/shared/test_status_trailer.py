"""A failed call's status details are read by one function (shared.reasons) on every side: the
SDK's error mapping and the cluster reader's owner probe."""

from __future__ import annotations

from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from reader_service import owner_probe
from rollout_client import _errors
from shared import reasons
from shared.reasons import NOT_OWNER, STATUS_DETAILS_KEY, error_info_metadata, status_of_trailer


def _trailer(reason: str, metadata: dict[str, str]) -> list[tuple[str, str | bytes]]:
    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=reasons.ERROR_DOMAIN, metadata=metadata))
    status = status_pb2.Status(code=14, message="elsewhere", details=[packed])
    return [("other", "x"), (STATUS_DETAILS_KEY, status.SerializeToString())]


def test_the_error_info_of_a_reason_is_read_back_and_another_reason_is_none() -> None:
    status = status_of_trailer(_trailer(NOT_OWNER, {"shard": "3", "owner_address": "h:1"}))
    assert error_info_metadata(status, NOT_OWNER) == {"shard": "3", "owner_address": "h:1"}
    assert error_info_metadata(status, reasons.REPLY_TOO_LARGE) is None
    assert error_info_metadata(None, NOT_OWNER) is None


def test_a_trailer_without_details_or_with_undecodable_ones_is_none() -> None:
    assert status_of_trailer(None) is None
    assert status_of_trailer([("other", "x")]) is None
    assert status_of_trailer([(STATUS_DETAILS_KEY, b"\xff\xff\xff")]) is None


def test_the_sdk_and_the_owner_probe_read_status_details_with_the_shared_function() -> None:
    assert _errors.status_of_trailer is status_of_trailer
    assert owner_probe.status_of_trailer is status_of_trailer
    assert owner_probe.error_info_metadata is error_info_metadata
