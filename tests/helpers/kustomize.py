"""A reader of the kustomizations in deploy/kubernetes, for the tests: kustomize
itself is a Go program with no package on PyPI or in Debian's bookworm, so a CI
machine need not have it. This reads the few features those files use, and
refuses any other key, so a kustomization that grows past it fails here rather
than being half read:
- `resources`: files of YAML documents, or directories holding a kustomization;
- `namespace`: set on every namespaced resource (not on the cluster-scoped
  kinds CLUSTER_SCOPED lists), as kustomize does;
- `patches`: inline JSON 6902 patches (`add`, `replace`, `remove`) for the
  resources their `target` (kind, name) selects.
Where kubectl is installed, tests/test_deploy_kubernetes.py checks that
`kubectl kustomize` renders the same resources.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KEYS = {"apiVersion", "kind", "resources", "namespace", "patches"}
CLUSTER_SCOPED = {"Namespace", "StorageClass", "PersistentVolume", "ClusterRole",
                  "ClusterRoleBinding", "CustomResourceDefinition", "RuntimeClass"}

Resource = dict[str, Any]


class KustomizeError(ValueError):
    pass


def render(directory: Path) -> list[Resource]:
    """The resources the kustomization in `directory` makes."""
    path = directory / "kustomization.yaml"
    spec = yaml.safe_load(path.read_text())
    unknown = set(spec) - KEYS
    if unknown:
        raise KustomizeError(f"{path}: keys this reader does not know: {sorted(unknown)}")
    if spec.get("kind") != "Kustomization":
        raise KustomizeError(f"{path}: not a Kustomization")
    resources: list[Resource] = []
    for entry in spec.get("resources", []):
        place = (directory / entry).resolve()
        if place.is_dir():
            resources += render(place)
        else:
            resources += [doc for doc in yaml.safe_load_all(place.read_text()) if doc]
    for patch in spec.get("patches", []):
        resources = [_patched(resource, patch, path) for resource in resources]
    namespace = spec.get("namespace")
    if namespace is not None:
        for resource in resources:
            if resource["kind"] not in CLUSTER_SCOPED:
                resource.setdefault("metadata", {})["namespace"] = namespace
    return resources


def _patched(resource: Resource, patch: dict[str, Any], source: Path) -> Resource:
    if set(patch) - {"target", "patch"} or set(patch["target"]) - {"kind", "name"}:
        raise KustomizeError(f"{source}: only an inline patch with a kind/name target is read")
    target = patch["target"]
    if resource["kind"] != target.get("kind", resource["kind"]) or (
            resource["metadata"]["name"] != target.get("name", resource["metadata"]["name"])):
        return resource
    patched = copy.deepcopy(resource)
    for operation in yaml.safe_load(patch["patch"]):
        _apply(patched, operation, source)
    return patched


def _apply(document: Any, operation: dict[str, Any], source: Path) -> None:
    """One JSON 6902 operation (RFC 6902: add, replace, remove; `~1` is `/`)."""
    *parents, last = [part.replace("~1", "/").replace("~0", "~")
                      for part in operation["path"].split("/")[1:]]
    node = document
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    op = operation["op"]
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if op == "add":
            node.insert(index, operation["value"])
        elif op == "replace":
            node[index] = operation["value"]
        elif op == "remove":
            del node[index]
        else:
            raise KustomizeError(f"{source}: the op {op!r} is not read")
        return
    if op in ("add", "replace"):
        if op == "replace" and last not in node:
            raise KustomizeError(f"{source}: nothing to replace at {operation['path']}")
        node[last] = operation["value"]
    elif op == "remove":
        del node[last]
    else:
        raise KustomizeError(f"{source}: the op {op!r} is not read")
