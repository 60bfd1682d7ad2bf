"""deploy/kubernetes, offline: every kustomization rendered (tests/helpers/kustomize.py;
against `kubectl kustomize` where kubectl is installed), every resource against
the Kubernetes schemas (kubernetes-validate, strict: no unknown field), the
SandboxTemplate against the fields of agent-sandbox's SandboxTemplate CRD
(extensions.agents.x-k8s.io/v1beta1) that it uses, every pod at the Restricted
Pod Security level, and corral's container as corral reads it: its command line
parsed by corral's own parser, probes on the port it serves, a grace period
longer than its drain, the metrics port annotated or scraped."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from corral.faces.cli import build_parser
from corral.faces.http_server import parse_address
from tests.helpers.kustomize import render
from tests.helpers.mcp_helpers import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
ROOTS = sorted(path.parent for path in KUBERNETES.rglob("kustomization.yaml"))
VERSION = "1.33"  # the oldest Kubernetes these manifests are for (native sidecars, PSA)
Resource = dict[str, Any]

# agent-sandbox's SandboxTemplate CRD, v1beta1 (served, the stored version; v1alpha1
# is deprecated): the fields of spec, their enums, and where it embeds Kubernetes'
# own types (podTemplate.spec a PodSpec, networkPolicy's rules NetworkPolicy rules,
# volumeClaimTemplates PersistentVolumeClaims).
SANDBOX_API = "extensions.agents.x-k8s.io/v1beta1"
SANDBOX_SPEC = {"podTemplate", "networkPolicy", "networkPolicyManagement",
                "envVarsInjectionPolicy", "volumeClaimTemplates",
                "volumeClaimTemplatesPolicy", "service"}
SANDBOX_ENUMS = {"networkPolicyManagement": {"Managed", "Unmanaged"},
                 "envVarsInjectionPolicy": {"Allowed", "Overrides", "Disallowed"},
                 "volumeClaimTemplatesPolicy": {"Disallowed", "Allowed", "Overrides"}}
# Pod Security Standards, Restricted: the volume types it allows
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def rendered() -> dict[str, list[Resource]]:
    return {str(root.relative_to(KUBERNETES)): render(root) for root in ROOTS}


def test_there_are_both_shapes_and_an_overlay() -> None:
    assert set(rendered()) == {"base/sidecar", "base/node-pool", "overlays/sidecar-kata"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl to compare with")
@pytest.mark.parametrize("root", ROOTS, ids=lambda root: str(root.relative_to(KUBERNETES)))
def test_the_reader_renders_what_kubectl_kustomize_does(root: Path) -> None:
    done = subprocess.run(["kubectl", "kustomize", str(root)], capture_output=True,
                          text=True, check=True, timeout=60)
    theirs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]

    def key(resource: Resource) -> tuple[str, str]:
        return resource["kind"], resource["metadata"]["name"]
    assert sorted(theirs, key=key) == sorted(render(root), key=key)


# -- the checks ------------------------------------------------------------------------


class Invalid(AssertionError):
    pass


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Invalid(what)


def schema_valid(resource: Resource) -> None:
    try:
        kubernetes_validate.validate(resource, VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise Invalid(f"{resource['kind']} {resource['metadata'].get('name')}: "
                      f"{exc.message} at {list(exc.path)}") from None


def check_sandbox_template(template: Resource) -> None:
    expect(template["apiVersion"] == SANDBOX_API, f"apiVersion {template['apiVersion']}")
    expect(set(template) <= {"apiVersion", "kind", "metadata", "spec"}, f"keys {set(template)}")
    spec = template["spec"]
    expect(set(spec) <= SANDBOX_SPEC, f"unknown spec fields {set(spec) - SANDBOX_SPEC}")
    expect("podTemplate" in spec, "spec.podTemplate is required")
    for field, allowed in SANDBOX_ENUMS.items():
        expect(spec.get(field, next(iter(allowed))) in allowed, f"spec.{field}")
    expect(isinstance(spec.get("service", False), bool), "spec.service is a boolean")
    pod = spec["podTemplate"]
    expect(set(pod) <= {"metadata", "spec"} and "spec" in pod, "podTemplate: metadata, spec")
    metadata = pod.get("metadata", {})
    expect(set(metadata) <= {"labels", "annotations"}, f"podTemplate.metadata {set(metadata)}")
    for values in metadata.values():
        expect(all(isinstance(value, str) for value in values.values()), "strings only")
    schema_valid({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template"},
                  "spec": pod["spec"]})
    policy = spec.get("networkPolicy", {})
    expect(set(policy) <= {"ingress", "egress"}, f"networkPolicy {set(policy)}")
    schema_valid({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                  "metadata": {"name": "template"}, "spec": {"podSelector": {}, **policy}})
    mounted = {mount["name"] for container in pod["spec"]["containers"]
               for mount in container.get("volumeMounts", [])}
    declared = {volume["name"] for volume in pod["spec"].get("volumes", [])}
    for claim in spec.get("volumeClaimTemplates", []):
        expect(set(claim) <= {"metadata", "spec"} and "spec" in claim, "a claim: metadata, spec")
        expect(set(claim["metadata"]) <= {"name", "labels", "annotations"}, "claim metadata")
        schema_valid({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim})
        # the controller adds the claim's volume under its name
        name = claim["metadata"]["name"]
        expect(name in mounted and name not in declared, f"the claim {name} is not mounted")


def pod_specs(resource: Resource) -> list[dict[str, Any]]:
    if resource["kind"] == "SandboxTemplate":
        return [resource["spec"]["podTemplate"]["spec"]]
    if resource["kind"] in ("DaemonSet", "Deployment", "StatefulSet"):
        return [resource["spec"]["template"]["spec"]]
    return []


def check_restricted(spec: dict[str, Any]) -> None:
    """The Restricted Pod Security Standard, as far as these pods use its fields."""
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        expect(not spec.get(host), host)
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        expect(kinds <= RESTRICTED_VOLUMES, f"volume {volume['name']}: {kinds}")
    pod = spec.get("securityContext", {})
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        own = container.get("securityContext", {})
        name = container["name"]
        expect(own.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, f"{name}: runAsNonRoot")
        expect(own.get("runAsUser", pod.get("runAsUser")) != 0, f"{name}: runAsUser 0")
        expect(own.get("allowPrivilegeEscalation") is False, f"{name}: privilege escalation")
        expect(not own.get("privileged"), f"{name}: privileged")
        capabilities = own.get("capabilities", {})
        expect("ALL" in capabilities.get("drop", []), f"{name}: capabilities not dropped")
        expect(set(capabilities.get("add", [])) <= {"NET_BIND_SERVICE"}, f"{name}: adds")
        profile = own.get("seccompProfile", pod.get("seccompProfile", {}))
        expect(profile.get("type") in ("RuntimeDefault", "Localhost"), f"{name}: seccomp")
        expect(container.get("ports", []) == [] or all(
            "hostPort" not in port for port in container["ports"]), f"{name}: hostPort")


def corral_container(spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = next(c for c in spec["containers"] if c["name"] == "corral")
    return container


def check_corral(spec: dict[str, Any]) -> Any:
    """corral's container as corral reads it; returns its parsed command line."""
    container = corral_container(spec)
    args = build_parser().parse_args(container["args"])
    expect(args.command == "serve" and args.http is not None and args.tenants, "serve --http")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    port = parse_address(args.http)[1]
    expect(ports["mcp"] == port, "the mcp port is --http's")
    expect(ports["metrics"] == parse_address(args.metrics)[1], "the metrics port")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                        ("startupProbe", "/readyz")):
        get = container[probe]["httpGet"]
        expect(get["path"] == path and get["port"] in ("mcp", port), f"{probe} on {path}")
    expect(args.drain_timeout is not None, "a --drain-timeout the grace period can exceed")
    expect(spec["terminationGracePeriodSeconds"] > args.drain_delay + args.drain_timeout,
           "the grace period outlasts the drain")
    expect(container["securityContext"].get("readOnlyRootFilesystem") is True, "read-only /")
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    tenants_dir = str(Path(args.tenants).parent)
    expect("secret" in volumes[mounts[tenants_dir]], "the tenants file comes from a Secret")
    expect("emptyDir" in volumes[mounts["/tmp"]], "/tmp: the readiness probe's scratch")
    state = next((env["value"] for env in container.get("env", [])
                  if env["name"] == "XDG_STATE_HOME"), "/var/lib/corral/state")
    expect(any(state.startswith(path) for path in mounts), "the history store is mounted")
    return args


def check(resources: list[Resource]) -> None:
    for resource in resources:
        if resource["kind"] == "SandboxTemplate":
            check_sandbox_template(resource)
        elif resource["kind"] != "PodMonitor":
            schema_valid(resource)
        for spec in pod_specs(resource):
            check_restricted(spec)
            check_corral(spec)


@pytest.mark.parametrize("root", ROOTS, ids=lambda root: str(root.relative_to(KUBERNETES)))
def test_every_manifest_validates(root: Path) -> None:
    check(render(root))


# -- each shape ------------------------------------------------------------------------


def test_the_sidecar_shares_the_workspace_and_a_token_with_the_agent() -> None:
    template = render(KUBERNETES / "base" / "sidecar")[0]
    spec = template["spec"]["podTemplate"]["spec"]
    args = check_corral(spec)
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    corral = corral_container(spec)
    workspace = {m["name"] for m in agent["volumeMounts"]} & {
        m["name"] for m in corral["volumeMounts"]}
    assert workspace == {"workspace"}
    env = {item["name"]: item for item in agent["env"]}
    port = parse_address(args.http)[1]
    assert env["CORRAL_URL"]["value"] == f"http://127.0.0.1:{port}/mcp"
    secret = env["CORRAL_TOKEN"]["valueFrom"]["secretKeyRef"]["name"]
    tenants = next(v for v in spec["volumes"] if v["name"] == "tenants")
    assert tenants["secret"]["secretName"] == secret
    annotations = template["spec"]["podTemplate"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(parse_address(args.metrics)[1])
    ingress = template["spec"]["networkPolicy"]["ingress"]
    assert [port["port"] for rule in ingress for port in rule["ports"]] == [
        parse_address(args.metrics)[1]]  # nothing but the scraper gets in


def test_the_kata_overlay_runs_the_sidecar_in_a_micro_vm() -> None:
    template = render(KUBERNETES / "overlays" / "sidecar-kata")[0]
    assert template["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "kata"


def test_the_node_pool_holds_together() -> None:
    resources = {r["kind"]: r for r in render(KUBERNETES / "base" / "node-pool")}
    assert set(resources) == {"Namespace", "StorageClass", "PersistentVolume", "DaemonSet",
                              "NetworkPolicy", "PodMonitor"}
    namespace = resources["Namespace"]["metadata"]
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    daemonset = resources["DaemonSet"]
    assert daemonset["metadata"]["namespace"] == namespace["name"]
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["securityContext"]["seccompProfile"] == {
        "type": "Localhost", "localhostProfile": "corral/seccomp.json"}
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for p in corral_container(spec)["ports"]}
    # the local volumes: a claim per pod of the class the node's PV is of
    claim = next(v for v in spec["volumes"] if v["name"] == "workspaces")
    storage_class = resources["StorageClass"]["metadata"]["name"]
    assert claim["ephemeral"]["volumeClaimTemplate"]["spec"]["storageClassName"] == storage_class
    volume = resources["PersistentVolume"]["spec"]
    assert volume["storageClassName"] == storage_class and "local" in volume
    assert volume["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert resources["StorageClass"]["volumeBindingMode"] == "WaitForFirstConsumer"
    policy = resources["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == labels and policy["egress"] == []
    assert sorted(p["port"] for rule in policy["ingress"] for p in rule["ports"]) == sorted(
        ports.values())
    monitor = resources["PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"] == labels
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]


# -- the checks catch what they are for ------------------------------------------------


def _sidecar() -> Resource:
    return copy.deepcopy(render(KUBERNETES / "base" / "sidecar")[0])


def _forged(change: str) -> Resource:
    template = _sidecar()
    spec = template["spec"]["podTemplate"]["spec"]
    corral = corral_container(spec)
    if change == "group":
        template["apiVersion"] = "agents.x-k8s.io/v1alpha1"
    elif change == "unknown field":
        template["spec"]["podTemplateSpec"] = {}
    elif change == "enum":
        template["spec"]["networkPolicyManagement"] = "Sometimes"
    elif change == "pod field":
        corral["readinessProbes"] = corral.pop("readinessProbe")
    elif change == "root":
        corral["securityContext"]["runAsUser"] = 0
    elif change == "escalation":
        del corral["securityContext"]["allowPrivilegeEscalation"]
    elif change == "unconfined":
        spec["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
    elif change == "short grace":
        spec["terminationGracePeriodSeconds"] = 30
    elif change == "probe port":
        corral["readinessProbe"]["httpGet"]["port"] = 8080
    elif change == "bad flag":
        corral["args"] = [*corral["args"], "--drain-delay", "soon"]
    elif change == "unmounted claim":
        template["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "data"
    return template


@pytest.mark.parametrize("change", [
    "group", "unknown field", "enum", "pod field", "root", "escalation", "unconfined",
    "short grace", "probe port", "bad flag", "unmounted claim"])
def test_a_forged_manifest_is_refused(change: str) -> None:
    check([_sidecar()])  # as written: valid
    with pytest.raises((Invalid, SystemExit)):
        check([_forged(change)])


# -- what docs/deployment.md shows of them ---------------------------------------------


def _sidecar_section() -> str:
    page = (REPO / "docs" / "deployment.md").read_text()
    return page.split("### The sidecar")[1].split("\n### ")[0]


def test_the_docs_sidecar_secret_is_what_corral_and_the_agent_read(tmp_path: Path) -> None:
    """The shell lines of the sidecar section make a tenants file corral loads, whose
    digest is the token's; the Secret they create holds the keys the template reads."""
    from corral.faces.tenants import load_tenants, token_digest

    section = _sidecar_section()
    toml = section.split("```toml\n")[1].split("```")[0]
    shown = tmp_path / "shown.toml"
    shown.write_text(toml.replace('"..."', f'"{"0" * 64}"'))
    assert [t.workspace for t in load_tenants(shown)] == ["/workspace"]
    script = section.split("```sh\n")[1].split("```")[0]
    making, creating = script.split("kubectl create", 1)
    done = subprocess.run(["bash", "-euc", making + 'printf %s "$TOKEN" > token'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (tenant,) = load_tenants(tmp_path / "tenants.toml")
    assert tenant.workspace == "/workspace"
    assert tenant.token_sha256 == token_digest((tmp_path / "token").read_text())
    template = render(KUBERNETES / "base" / "sidecar")[0]["spec"]["podTemplate"]["spec"]
    keys = {item["key"] for volume in template["volumes"] if "secret" in volume
            for item in volume["secret"].get("items", [])}
    agent = next(c for c in template["containers"] if c["name"] == "agent")
    keys |= {env["valueFrom"]["secretKeyRef"]["key"] for env in agent["env"] if "valueFrom" in env}
    command = "kubectl create" + creating.split("\n")[0] + "\n" + creating.split("\n")[1]
    assert "--from-literal=token=" in command and "--from-file=tenants.toml" in command
    assert keys == {"token", "tenants.toml"}
    if shutil.which("kubectl") is not None:
        done = subprocess.run(
            ["bash", "-euc", f'TOKEN=$(cat token)\n{command.rstrip()} --dry-run=client -o yaml'],
            cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert set(yaml.safe_load(done.stdout)["data"]) == keys
