"""The Helm chart (helm/connect-group-coordinator), validated without a Kubernetes API server (none can
run here): rendered with helm-python-sdk (the Helm v4 SDK) for the default values and every
ci/*-values.yaml, `lint(strict=True)` clean, every object valid for each Kubernetes version the chart
claims (kubernetes-validate, strict), the prometheus-operator objects valid against their CRD schemas,
checkov with every skip explained, values.schema.json rejecting bad values, the alert rules through
`promtool test rules`, and the dashboard referring only to metrics the services really export (read
from a live /metrics of a running coordinator, assignor service and worker)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from services.coordinator.core.config import ServerConfig
from tests.e2e.test_prometheus import AssignorService
from tests.fixtures.coordinator import REPO, Client, CoordinatorProcess
from tests.fixtures.net import free_port
from tests.fixtures.processes import Processes

CHART = REPO / "helm" / "connect-group-coordinator"
CI_VALUES = sorted(CHART.glob("ci/*-values.yaml"))
RELEASE, NAMESPACE = "ccg", "connect"
# The chart's kubeVersion is >=1.27 (native gRPC probes are GA there); validated up to the newest
# schemas kubernetes-validate ships.
KUBE_VERSIONS = [f"1.{minor}.0" for minor in range(27, 38)]
CRD_GROUP = "monitoring.coreos.com/v1"
NODE_MODULES = REPO / ".tools" / "node_modules"
CHECKOV = REPO / ".tools" / "checkov-venv" / "bin" / "checkov"


def values_of(path: Path | None) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) if path else {}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = helm.Chart.load(CHART).render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [d for path, text in out.items() if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(text) if d]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    [obj] = [o for o in by_kind(objs, kind) if o["metadata"]["name"].endswith(suffix)]
    return obj


def pod_specs(objs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield name, o["spec"]["template"]["spec"]
        elif o["kind"] == "CronJob":
            yield name, o["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            yield name, o["spec"]


CASES = [None, *CI_VALUES]
IDS = ["default", *(p.name.removesuffix("-values.yaml") for p in CI_VALUES)]


@pytest.fixture(scope="module", params=CASES, ids=IDS)
def rendered(request: pytest.FixtureRequest) -> tuple[Path | None, list[dict[str, Any]]]:
    return request.param, render(values_of(request.param))


def test_every_optional_object_has_a_ci_values_file_that_turns_it_on() -> None:
    kinds: set[str] = set()
    for path in CI_VALUES:
        kinds |= {o["kind"] for o in render(values_of(path))}
    optional = {"ServiceMonitor", "PrometheusRule", "NetworkPolicy", "CronJob", "StatefulSet", "Job"}
    assert optional <= kinds
    assert "HorizontalPodAutoscaler" in {o["kind"] for o in render({})}
    assert "PersistentVolumeClaim" not in kinds  # (volumeClaimTemplates, not a standalone PVC)


def test_lint_strict_is_clean(rendered: tuple[Path | None, list[dict[str, Any]]]) -> None:
    path, _ = rendered
    report = helm.lint(CHART, values_of(path), strict=True, namespace=NAMESPACE)
    assert report["errors"] == [] and report["messages"] == [], report


def test_objects_are_valid_for_every_claimed_kubernetes_version(
    rendered: tuple[Path | None, list[dict[str, Any]]],
) -> None:
    _, objs = rendered
    core = [o for o in objs if o["apiVersion"] != CRD_GROUP]
    assert core
    for version in KUBE_VERSIONS:
        for o in core:
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{o['kind']}/{o['metadata']['name']} invalid for Kubernetes {version}: {e.message}")


def _validate_crds(objs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    assert node, "node is installed by scripts/setup_system.sh"
    return subprocess.run(
        [node, str(Path(__file__).with_name("validate_crds.js")), str(NODE_MODULES)],
        input=json.dumps(objs),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_servicemonitor_and_prometheusrule_match_their_crd_schemas() -> None:
    objs = [o for o in render(values_of(CHART / "ci" / "monitoring-values.yaml")) if o["apiVersion"] == CRD_GROUP]
    assert sorted(o["kind"] for o in objs) == ["PrometheusRule", "ServiceMonitor"]
    result = _validate_crds(objs)
    assert result.returncode == 0, result.stdout + result.stderr
    # The validator does reject what the CRDs reject.
    monitor = json.loads(json.dumps(next(o for o in objs if o["kind"] == "ServiceMonitor")))
    monitor["spec"]["endpoints"][0]["port"] = 9470  # a port *name* is a string
    rule = json.loads(json.dumps(next(o for o in objs if o["kind"] == "PrometheusRule")))
    del rule["spec"]["groups"][0]["name"]
    bad = _validate_crds([monitor, rule])
    assert bad.returncode == 1 and bad.stdout.count("INVALID") == 2, bad.stdout + bad.stderr


def test_pods_are_hardened(rendered: tuple[Path | None, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    specs = list(pod_specs(objs))
    assert specs
    for name, spec in specs:
        assert spec["automountServiceAccountToken"] is False, name
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True, name
            assert sc["runAsUser"] >= (999 if "postgresql" in name else 10000), name
            assert {"cpu", "memory"} <= c["resources"]["limits"].keys(), name
            assert {"cpu", "memory"} <= c["resources"]["requests"].keys(), name
            # Whatever is writable is an emptyDir (or the bundled database's volume), never the image.
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for m in c.get("volumeMounts", []):
                if not m.get("readOnly"):
                    v = volumes.get(m["name"])
                    assert v is None or "emptyDir" in v or "persistentVolumeClaim" in v, (name, m)


def test_servers_have_native_grpc_probes_and_spread_over_zones_and_nodes() -> None:
    objs = render({})
    for kind, suffix in (("StatefulSet", "-coordinator"), ("Deployment", "-assignor")):
        dep = named(objs, kind, suffix)
        spec = dep["spec"]["template"]["spec"]
        [c] = spec["containers"]
        grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["grpc"] == {"port": grpc_port}, (suffix, probe)
        keys = {t["topologyKey"] for t in spec["topologySpreadConstraints"]}
        assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        for t in spec["topologySpreadConstraints"]:
            assert t["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert named(objs, "PodDisruptionBudget", "-coordinator")["spec"]["maxUnavailable"] == 1
    assert named(objs, "Service", "-coordinator-headless")["spec"]["clusterIP"] == "None"
    hpa = named(objs, "HorizontalPodAutoscaler", "-assignor")
    assert hpa["spec"]["scaleTargetRef"]["name"] == named(objs, "Deployment", "-assignor")["metadata"]["name"]
    assert "replicas" not in named(objs, "Deployment", "-assignor")["spec"], "the HPA owns the replica count"


def test_coordinator_replicas_advertise_their_pod_names_and_share_partition_settings() -> None:
    """SPEC §10: a StatefulSet of replicas (3 by default), each advertising its stable DNS name
    under the headless Service, the partition settings in the server config, a PDB letting one
    replica go at a time, and a lease/renew combination that cannot survive a missed renewal refused."""
    objs = render({})
    sts = named(objs, "StatefulSet", "-coordinator")
    headless = named(objs, "Service", "-coordinator-headless")["metadata"]["name"]
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == headless
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    [c] = sts["spec"]["template"]["spec"]["containers"]
    assert f"--advertised-address=$(POD_NAME).{headless}.$(POD_NAMESPACE).svc.cluster.local:8470" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    props = named(objs, "ConfigMap", "-coordinator")["data"]["server.properties"]
    assert "group.coordinator.partitions=24" in props and "group.coordinator.lease.ms=10000" in props
    assert named(objs, "PodDisruptionBudget", "-coordinator")["spec"]["maxUnavailable"] == 1
    custom = render({"coordinator": {"replicas": 5, "partitions": 60, "leaseMs": 6000, "leaseRenewIntervalMs": 500}})
    assert named(custom, "StatefulSet", "-coordinator")["spec"]["replicas"] == 5
    props = named(custom, "ConfigMap", "-coordinator")["data"]["server.properties"]
    assert "group.coordinator.partitions=60" in props and "group.coordinator.lease.renew.interval.ms=500" in props
    with pytest.raises(helm.HelmError, match="leaseRenewIntervalMs"):
        render({"coordinator": {"leaseMs": 1000, "leaseRenewIntervalMs": 500}})


def test_the_feature_flag_and_the_migration_policy_reach_the_server_config() -> None:
    """SPEC §12: both protocols and the bidirectional policy by default; an operator narrows them
    (a config the server then loads); the same keys under coordinator.config, a protocol or a policy
    the server does not know, are refused naming the value to use."""

    def props(values: dict[str, Any]) -> list[str]:
        return named(render(values), "ConfigMap", "-coordinator")["data"]["server.properties"].splitlines()

    default = props({})
    assert "group.coordinator.rebalance.protocols=classic,connect" in default
    assert "group.connect.migration.policy=bidirectional" in default
    custom = props({"coordinator": {"rebalanceProtocols": ["connect"], "migrationPolicy": "downgrade"}})
    assert "group.coordinator.rebalance.protocols=connect" in custom
    assert "group.connect.migration.policy=downgrade" in custom
    config = ServerConfig.from_properties({k: v for k, _, v in (line.partition("=") for line in custom)})
    assert config.rebalance_protocols == ("connect",) and config.migration_policy == "downgrade"
    for values, field in (
        ({"coordinator": {"rebalanceProtocols": ["kafka"]}}, "rebalanceProtocols"),
        ({"coordinator": {"rebalanceProtocols": []}}, "rebalanceProtocols"),
        ({"coordinator": {"migrationPolicy": "sideways"}}, "migrationPolicy"),
    ):
        with pytest.raises(helm.HelmError, match=field):
            render(values)
    with pytest.raises(helm.HelmError, match=r"set coordinator\.migrationPolicy instead"):
        render({"coordinator": {"config": {"group.connect.migration.policy": "upgrade"}}})


def test_a_config_change_rolls_the_coordinator() -> None:
    def checksum(values: dict[str, Any]) -> str:
        dep = named(render(values), "StatefulSet", "-coordinator")
        return str(dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    base = checksum({})
    assert checksum({}) == base
    assert checksum({"coordinator": {"config": {"group.connect.session.timeout.ms": "50000"}}}) != base


def test_migrations_run_in_a_hook_job_before_the_servers_for_an_external_database() -> None:
    objs = render(values_of(CHART / "ci" / "external-db-values.yaml"))
    job = named(objs, "Job", "-migrate")
    ann = job["metadata"]["annotations"]
    assert ann["helm.sh/hook"] == "pre-install,pre-upgrade"
    secret = named(objs, "Secret", "-database")
    assert secret["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(ann["helm.sh/hook-weight"])
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["args"][0] == "migrate"
    args = named(objs, "StatefulSet", "-coordinator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-migrate" in args
    # The bundled database does not exist when pre-install hooks run: the server migrates itself.
    bundled = render({})
    assert not by_kind(bundled, "Job")
    assert (
        "--no-migrate"
        not in named(bundled, "StatefulSet", "-coordinator")["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def test_tls_and_acl_are_wired_with_spec_flag_names() -> None:
    objs = render(values_of(CHART / "ci" / "tls-values.yaml"))
    coord = named(objs, "StatefulSet", "-coordinator")["spec"]["template"]["spec"]
    [c] = coord["containers"]
    for flag in (
        "--tls-cert=/etc/connect/tls/tls.crt",
        "--tls-key=/etc/connect/tls/tls.key",
        "--tls-client-ca=/etc/connect/tls/ca.crt",
        "--health-listen=0.0.0.0:8480",
        "--acl-file=/etc/connect/acl/acl.yaml",
        "--assignor-tls-ca=/etc/connect/tls/ca.crt",
        "--assignor-tls-cert=/etc/connect/tls/tls.crt",
    ):
        assert flag in c["args"], flag
    assert c["readinessProbe"]["grpc"] == {"port": 8480}, "probes use the plaintext health port"
    assert {"name": "tls", "secret": {"secretName": "connect-coordinator-tls"}} in coord["volumes"]
    acl = yaml.safe_load(named(objs, "ConfigMap", "-acl")["data"]["acl.yaml"])
    assert acl["super_users"] == ["User:admin"] and acl["acls"][0]["operation"] == "Read"
    test_pod = named(objs, "Pod", "-test-health")
    assert all(ctr["args"][0].endswith(":8480") for ctr in test_pod["spec"]["containers"])
    # Off by default: no flag, no mount.
    default_args = named(render({}), "StatefulSet", "-coordinator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in default_args if a.startswith(("--tls", "--acl", "--health", "--assignor-tls"))]


BAD_VALUES = [
    ({"coordinator": {"replicas": 101}}, "replicas"),
    ({"coordinator": {"partitions": 0}}, "partitions"),
    ({"coordinator": {"grpcPort": 70000}}, "grpcPort"),
    ({"coordinator": {"logLevel": "LOUD"}}, "logLevel"),
    ({"coordinator": {"config": {"session.timeout.ms": "1"}}}, "session.timeout.ms"),
    ({"database": {"url": "mysql://x/y"}}, "url"),
    ({"metricsJob": {"schedule": "every hour"}}, "schedule"),
    ({"securityContext": {"allowPrivilegeEscalation": True}}, "allowPrivilegeEscalation"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
    ({"tls": {"healthPort": "eighty"}}, "healthPort"),
    ({"acl": {"rules": {"acls": [{"principal": "worker", "operation": "Read", "group": "g"}]}}}, "principal"),
    ({"assignor": {"autoscaling": {"targetCPUUtilizationPercentage": 0}}}, "targetCPUUtilizationPercentage"),
    ({"monitoring": {"serviceMonitor": {"interval": "often"}}}, "interval"),
    ({"unknownKey": 1}, "unknownKey"),
]


@pytest.mark.parametrize(("values", "field"), BAD_VALUES, ids=[f for _, f in BAD_VALUES])
def test_the_schema_rejects_bad_values_naming_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmError) as e:
        render(values)
    assert field in str(e.value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tls": {"enabled": True}}, "tls.secretName"),
        ({"database": {"url": "postgresql://a/b", "existingSecret": "s"}}, "not both"),
        ({"database": {"bundled": {"enabled": False}}}, "database.url or database.existingSecret"),
    ],
    ids=["tls-without-secret", "two-databases", "no-database"],
)
def test_inconsistent_values_fail_with_a_clear_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError) as e:
        render(values)
    assert message in str(e.value)


def test_checkov_finds_nothing_unexplained(tmp_path: Path) -> None:
    """Every skipped check is listed, with its reason, in helm/connect-group-coordinator/.checkov.yaml."""
    assert CHECKOV.exists(), "make setup installs checkov into .tools/checkov-venv"
    for path, name in zip(CASES, IDS, strict=True):
        docs = render(values_of(path))
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(docs))
    out = subprocess.run(
        [
            str(CHECKOV),
            "--quiet",
            "--compact",
            "--framework",
            "kubernetes",
            "--output",
            "json",
            "--config-file",
            str(CHART / ".checkov.yaml"),
            "--directory",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    reports = json.loads(out.stdout) if out.stdout.strip().startswith(("{", "[")) else None
    assert reports is not None, out.stdout[-2000:] + out.stderr[-2000:]
    reports = reports if isinstance(reports, list) else [reports]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}): {c['check_name']}"
        for r in reports
        for c in r["results"].get("failed_checks", [])
    ]
    passed = sum(r["summary"]["passed"] for r in reports)
    assert failed == [], "\n".join(failed)
    assert passed > 100, "checkov checked the rendered objects"


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    [rule] = by_kind(render({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    shutil.copy(CHART / "prometheus-tests" / "alerts_test.yaml", tmp_path)
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    tested = set(re.findall(r"alertname: (\w+)", (tmp_path / "alerts_test.yaml").read_text()))
    assert alerts == tested, "every alert has a promtool test"
    for cmd in (["check", "rules", "rules.yaml"], ["test", "rules", "alerts_test.yaml"]):
        out = subprocess.run(["promtool", *cmd], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


# ---- the dashboard against live /metrics -----------------------------------------------------------


def exported_names(exposition: str) -> set[str]:
    """Series names a /metrics exposition can produce, from its TYPE lines (also for labelled metrics
    that have no sample yet)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if not m:
            continue
        name, kind = m.groups()
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def dashboard_metric_names() -> set[str]:
    dash = json.loads((CHART / "dashboards" / "connect-group-coordinator.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return {n for e in exprs for n in re.findall(r"\b(connect_[a-z_]+)\b", e)}


def scrape(target: str) -> str:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def test_the_dashboard_uses_only_metrics_the_services_export(processes: Processes, tmp_path: Path) -> None:
    assignor = AssignorService().start()
    coordinator = CoordinatorProcess(
        f"sqlite:///{tmp_path / 'c.db'}", assignor_address=assignor.address, workdir=tmp_path
    ).start()
    try:
        client = Client(coordinator.address, "dash")
        client.put_connector("a", 2)
        worker_metrics = f"127.0.0.1:{free_port()}"
        worker = processes.start_worker(
            coordinator.address, "dash", name="worker", extra=["--metrics-listen", worker_metrics]
        )
        client.wait_for(lambda v: v["state"] == "Stable" and len(v["members"]) == 1)
        assert worker.alive()
        live = (
            exported_names(scrape(coordinator.metrics_address.removeprefix("http://").removesuffix("/metrics")))
            | exported_names(scrape(assignor.metrics_target))
            | exported_names(scrape(worker_metrics))
        )
        client.close()
    finally:
        coordinator.kill()
        assignor.kill()
    used = dashboard_metric_names()
    assert {n.split("_")[1] for n in used} == {"coordinator", "assignor", "worker"}
    assert used - live == set(), f"the dashboard refers to metrics nobody exports: {sorted(used - live)}"
    # It covers the KIP-848 / KIP-429 families SPEC §5 names.
    for family in (
        "connect_coordinator_connect_groups",
        "connect_coordinator_rebalances_total",
        "connect_coordinator_event_queue_size",
        "connect_coordinator_storage_commit_duration_seconds_bucket",
        "connect_coordinator_assignment_duration_seconds_bucket",
        "connect_worker_rebalance_latency_seconds_bucket",
        "connect_worker_last_rebalance_age_seconds",
    ):
        assert family in used, family


def test_the_grafana_configmap_carries_the_dashboard() -> None:
    dash = named(render(values_of(CHART / "ci" / "monitoring-values.yaml")), "ConfigMap", "-dashboard")
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dash["data"]["connect-group-coordinator.json"])["uid"] == "connect-group-coordinator"
