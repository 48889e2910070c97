"""deploy/ checked offline (no container engine, no cluster here): the Kubernetes manifests
against the Kubernetes schemas, the compose file against the compose specification, the
Dockerfile by hadolint and by its instructions, and what the three must agree on with the
code (options the command line accepts, ports, the health service names, one user id, a
read-only volume for readers). deploy/make-secrets.sh makes files a TLS writer serves with."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import grpc
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rollout.v1 import reader_pb2, writer_pb2
from rollout_cli.main import cli
from serving.auth import load_tokens
from tests.conftest import REPO, start_service
from tests.e2e.secured import local

DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "container" / "Dockerfile"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
SERVICE_NAMES = {
    "serve-writer": writer_pb2.DESCRIPTOR.services_by_name["RolloutWriter"].full_name,
    "serve-reader": reader_pb2.DESCRIPTOR.services_by_name["RolloutReader"].full_name,
}
#: The oldest Kubernetes with GA grpc probes, and the newest the validator knows.
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())


def _manifests() -> dict[str, list[dict[str, Any]]]:
    return {
        path.name: [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
    }


def _resources() -> dict[str, dict[str, Any]]:
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for docs in _manifests().values() for doc in docs}


def _options(command: str, args: list[str]) -> dict[str, Any]:
    """The parameters ``rollout <command> ARGS`` parses to (click.UsageError for an unknown option)."""
    context = cli.commands[command].make_context(command, list(args), resilient_parsing=False)
    return context.params


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_kubernetes(version) -> None:
    """Each resource validates strictly (no unknown field) against the Kubernetes schema of the version."""
    for name, docs in _manifests().items():
        for doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                raise AssertionError(f"{name}: {error}") from error


def test_the_kustomization_applies_every_manifest() -> None:
    """kubectl apply -k deploy/kubernetes applies every manifest file of the folder, in one namespace."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(_manifests())
    namespaces = [doc for doc in _resources().values() if doc["kind"] == "Namespace"]
    assert [doc["metadata"]["name"] for doc in namespaces] == [kustomization["namespace"]]


def _pod(resource: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = resource["spec"]["template"]["spec"]
    return spec


def _container(resource: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(resource)["containers"]
    return dict(container)


def test_one_writer_with_its_volume_and_readers_mounting_it_read_only() -> None:
    """The writer is a StatefulSet of one replica owning a persistent volume at its data root; readers
    are a Deployment mounting that volume's claim read-only, as the same user."""
    resources = _resources()
    writer, reader = resources["StatefulSet/rollout-writer"], resources["Deployment/rollout-reader"]
    assert writer["spec"]["replicas"] == 1
    (template,) = writer["spec"]["volumeClaimTemplates"]
    data_dir = _options("serve-writer", _container(writer)["args"][1:])["data_dir"]
    assert {mount["name"]: mount["mountPath"] for mount in _container(writer)["volumeMounts"]}[
        template["metadata"]["name"]
    ] == str(data_dir)
    claim = f"{template['metadata']['name']}-{writer['metadata']['name']}-0"
    (volume,) = [v for v in _pod(reader)["volumes"] if "persistentVolumeClaim" in v]
    assert volume["persistentVolumeClaim"] == {"claimName": claim, "readOnly": True}
    (mount,) = [m for m in _container(reader)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert str(_options("serve-reader", _container(reader)["args"][1:])["data_dir"]) == mount["mountPath"]
    users = {
        (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"])
        for pod in map(_pod, (writer, reader))
    }
    assert users == {(_dockerfile_user(), True)}


@pytest.mark.parametrize("name", ["StatefulSet/rollout-writer", "Deployment/rollout-reader"])
def test_each_service_is_probed_on_its_plaintext_health_port_and_sized(name) -> None:
    """Probes are grpc probes on the port the container's --health-address binds (grpc probes cannot
    speak TLS); readiness asks for the service's own name; requests and limits are set; the command
    line accepts every argument; TLS and token files are in mounted secrets."""
    resource = _resources()[name]
    container = _container(resource)
    command, *args = container["args"]
    _options(command, args)
    health_port = int(_flag(args, "--health-address").rpartition(":")[2])
    assert {port["name"]: port["containerPort"] for port in container["ports"]}["health"] == health_port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == health_port
    assert container["readinessProbe"]["grpc"]["service"] == SERVICE_NAMES[command]
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in _pod(resource)["volumes"] if "secret" in v}
    for flag in ("--tls-cert", "--tls-key", "--auth-tokens"):
        folder = str(Path(_flag(args, flag)).parent)
        assert mounts[folder]["readOnly"] is True, flag
        assert mounts[folder]["name"] in secrets, flag


def _flag(args: list[str], name: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{name}=")]
    return value


def test_services_and_the_disruption_budget_select_the_pods() -> None:
    """Each Service selects its workload's pods and targets named ports they have; the reader's
    PodDisruptionBudget selects the readers and keeps one."""
    resources = _resources()
    for service_name, workload in (
        ("Service/rollout-writer", "StatefulSet/rollout-writer"),
        ("Service/rollout-reader", "Deployment/rollout-reader"),
    ):
        service, pods = resources[service_name], resources[workload]
        labels = pods["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        ports = {port["name"] for port in _container(pods)["ports"]}
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports
    assert resources["StatefulSet/rollout-writer"]["spec"]["serviceName"] == "rollout-writer"
    budget = resources["PodDisruptionBudget/rollout-reader"]
    reader_labels = resources["Deployment/rollout-reader"]["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= reader_labels.items()
    assert budget["spec"]["minAvailable"] == 1


def test_the_compose_file_follows_the_compose_specification() -> None:
    """check-jsonschema validates deploy/compose/compose.yaml against the compose spec it bundles."""
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_runs_both_services_with_tls_and_tokens_from_files_and_a_read_only_reader() -> None:
    """The writer and the reader take TLS and tokens from mounted secret files through the environment
    variables the options read; the reader mounts the data volume read-only; the commands parse."""
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    for name, command in (("writer", "serve-writer"), ("reader", "serve-reader")):
        service = services[name]
        assert service["command"][0] == command
        _options(command, service["command"][1:])
        environment = service["environment"]
        envvars = {
            option.envvar: option.name
            for option in cli.commands[command].params
            if isinstance(option, click.Option)
        }
        assert {envvars[key] for key in environment} >= {"tls_cert", "tls_key", "auth_tokens"}
        secret_files = {f"/run/secrets/{secret}" for secret in service["secrets"]}
        assert {
            environment[key] for key in ("ROLLOUT_TLS_CERT", "ROLLOUT_TLS_KEY", "ROLLOUT_AUTH_TOKENS")
        } <= secret_files
    assert services["writer"]["volumes"] == ["rollout-data:/data"]
    assert services["reader"]["volumes"] == ["rollout-data:/data:ro"]
    made = set(
        re.findall(
            r"> (\w+\.\w+)|-out (\w+\.\w+)|-keyout (\w+\.\w+)", (DEPLOY / "make-secrets.sh").read_text()
        )
    )
    made_files = {name for group in made for name in group if name}
    assert {Path(secret["file"]).name for secret in compose["secrets"].values()} <= made_files


def _dockerfile_user() -> int:
    parser = DockerfileParser(str(DOCKERFILE))
    (user,) = [i["value"] for i in parser.structure if i["instruction"] == "USER"]
    return int(user.split(":")[0])


def test_the_dockerfile_passes_hadolint_and_runs_unprivileged_with_the_data_root_a_volume() -> None:
    """hadolint finds nothing; the image runs as a non-root user, its data root is a volume, every
    COPY source exists, and the ports it exposes are those the manifests and compose use."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    parser = DockerfileParser(str(DOCKERFILE))
    instructions = parser.structure
    assert _dockerfile_user() != 0
    (volume,) = [i["value"] for i in instructions if i["instruction"] == "VOLUME"]
    assert yaml.safe_load(volume) == [parser.envs["ROLLOUT_DATA_DIR"]]
    for copy in (i["value"] for i in instructions if i["instruction"] == "COPY"):
        if not copy.startswith("--from"):
            for source in shlex.split(copy)[:-1]:
                assert (REPO / source).exists(), source
    exposed = {int(port) for i in instructions if i["instruction"] == "EXPOSE" for port in i["value"].split()}
    used = {
        port["containerPort"]
        for doc in _resources().values()
        if doc["kind"] in ("StatefulSet", "Deployment")
        for port in _container(doc)["ports"]
    }
    assert used <= exposed


def test_make_secrets_makes_files_a_tls_writer_serves_with(tmp_path, data_dir) -> None:
    """deploy/make-secrets.sh makes a CA, a server certificate naming the Kubernetes services, and a
    token file with an agent and an importer token; a writer serves TLS with them."""
    folder = tmp_path / "secrets"
    done = subprocess.run(
        ["bash", str(DEPLOY / "make-secrets.sh"), str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((folder / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # ca.pem is for every client
    assert stat.S_IMODE((folder / "ca.pem").stat().st_mode) == 0o644
    for secret in ("server.key", "tokens.json"):
        mode = stat.S_IMODE((folder / secret).stat().st_mode)
        if os.geteuid() == 0:  # given to the containers' user alone
            assert (mode, (folder / secret).stat().st_uid) == (0o400, 10001), secret
        else:  # readable by the containers' user, and the script says so
            assert mode == 0o644
            assert "readable by every local user" in done.stderr
    names = subprocess.run(
        ["openssl", "x509", "-in", str(folder / "server.pem"), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for service in ("rollout-writer", "rollout-reader"):
        assert f"DNS:{service}.rollout-ledger.svc" in names
    assert "DNS:*.rollout-writer.rollout-ledger.svc" in names  # each writer pod of a cluster
    cluster_reader = yaml.safe_load((DEPLOY / "compose" / "cluster.yaml").read_text())["services"]["reader"]
    (writers,) = [arg.partition("=")[2] for arg in cluster_reader["command"] if arg.startswith("--writers=")]
    for address in writers.split(","):  # the compose cluster's reader asks its writers by name
        assert f"DNS:{address.rpartition(':')[0]}," in names + ",", address
    callers = list(load_tokens(folder / "tokens.json").values())
    assert sorted(caller.importer for caller in callers) == [False, True]
    writer = start_service(
        "writer", data_dir, "--tls-cert", str(folder / "server.pem"), "--tls-key", str(folder / "server.key")
    )
    credentials = grpc.ssl_channel_credentials((folder / "ca.pem").read_bytes())
    try:
        with grpc.secure_channel(local(writer.address), credentials) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        writer.stop()


def test_the_image_holds_every_package_the_project_installs() -> None:
    """Each package pyproject.toml's setuptools finds (its include list) is copied into the build
    stage: a package left out builds a wheel without it, and the image's `rollout` fails to import."""
    import tomllib

    included = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"][
        "include"
    ]
    packages = {pattern.rstrip("*") for pattern in included}
    copied = {
        shlex.split(i["value"])[0]
        for i in DockerfileParser(str(DOCKERFILE)).structure
        if i["instruction"] == "COPY" and not i["value"].startswith("--from")
    }
    assert packages <= copied, sorted(packages - copied)
