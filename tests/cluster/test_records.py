"""The coordination layer's pure parts: endpoints, the key layout, stored values, the deadline."""

from __future__ import annotations

import grpc
import pytest

from writer_service.coordination import (
    DEADLINE_SLACK,
    DRIFT_BOUND,
    MAX_SHARD_COUNT,
    ClusterKeys,
    ClusterRecord,
    Endpoint,
    OwnerRecord,
    RecordFormatError,
    lease_deadline,
    parse_endpoints,
)
from writer_service.coordination.protocol import etcd_rpc


def test_etcd_protocol_loads_with_our_protobuf():
    """aetcd's generated etcd messages round-trip under our protobuf and its stubs name the RPCs we call."""
    request = etcd_rpc.TxnRequest(
        compare=[etcd_rpc.Compare(key=b"k", target=etcd_rpc.Compare.CREATE, result=etcd_rpc.Compare.EQUAL)],
        success=[etcd_rpc.RequestOp(request_put=etcd_rpc.PutRequest(key=b"k", value=b"v", lease=7))],
        failure=[etcd_rpc.RequestOp(request_range=etcd_rpc.RangeRequest(key=b"k"))],
    )
    assert etcd_rpc.TxnRequest.FromString(request.SerializeToString()) == request
    assert etcd_rpc.LeaseKeepAliveRequest(ID=5).ID == 5
    assert etcd_rpc.Event.DELETE != etcd_rpc.Event.PUT
    channel = grpc.insecure_channel("127.0.0.1:1")  # never connected: a stub only names methods
    try:
        assert callable(etcd_rpc.LeaseStub(channel).LeaseKeepAlive)
        assert callable(etcd_rpc.KVStub(channel).Txn)
        assert callable(etcd_rpc.WatchStub(channel).Watch)
    finally:
        channel.close()


def test_endpoints_parse_in_order_without_duplicates():
    """HOST:PORT lists parse in order, with bracketed IPv6, an http:// prefix and duplicates dropped."""
    assert parse_endpoints("10.0.0.1:2379, http://etcd-1:2379/,[::1]:2380,10.0.0.1:2379") == (
        Endpoint("10.0.0.1", 2379),
        Endpoint("etcd-1", 2379),
        Endpoint("::1", 2380),
    )
    assert str(Endpoint("::1", 2380)) == "[::1]:2380"


@pytest.mark.parametrize(
    "text", ["", "etcd", "etcd:", ":2379", "etcd:0", "etcd:65536", "::1:2379", "a:1,,b:2"]
)
def test_malformed_endpoints_are_refused_by_name(text):
    """An endpoint that is not HOST:PORT is refused with ValueError quoting it."""
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_endpoints(text)


def test_tls_endpoints_are_refused():
    """An https:// endpoint is refused: TLS to etcd is not supported."""
    with pytest.raises(ValueError, match="TLS is not supported"):
        parse_endpoints("https://etcd:2379")


def test_shard_keys_build_and_parse_as_a_pair_in_shard_order():
    """Shard keys carry five digits, so that they sort in shard order, and parse back to their shard."""
    keys = ClusterKeys("prod-1")
    assert keys.shard(42) == "/rollout-ledger/clusters/prod-1/shards/00042"
    assert [keys.shard_of(keys.shard(shard)) for shard in (0, 9, 10, 65_535)] == [0, 9, 10, 65_535]
    assert sorted(keys.shard(shard) for shard in (100, 9, 10)) == [
        keys.shard(9),
        keys.shard(10),
        keys.shard(100),
    ]
    assert keys.shard(3).startswith(keys.shards)
    assert keys.shards.startswith(keys.prefix)
    assert keys.writer("w-1") == "/rollout-ledger/clusters/prod-1/writers/w-1"
    with pytest.raises(ValueError, match="not in 0"):
        keys.shard(MAX_SHARD_COUNT)
    for key in (keys.writer("w-1"), keys.shards + "42", ClusterKeys("prod-2").shard(1)):
        with pytest.raises(ValueError, match="is not a shard key"):
            keys.shard_of(key)


@pytest.mark.parametrize("name", ["", "-a", "a/b", "a b", "x" * 64, "é"])
def test_cluster_names_outside_the_alphabet_are_refused(name):
    """A cluster name that could escape its prefix or is empty is refused with ValueError."""
    with pytest.raises(ValueError, match="cluster name"):
        ClusterKeys(name)


def test_owner_records_round_trip_as_sorted_compact_json():
    """An owner record is stored as compact JSON with sorted keys and decodes back."""
    record = OwnerRecord("10.0.0.7:50051", "w-1")
    assert record.encode() == b'{"address":"10.0.0.7:50051","writer_id":"w-1"}'
    assert OwnerRecord.decode("k", record.encode()) == record


@pytest.mark.parametrize(
    "value", [b"", b"not json", b"[]", b'{"address":"a"}', b'{"address":1,"writer_id":"w"}']
)
def test_malformed_owner_records_name_their_key(value):
    """A value that is not an owner record raises RecordFormatError naming the key."""
    with pytest.raises(RecordFormatError, match="/x/shards/00001"):
        OwnerRecord.decode("/x/shards/00001", value)


@pytest.mark.parametrize(
    "value", [b"{}", b'{"shard_count":0}', b'{"shard_count":true}', b'{"shard_count":"8"}']
)
def test_malformed_cluster_records_name_their_key(value):
    """A cluster record without a valid shard count raises RecordFormatError naming the key."""
    assert ClusterRecord.decode("r", ClusterRecord(8).encode()) == ClusterRecord(8)
    with pytest.raises(RecordFormatError, match="/x/record"):
        ClusterRecord.decode("/x/record", value)


def test_deadline_is_the_send_time_plus_ttl_minus_the_drift_margin():
    """The deadline is send time + TTL - (rho * TTL + slack): 10 s TTL sent at 100 s ends at 109.89 s."""
    assert DRIFT_BOUND == 1e-3
    assert DEADLINE_SLACK == 0.1
    assert lease_deadline(100.0, 10) == pytest.approx(100.0 + 10 - (0.01 + 0.1))
    assert lease_deadline(0.0, 60, drift_bound=0.01, slack=0.5) == pytest.approx(60 - 0.6 - 0.5)
