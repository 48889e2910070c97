"""deploy/kubernetes/cluster/ and deploy/compose/cluster.yaml checked offline: three etcd members
and three writers of one cluster sharing a data root, and a reader. The manifests validate
against the Kubernetes schemas and the compose specification; the writers' command lines parse
and name every etcd member, the shared volume and an address clients reach; etcd's flags are
ones the etcd server knows and its members name each other."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rollout_cli.main import cli
from tests.cluster.etcd import etcd_binary
from tests.conftest import REPO

CLUSTER = REPO / "deploy" / "kubernetes" / "cluster"
COMPOSE = REPO / "deploy" / "compose" / "cluster.yaml"
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())


def _files() -> dict[str, list[dict[str, Any]]]:
    return {
        path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for path in sorted(CLUSTER.glob("*.yaml"))
        if path.name != "kustomization.yaml"
    }


def _resources() -> dict[str, dict[str, Any]]:
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for docs in _files().values() for doc in docs}


def _container(resource: dict[str, Any]) -> dict[str, Any]:
    (container,) = resource["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _options(args: list[str]) -> dict[str, Any]:
    """What ``rollout serve-writer ARGS`` parses to (click.UsageError for an unknown option)."""
    command, *rest = args
    assert command == "serve-writer"
    return dict(cli.commands[command].make_context(command, rest, resilient_parsing=False).params)


def _reader_options(args: list[str], stand_in: Path) -> tuple[dict[str, Any], str]:
    """What ``rollout serve-reader ARGS`` parses to, and the ``--writers-tls-ca`` path it names
    (parsed as ``stand_in``, an existing file: the option requires one)."""
    command, *rest = args
    assert command == "serve-reader"
    ca = _flags(rest).get("--writers-tls-ca", "")
    stand_in.write_text("")
    swapped = [f"--writers-tls-ca={stand_in}" if arg.startswith("--writers-tls-ca=") else arg for arg in rest]
    context = cli.commands[command].make_context(command, swapped, resilient_parsing=False)
    return dict(context.params), ca


def _flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` arguments as {name: value}."""
    found = {}
    for arg in args:
        name, _, value = arg.partition("=")
        found[name] = value
    return found


@cache
def _etcd_flags() -> frozenset[str]:
    """The flags the installed etcd server documents in its --help."""
    binary = etcd_binary()
    if binary is None:
        pytest.fail("etcd is not installed: apt-get install -y etcd-server (.ci/run does it on CI)")
    done = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    return frozenset(re.findall(r"^\s+(--[a-z0-9-]+)", done.stdout + done.stderr, re.M))


def _check_etcd_members(members: dict[str, list[str]], peer: str) -> None:
    """Each member's flags are etcd's; each names itself and the same initial cluster, in which
    every member appears at its peer URL (``peer`` formatted with the member's name)."""
    known = _etcd_flags()
    clusters = set()
    for name, args in members.items():
        flags = _flags(args)
        assert set(flags) <= known, set(flags) - known
        assert flags["--name"] == name
        assert flags["--initial-cluster-state"] == "new"
        clusters.add(flags["--initial-cluster"])
        assert flags["--initial-advertise-peer-urls"] == peer.format(name=flags["--name"])
    (initial,) = clusters
    assert initial == ",".join(f"{name}={peer.format(name=name)}" for name in members)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_cluster_manifest_is_valid_kubernetes(version) -> None:
    for name, docs in _files().items():
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                raise AssertionError(f"{name}: {error}") from error


def test_the_cluster_kustomization_applies_every_manifest() -> None:
    kustomization = yaml.safe_load((CLUSTER / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(_files())
    namespaces = [doc["metadata"]["name"] for doc in _resources().values() if doc["kind"] == "Namespace"]
    assert namespaces == [kustomization["namespace"]]
    kubectl = shutil.which("kubectl")
    if kubectl is not None:  # renders as kubectl apply -k would (offline)
        done = subprocess.run(
            [kubectl, "kustomize", str(CLUSTER)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert len([doc for doc in yaml.safe_load_all(done.stdout) if doc]) == len(_resources())


def test_three_etcd_members_started_together_name_each_other() -> None:
    """The etcd StatefulSet starts its members in parallel (no member is ready before a quorum
    exists), its headless service publishes members not ready yet, and the initial cluster names
    every member at its stable peer name."""
    resources = _resources()
    etcd, service = resources["StatefulSet/rollout-etcd"], resources["Service/rollout-etcd"]
    namespace = yaml.safe_load((CLUSTER / "kustomization.yaml").read_text())["namespace"]
    assert etcd["spec"]["replicas"] == 3
    assert etcd["spec"]["podManagementPolicy"] == "Parallel"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert etcd["spec"]["serviceName"] == service["metadata"]["name"]
    container = _container(etcd)
    args = [arg.replace("$(POD_NAME)", "{name}") for arg in container["args"]]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    domain = f"{service['metadata']['name']}.{namespace}.svc"
    members = {
        f"rollout-etcd-{index}": [arg.format(name=f"rollout-etcd-{index}") for arg in args]
        for index in range(3)
    }
    _check_etcd_members(members, f"http://{{name}}.{domain}:2380")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} <= set(ports)
    assert (ports["client"], ports["peer"]) == (2379, 2380)
    data = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert _flags(container["args"])["--data-dir"].startswith(
        data[etcd["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]]
    )


def test_writers_share_one_volume_join_etcd_and_advertise_their_own_names() -> None:
    """Three writers mount the one ReadWriteMany claim at their data root; each names every etcd
    member, one cluster, and advertises its pod's stable name at the port it binds; readers mount
    the same claim read-only."""
    resources = _resources()
    writer, etcd = resources["StatefulSet/rollout-writer"], resources["StatefulSet/rollout-etcd"]
    namespace = yaml.safe_load((CLUSTER / "kustomization.yaml").read_text())["namespace"]
    assert writer["spec"]["replicas"] == 3
    assert "volumeClaimTemplates" not in writer["spec"]
    container = _container(writer)
    options = _options(container["args"])
    etcd_names = [f"{etcd['metadata']['name']}-{i}" for i in range(etcd["spec"]["replicas"])]
    assert options["etcd"] == ",".join(
        f"{name}.{etcd['spec']['serviceName']}.{namespace}.svc:2379" for name in etcd_names
    )
    assert options["cluster_name"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    grpc_port = {port["name"]: port["containerPort"] for port in container["ports"]}["grpc"]
    assert options["address"].rpartition(":")[2] == str(grpc_port)
    assert options["advertise"] == f"$(POD_NAME).{writer['spec']['serviceName']}.{namespace}.svc:{grpc_port}"
    assert resources[f"Service/{writer['spec']['serviceName']}"]["spec"]["clusterIP"] == "None"
    claim = resources["PersistentVolumeClaim/rollout-data"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for name, read_only in (("StatefulSet/rollout-writer", False), ("Deployment/rollout-reader", True)):
        pod = resources[name]["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        assert volume["persistentVolumeClaim"].get("readOnly", False) is read_only
        (mount,) = [m for m in _container(resources[name])["volumeMounts"] if m["name"] == volume["name"]]
        assert mount.get("readOnly", False) is read_only
        assert _flags(_container(resources[name])["args"])["--data-dir"] == mount["mountPath"]


def test_the_compose_cluster_follows_the_compose_specification() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_cluster_runs_three_members_three_writers_on_one_volume_and_a_reader() -> None:
    """The etcd services name each other; every writer names every etcd service, shares the data
    volume and advertises the host address its published port answers on; the reader mounts the
    volume read-only."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    members = {name: service["command"] for name, service in services.items() if name.startswith("etcd-")}
    assert sorted(members) == ["etcd-1", "etcd-2", "etcd-3"]
    _check_etcd_members(members, "http://{name}:2380")
    writers = {name: service for name, service in services.items() if name.startswith("writer-")}
    assert len(writers) == 3
    advertised = set()
    for name, service in writers.items():
        options = _options(service["command"])
        assert options["etcd"] == ",".join(f"{member}:2379" for member in members), name
        assert options["cluster_name"] == "rollout"
        port = options["address"].rpartition(":")[2]
        assert f"{port}:{port}" in service["ports"], name
        assert options["advertise"] == f"127.0.0.1:{port}"
        advertised.add(options["advertise"])
        assert service["volumes"] == ["rollout-data:/data"]
        assert set(service["depends_on"]) == set(members)
    assert len(advertised) == 3
    assert services["reader"]["volumes"] == ["rollout-data:/data:ro"]


def test_readers_ask_every_writer_by_its_advertised_name_trusting_the_ca(tmp_path: Path) -> None:
    """The readers name every writer pod at the address it advertises (docs/cluster.md §5), over
    TLS as the writers serve it, trusting a CA mounted from the config map the README says to
    create."""
    resources = _resources()
    writer, reader = resources["StatefulSet/rollout-writer"], resources["Deployment/rollout-reader"]
    writer_options = _options(_container(writer)["args"])
    assert writer_options["tls_cert"], "the writers serve TLS"
    pods = [f"{writer['metadata']['name']}-{index}" for index in range(writer["spec"]["replicas"])]
    container = _container(reader)
    options, ca = _reader_options(container["args"], tmp_path / "ca.pem")
    assert options["writers"].split(",") == [
        writer_options["advertise"].replace("$(POD_NAME)", pod) for pod in pods
    ]
    folder, _, key = ca.rpartition("/")
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == folder]
    (volume,) = [v for v in reader["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    config_map = volume["configMap"]
    assert [item["path"] for item in config_map["items"]] == [key]
    (item_key,) = [item["key"] for item in config_map["items"]]
    readme = (REPO / "README.md").read_text()
    assert f"create configmap {config_map['name']} --from-file={item_key}=deploy/secrets/ca.pem" in readme


def test_the_compose_reader_asks_every_writer_over_tls(tmp_path: Path) -> None:
    """The compose cluster's reader names every writer service at the port it binds, over TLS as
    they serve it, trusting the CA of deploy/secrets/ mounted as a secret of its own."""
    document = yaml.safe_load(COMPOSE.read_text())
    services = document["services"]
    writers = sorted(name for name in services if name.startswith("writer-"))
    reader = services["reader"]
    options, ca = _reader_options(reader["command"], tmp_path / "ca.pem")
    ports = [_options(services[name]["command"])["address"].rpartition(":")[2] for name in writers]
    assert options["writers"].split(",") == [
        f"{name}:{port}" for name, port in zip(writers, ports, strict=True)
    ]
    for name in writers:
        assert services[name]["environment"]["ROLLOUT_TLS_CERT"], name  # the writers serve TLS
    folder, _, secret = ca.rpartition("/")
    assert folder == "/run/secrets"
    assert secret in reader["secrets"]
    assert document["secrets"][secret]["file"] == "../secrets/ca.pem"
