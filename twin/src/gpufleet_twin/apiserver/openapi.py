"""Discovery and OpenAPI documents generated from the registry.

What clients need from them:

- kubectl and client-go resolve ``kubectl get ds`` through discovery
  (``/api``, ``/apis``; kubectl 1.32 first asks for the aggregated form
  ``apidiscovery.k8s.io/v2`` and falls back to the per-group-version lists);
  ``kubectl drain`` finds the Eviction API through the ``pods/eviction``
  entry of ``/api/v1`` (its group and version fields).
- kubectl asks ``/openapi/v3/<group-version>`` whether a PATCH operation of
  the kind accepts the ``fieldValidation`` query parameter (server-side
  validation; otherwise it validates client-side against ``/openapi/v2``), and
  ``kubectl apply`` computes strategic merge patches from the schemas of the
  kind there (``x-kubernetes-patch-merge-key``/``-strategy``).

Schemas of built-in kinds are derived from the models of the ``kubernetes``
Python client when it is installed (they are generated from the upstream
OpenAPI document, so their structure is the real one); the merge keys and
strategies come from a table here, checked against the upstream Go types.
Without the client, built-in kinds get permissive schemas and kubectl falls
back to its compiled-in types for patches.  CRDs contribute their
``openAPIV3Schema``.  No field descriptions are served (``kubectl explain``
shows the structure only).

The same schemas drive what decoding into Go types does on a real server:
``prune_unknown_fields`` (unknown fields dropped, reported for
``fieldValidation``) and ``complete_required_fields`` (required fields present
with their zero values, which the strictly typed Python client insists on).
The last section reads the protobuf bodies that kubectl's typed clients send.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..machinery.registry import Registry, ResourceType

Obj = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META_REF = f"#/components/schemas/{META}.ObjectMeta"


@dataclass(frozen=True)
class SubresourceInfo:
    """How discovery describes a subresource: the kind it reads/writes and its verbs."""

    group: str | None  # None: the parent's group and version
    version: str | None
    kind: str | None  # None: the parent's kind
    verbs: tuple[str, ...]


SUBRESOURCES: Mapping[str, SubresourceInfo] = MappingProxyType(
    {
        "status": SubresourceInfo(None, None, None, ("get", "patch", "update")),
        "scale": SubresourceInfo("autoscaling", "v1", "Scale", ("get", "patch", "update")),
        "eviction": SubresourceInfo("policy", "v1", "Eviction", ("create",)),
        "log": SubresourceInfo("", "v1", "Pod", ("get",)),
        "binding": SubresourceInfo("", "v1", "Binding", ("create",)),
        "finalize": SubresourceInfo(None, None, None, ("update",)),
        "token": SubresourceInfo("authentication.k8s.io", "v1", "TokenRequest", ("create",)),
    }
)

# Merge keys and strategies of lists and structs that do not replace wholesale
# under strategic merge patch (the patchMergeKey/patchStrategy tags of the
# upstream Go types), by (client model, JSON field).
PATCH_DIRECTIVES: Mapping[tuple[str, str], tuple[str, str]] = MappingProxyType(
    {
        ("V1ObjectMeta", "finalizers"): ("", "merge"),
        ("V1ObjectMeta", "ownerReferences"): ("uid", "merge"),
        ("V1PodSpec", "containers"): ("name", "merge"),
        ("V1PodSpec", "initContainers"): ("name", "merge"),
        ("V1PodSpec", "ephemeralContainers"): ("name", "merge"),
        ("V1PodSpec", "volumes"): ("name", "merge,retainKeys"),
        ("V1PodSpec", "imagePullSecrets"): ("name", "merge"),
        ("V1PodSpec", "hostAliases"): ("ip", "merge"),
        ("V1PodSpec", "topologySpreadConstraints"): ("topologyKey", "merge"),
        ("V1PodSpec", "resourceClaims"): ("name", "merge,retainKeys"),
        ("V1PodSpec", "schedulingGates"): ("name", "merge"),
        ("V1Container", "ports"): ("containerPort", "merge"),
        ("V1Container", "env"): ("name", "merge"),
        ("V1Container", "volumeMounts"): ("mountPath", "merge"),
        ("V1Container", "volumeDevices"): ("devicePath", "merge"),
        ("V1EphemeralContainer", "ports"): ("containerPort", "merge"),
        ("V1EphemeralContainer", "env"): ("name", "merge"),
        ("V1EphemeralContainer", "volumeMounts"): ("mountPath", "merge"),
        ("V1EphemeralContainer", "volumeDevices"): ("devicePath", "merge"),
        ("V1PodStatus", "conditions"): ("type", "merge"),
        ("V1PodStatus", "podIPs"): ("ip", "merge"),
        ("V1PodStatus", "hostIPs"): ("ip", "merge"),
        ("V1NodeSpec", "podCIDRs"): ("", "merge"),
        ("V1NodeStatus", "conditions"): ("type", "merge"),
        ("V1NodeStatus", "addresses"): ("type", "merge"),
        ("V1NamespaceStatus", "conditions"): ("type", "merge"),
        ("V1ServiceSpec", "ports"): ("port", "merge"),
        ("V1ServiceAccount", "secrets"): ("name", "merge"),
        ("V1DeploymentSpec", "strategy"): ("", "retainKeys"),
        ("V1DeploymentStatus", "conditions"): ("type", "merge"),
        ("V1DaemonSetStatus", "conditions"): ("type", "merge"),
        ("V1ReplicaSetStatus", "conditions"): ("type", "merge"),
        ("V1StatefulSetStatus", "conditions"): ("type", "merge"),
        ("V1JobStatus", "conditions"): ("type", "merge"),
        ("V1PodDisruptionBudgetSpec", "selector"): ("", "replace"),
        ("V1PodDisruptionBudgetStatus", "conditions"): ("type", "merge"),
        ("V1ResourceClaimStatus", "reservedFor"): ("uid", "merge"),
    }
)

# Client model of a kind where it is not V<version><Kind>.
_MODEL_OF_KIND: Mapping[tuple[str, str, str], str] = MappingProxyType(
    {
        ("", "v1", "Event"): "CoreV1Event",
        ("events.k8s.io", "v1", "Event"): "EventsV1Event",
        # The client names it apart from core/v1 ResourceClaim (a container's resources.claims entry).
        ("resource.k8s.io", "v1", "ResourceClaim"): "ResourceV1ResourceClaim",
    }
)

# Where the schemas of a group live in the upstream document's naming.
_GROUP_PACKAGES: Mapping[str, str] = MappingProxyType(
    {
        "": "io.k8s.api.core",
        "apps": "io.k8s.api.apps",
        "batch": "io.k8s.api.batch",
        "policy": "io.k8s.api.policy",
        "autoscaling": "io.k8s.api.autoscaling",
        "events.k8s.io": "io.k8s.api.events",
        "coordination.k8s.io": "io.k8s.api.coordination",
        "resource.k8s.io": "io.k8s.api.resource",
        "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
        "rbac.authorization.k8s.io": "io.k8s.api.rbac",
    }
)
_PREFIX_PACKAGES: Mapping[str, str] = MappingProxyType(
    {
        "Core": "io.k8s.api.core",
        "Events": "io.k8s.api.events",
        "Apiextensions": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
        "Storage": "io.k8s.api.storage",
        "Rbac": "io.k8s.api.rbac",
        "Discovery": "io.k8s.api.discovery",
        "Resource": "io.k8s.api.resource",
        "Authentication": "io.k8s.api.authentication",
    }
)
_META_MODELS = frozenset(
    {
        "V1ObjectMeta",
        "V1ListMeta",
        "V1LabelSelector",
        "V1LabelSelectorRequirement",
        "V1OwnerReference",
        "V1ManagedFieldsEntry",
        "V1Status",
        "V1StatusDetails",
        "V1StatusCause",
        "V1Condition",
        "V1DeleteOptions",
        "V1Preconditions",
    }
)
# Core types reached first through other groups' kinds (Deployment -> PodTemplateSpec).
_CORE_MODELS = frozenset({"V1PodTemplateSpec", "V1NodeSelector", "V1NodeSelectorTerm", "V1NodeSelectorRequirement"})
_MODEL_NAME = re.compile(r"^(?P<prefix>[A-Z][a-z]+)?V(?P<version>\d+(?:alpha\d+|beta\d+)?)(?P<name>[A-Z]\w*)$")
_LIST_TYPE = re.compile(r"^List\[(?P<item>.+)\]$")
_DICT_TYPE = re.compile(r"^Dict\[str, (?P<value>.+)\]$")
_PRIMITIVES: Mapping[str, Obj] = MappingProxyType(
    {
        "str": {"type": "string"},
        "int": {"type": "integer", "format": "int64"},
        "float": {"type": "number", "format": "double"},
        "bool": {"type": "boolean"},
        "datetime": {"type": "string", "format": "date-time"},
        "date": {"type": "string", "format": "date"},
        # IntOrString, Quantity-like and RawExtension fields: anything goes.
        "object": {"x-kubernetes-preserve-unknown-fields": True},
    }
)

# Without the kubernetes client: enough of ObjectMeta for patches and pruning.
_FALLBACK_OBJECT_META: Obj = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"},
        "ownerReferences": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "x-kubernetes-patch-merge-key": "uid",
            "x-kubernetes-patch-strategy": "merge",
        },
        "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "selfLink": {"type": "string"},
    },
}

# Query parameters of write operations (the names kubectl and client-go send).
_WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")
_LIST_PARAMETERS = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
)
_PATCH_CONTENT_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)


def gv_path(group: str, version: str) -> str:
    """``api/v1`` or ``apis/<group>/<version>``, as the OpenAPI v3 index names group versions."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


def component_name(rtype: ResourceType) -> str:
    """Schema name of a kind: the upstream package for built-ins, reversed group for the rest."""
    package = _GROUP_PACKAGES.get(rtype.group)
    if package is not None:
        return f"{package}.{rtype.version}.{rtype.kind}"
    reversed_group = ".".join(reversed(rtype.group.split(".")))
    return f"{reversed_group}.{rtype.version}.{rtype.kind}"


# -- discovery ---------------------------------------------------------------------------------------


# kube-apiserver's order of its built-in groups; other groups (CRDs) follow by name.
_BUILTIN_GROUP_ORDER = (
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "policy",
    "rbac.authorization.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
    "resource.k8s.io",
)


def _sorted_groups(registry: Registry) -> list[tuple[str, list[str]]]:
    """Named groups as a real server lists them: built-in groups first, then the rest by name.

    The order matters: kubectl resolves a resource name found in several groups
    to the first group listing it.
    """

    def rank(group: str) -> tuple[int, str]:
        if group in _BUILTIN_GROUP_ORDER:
            return (_BUILTIN_GROUP_ORDER.index(group), "")
        return (len(_BUILTIN_GROUP_ORDER), group)

    groups = [(group, versions) for group, versions in registry.group_versions().items() if group]
    return sorted(groups, key=lambda entry: rank(entry[0]))


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _api_group(group: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> Obj:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_api_group(group, versions) for group, versions in _sorted_groups(registry)],
    }


def api_group(registry: Registry, group: str) -> Obj | None:
    versions = registry.group_versions().get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(group, versions)}


def _storage_version_hash(rtype: ResourceType) -> str:
    digest = hashlib.sha256(f"{rtype.group}/{rtype.version}/{rtype.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    """The legacy ``APIResourceList`` of one group version."""
    rtypes = registry.in_group_version(group, version)
    if not rtypes:
        return None
    resources: list[Obj] = []
    for rtype in rtypes:
        entry: Obj = {
            "name": rtype.plural,
            "singularName": rtype.singular or rtype.kind.lower(),
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": list(rtype.verbs),
            "storageVersionHash": _storage_version_hash(rtype),
        }
        if rtype.short_names:
            entry["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            entry["categories"] = list(rtype.categories)
        resources.append(entry)
        for sub in sorted(rtype.subresources):
            info = SUBRESOURCES.get(sub)
            if info is None:
                continue
            sub_entry: Obj = {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": info.kind or rtype.kind,
                "verbs": list(info.verbs),
            }
            if info.group is not None:
                # client-go reads these to find e.g. the Eviction API version (policy/v1).
                sub_entry["group"] = info.group
                sub_entry["version"] = info.version
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def aggregated_discovery(registry: Registry, *, core: bool) -> Obj:
    """``apidiscovery.k8s.io/v2`` APIGroupDiscoveryList of ``/api`` (core) or ``/apis``."""
    groups = [("", registry.group_versions().get("", []))] if core else _sorted_groups(registry)
    items: list[Obj] = []
    for group, versions in groups:
        version_entries = []
        for version in versions:
            resources = []
            for rtype in registry.in_group_version(group, version):
                entry: Obj = {
                    "resource": rtype.plural,
                    "responseKind": {"group": rtype.group, "version": rtype.version, "kind": rtype.kind},
                    "scope": "Namespaced" if rtype.namespaced else "Cluster",
                    "singularResource": rtype.singular or rtype.kind.lower(),
                    "verbs": list(rtype.verbs),
                }
                if rtype.short_names:
                    entry["shortNames"] = list(rtype.short_names)
                if rtype.categories:
                    entry["categories"] = list(rtype.categories)
                subresources = []
                for sub in sorted(rtype.subresources):
                    info = SUBRESOURCES.get(sub)
                    if info is None:
                        continue
                    subresources.append(
                        {
                            "subresource": sub,
                            "responseKind": {
                                "group": rtype.group if info.group is None else info.group,
                                "version": rtype.version if info.version is None else info.version,
                                "kind": info.kind or rtype.kind,
                            },
                            "verbs": list(info.verbs),
                        }
                    )
                if subresources:
                    entry["subresources"] = subresources
                resources.append(entry)
            version_entries.append({"version": version, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": group} if group else {}, "versions": version_entries})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


# -- schemas of built-in kinds ------------------------------------------------------------------------


def _client_models() -> Any | None:
    try:
        from kubernetes.client import models  # noqa: PLC0415 - optional, and slow to import
    except ImportError:
        return None
    return models


@dataclass(frozen=True)
class _ModelInfo:
    """What the converter reads of one client model: its attributes' types and JSON names, its required fields."""

    openapi_types: dict[str, str]
    attribute_map: dict[str, str]
    required: list[str]


class _ModelTable:
    """The kubernetes client's models as the converter reads them, kept in a file between twin processes.

    Loading the models is most of a twin's start-up (each is a pydantic class built on first use, about 0.6 s of
    CPU for the kinds the twin serves), and the suite starts hundreds of twins. What the converter reads of them
    does not change for one client release, so it is read once into a JSON file named after the client's version
    and this module's own text (``$GPUFLEET_TWIN_CACHE_DIR``, else ``~/.cache/gpufleet-twin``); a model the file
    lacks is read from the client and the file rewritten. A file that cannot be read or written is ignored.
    """

    def __init__(self, path: pathlib.Path | None) -> None:
        self._path = path
        self._entries: dict[str, _ModelInfo | None] | None = None
        self._models: Any | None = None
        self._changed = False

    @classmethod
    def for_this_client(cls) -> _ModelTable | None:
        """The table of the installed client, or None without one."""
        try:
            version = importlib.metadata.version("kubernetes")
        except importlib.metadata.PackageNotFoundError:
            return None
        digest = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]
        folder = os.environ.get("GPUFLEET_TWIN_CACHE_DIR") or os.path.join(
            os.path.expanduser("~"), ".cache", "gpufleet-twin"
        )
        return cls(pathlib.Path(folder) / f"client-models-{version}-{digest}.json")

    def has(self, name: str) -> bool:
        return self._entry(name) is not None

    def info(self, name: str) -> _ModelInfo:
        entry = self._entry(name)
        if entry is None:
            raise KeyError(name)
        return entry

    def save(self) -> None:
        """Write the file when models were read from the client since it was loaded."""
        if not self._changed or self._path is None or self._entries is None:
            return
        entries = {name: None if e is None else e.__dict__ for name, e in sorted(self._entries.items())}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            partial = self._path.with_name(f"{self._path.name}.{os.getpid()}")
            partial.write_text(json.dumps(entries))
            partial.replace(self._path)
            self._changed = False
        except OSError:
            pass

    def _entry(self, name: str) -> _ModelInfo | None:
        entries = self._load()
        if name not in entries:
            entries[name] = self._read_model(name)
            self._changed = True
        return entries[name]

    def _load(self) -> dict[str, _ModelInfo | None]:
        if self._entries is None:
            self._entries = {}
            try:
                stored = json.loads(self._path.read_text()) if self._path is not None else {}
                self._entries = {name: None if entry is None else _ModelInfo(**entry) for name, entry in stored.items()}
            except (OSError, ValueError, TypeError):
                pass
        return self._entries

    def _read_model(self, name: str) -> _ModelInfo | None:
        if self._models is None:
            self._models = _client_models()
        model = getattr(self._models, name, None) if self._models is not None else None
        if model is None or not hasattr(model, "openapi_types"):
            return None
        return _ModelInfo(dict(model.openapi_types), dict(model.attribute_map), _required_fields(model))


@functools.cache
def _model_table() -> _ModelTable | None:
    """One table per process (the twin's tests build many twins in one)."""
    return _ModelTable.for_this_client()


@dataclass
class _ModelConverter:
    """Turns kubernetes client models into OpenAPI v3 component schemas."""

    models: _ModelTable
    components: dict[str, Obj] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    def component_for_model(self, model_name: str, package_hint: str) -> str:
        """Component name of a model (converted on first use), e.g. io.k8s.api.core.v1.PodSpec."""
        if model_name in self.names:
            return self.names[model_name]
        parsed = _MODEL_NAME.match(model_name)
        if parsed is None:
            raise KeyError(model_name)
        version, short = f"v{parsed.group('version')}", parsed.group("name")
        if model_name in _META_MODELS:
            package = "io.k8s.apimachinery.pkg.apis.meta"
        elif parsed.group("prefix"):
            package = _PREFIX_PACKAGES.get(parsed.group("prefix"), f"io.k8s.api.{parsed.group('prefix').lower()}")
        elif model_name in _CORE_MODELS:
            package = _GROUP_PACKAGES[""]
        else:
            package = package_hint
        name = f"{package}.{version}.{short}"
        self.names[model_name] = name
        model = self.models.info(model_name)
        schema: Obj = {"type": "object", "properties": {}}
        self.components[name] = schema  # before recursing: models refer to themselves (JSONSchemaProps)
        if model.required:
            schema["required"] = list(model.required)
        for attribute, type_name in model.openapi_types.items():
            json_name = model.attribute_map[attribute]
            prop = self.schema_for_type(type_name, package)
            merge_key, strategy = PATCH_DIRECTIVES.get((model_name, json_name), ("", ""))
            if strategy:
                if "$ref" in prop:
                    prop = {"allOf": [prop]}
                if merge_key:
                    prop["x-kubernetes-patch-merge-key"] = merge_key
                prop["x-kubernetes-patch-strategy"] = strategy
            schema["properties"][json_name] = prop
        return name

    def schema_for_type(self, type_name: str, package_hint: str) -> Obj:
        primitive = _PRIMITIVES.get(type_name)
        if primitive is not None:
            return dict(primitive)
        listed = _LIST_TYPE.match(type_name)
        if listed:
            return {"type": "array", "items": self.schema_for_type(listed.group("item"), package_hint)}
        mapped = _DICT_TYPE.match(type_name)
        if mapped:
            return {"type": "object", "additionalProperties": self.schema_for_type(mapped.group("value"), package_hint)}
        if self.models.has(type_name):
            return {"$ref": f"#/components/schemas/{self.component_for_model(type_name, package_hint)}"}
        return {"x-kubernetes-preserve-unknown-fields": True}


def _required_fields(model: Any) -> list[str]:
    """JSON names of the fields the upstream schema marks required (pydantic models of the client)."""
    fields = getattr(model, "model_fields", None) or {}
    required = []
    for attribute, json_name in model.attribute_map.items():
        # Python keywords are renamed in the models: exec -> var_exec, schema -> var_schema.
        info = fields.get(attribute) or fields.get("var_" + attribute.lstrip("_"))
        if info is not None and callable(getattr(info, "is_required", None)) and info.is_required():
            required.append(json_name)
    return sorted(required)


def _gvk(group: str, version: str, kind: str) -> Obj:
    return {"group": group, "version": version, "kind": kind}


class SchemaCatalog:
    """Component schemas of every kind in the registry, rebuilt when the registry changes."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._fingerprint: tuple[Any, ...] | None = None
        self._components: dict[str, Obj] = {}
        self._roots: dict[tuple[str, str], str] = {}
        self._gv_documents: dict[str, tuple[Obj, str]] = {}
        self._v2_document: Obj | None = None
        # Built-in kinds do not change, so their conversion is kept across rebuilds.
        self._converter: _ModelConverter | None = None

    # -- public ----------------------------------------------------------------------------
    def root_schema(self, rtype: ResourceType) -> tuple[Obj, Mapping[str, Obj]] | None:
        """(schema of the kind, all component schemas) for validating and pruning objects."""
        self._refresh()
        name = self._roots.get((rtype.group, rtype.plural))
        if name is None:
            return None
        return self._components[name], self._components

    def has_builtin_schema(self, rtype: ResourceType) -> bool:
        self._refresh()
        return rtype.schema is None and (rtype.group, rtype.plural) in self._roots and self._converter is not None

    def v3_index(self) -> Obj:
        self._refresh()
        paths = {}
        for gv in sorted(self._gv_paths()):
            _, digest = self.v3_document(gv) or ({}, "")
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
        return {"paths": paths}

    def v3_document(self, path: str) -> tuple[Obj, str] | None:
        """(document, hash) of ``api/v1`` or ``apis/<group>/<version>``."""
        self._refresh()
        cached = self._gv_documents.get(path)
        if cached is not None:
            return cached
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        rtypes = self.registry.in_group_version(group, version)
        if not rtypes:
            return None
        document = self._build_v3_document(rtypes)
        digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()
        self._gv_documents[path] = (document, digest)
        return document, digest

    def v2_document(self) -> Obj:
        """A Swagger 2.0 document of every kind (for clients that read /openapi/v2 as JSON)."""
        self._refresh()
        if self._v2_document is not None:
            return self._v2_document
        paths: Obj = {}
        referenced: dict[str, Obj] = {}
        for rtype in self.registry.all():
            root = self._roots[(rtype.group, rtype.plural)]
            paths.update(_paths_for(rtype, root, v2=True))
            self._collect(root, referenced)
            self._collect(f"{root}List", referenced)
        for extra in _SHARED_COMPONENTS:
            self._collect(extra, referenced)
        document = {
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "definitions": dict(sorted(referenced.items())),
        }
        # Version 2 keeps its schemas under definitions.
        self._v2_document = json.loads(json.dumps(document).replace("#/components/schemas/", "#/definitions/"))
        return self._v2_document

    # -- internals --------------------------------------------------------------------------
    def _refresh(self) -> None:
        rtypes = self.registry.all()
        fingerprint = tuple((rtype, id(rtype.schema)) for rtype in rtypes)
        if fingerprint == self._fingerprint:
            return
        self._fingerprint = fingerprint
        self._gv_documents = {}
        self._v2_document = None
        self._components = {}
        self._roots = {}
        converter = self._builtin_converter()
        if converter is not None:
            self._components.update(converter.components)
        else:
            self._components[f"{META}.ObjectMeta"] = _FALLBACK_OBJECT_META
        self._components.update(_shared_components())
        for rtype in rtypes:
            self._roots[(rtype.group, rtype.plural)] = self._add_root(rtype, converter)
        if converter is not None:
            # Converting new built-ins may have added components.
            for name, schema in converter.components.items():
                self._components.setdefault(name, schema)
            converter.models.save()

    def _builtin_converter(self) -> _ModelConverter | None:
        models = _model_table()
        if models is None:
            return None
        if self._converter is None:
            self._converter = _ModelConverter(models)
            for model in ("V1ObjectMeta", "V1ListMeta", "V1Status", "V1DeleteOptions"):
                self._converter.component_for_model(model, f"{META}")
        return self._converter

    def _add_root(self, rtype: ResourceType, converter: _ModelConverter | None) -> str:
        name = component_name(rtype)
        model_name = _MODEL_OF_KIND.get((rtype.group, rtype.version, rtype.kind))
        if model_name is None:
            model_name = f"V{rtype.version[1:]}{rtype.kind}"
        if rtype.schema is None and converter is not None and converter.models.has(model_name):
            package = _GROUP_PACKAGES.get(rtype.group, f"io.k8s.api.{rtype.group.split('.')[0]}")
            converted = converter.component_for_model(model_name, package)
            schema = dict(converter.components[converted])
            name = converted
        elif rtype.schema is not None:
            schema = _custom_resource_schema(rtype.schema)
        else:
            schema = {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"$ref": OBJECT_META_REF},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
                "x-kubernetes-preserve-unknown-fields": True,
            }
        schema["x-kubernetes-group-version-kind"] = [_gvk(rtype.group, rtype.version, rtype.kind)]
        self._components[name] = schema
        self._components[f"{name}List"] = {
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": f"#/components/schemas/{META}.ListMeta"},
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{name}"}},
            },
            "x-kubernetes-group-version-kind": [_gvk(rtype.group, rtype.version, rtype.list_kind)],
        }
        return name

    def _gv_paths(self) -> set[str]:
        return {gv_path(rtype.group, rtype.version) for rtype in self.registry.all()}

    def _collect(self, name: str, into: dict[str, Obj]) -> None:
        """Add ``name`` and every schema it references to ``into``."""
        pending = [name]
        while pending:
            current = pending.pop()
            if current in into or current not in self._components:
                continue
            schema = self._components[current]
            into[current] = schema
            for ref in _REF.findall(json.dumps(schema)):
                if ref not in into:
                    pending.append(ref)

    def _build_v3_document(self, rtypes: list[ResourceType]) -> Obj:
        paths: Obj = {}
        schemas: dict[str, Obj] = {}
        for rtype in rtypes:
            root = self._roots[(rtype.group, rtype.plural)]
            paths.update(_paths_for(rtype, root, v2=False))
            self._collect(root, schemas)
            self._collect(f"{root}List", schemas)
        for extra in _SHARED_COMPONENTS:
            self._collect(extra, schemas)
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "components": {
                "schemas": dict(sorted(schemas.items())),
                "securitySchemes": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
            },
            "security": [{"BearerToken": []}],
        }


_REF = re.compile(r'"\$ref": "#/components/schemas/([^"]+)"')

_SHARED_COMPONENTS = (
    f"{META}.Status",
    f"{META}.DeleteOptions",
    f"{META}.Patch",
    "io.k8s.api.autoscaling.v1.Scale",
    "io.k8s.api.policy.v1.Eviction",
)


def _shared_components() -> dict[str, Obj]:
    """Schemas of the request and response bodies the paths refer to that are not kinds."""
    scale_spec = {"type": "object", "properties": {"replicas": {"type": "integer", "format": "int32"}}}
    return {
        f"{META}.Patch": {"type": "object", "description": "A patch of one of the supported patch types."},
        f"{META}.Status": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": f"#/components/schemas/{META}.ListMeta"},
                "status": {"type": "string"},
                "message": {"type": "string"},
                "reason": {"type": "string"},
                "code": {"type": "integer", "format": "int32"},
                "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
            "x-kubernetes-group-version-kind": [_gvk("", "v1", "Status")],
        },
        f"{META}.DeleteOptions": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "dryRun": {"type": "array", "items": {"type": "string"}},
                "gracePeriodSeconds": {"type": "integer", "format": "int64"},
                "preconditions": {
                    "type": "object",
                    "properties": {"resourceVersion": {"type": "string"}, "uid": {"type": "string"}},
                },
                "propagationPolicy": {"type": "string"},
                "orphanDependents": {"type": "boolean"},
            },
        },
        f"{META}.ListMeta": {
            "type": "object",
            "properties": {
                "continue": {"type": "string"},
                "remainingItemCount": {"type": "integer", "format": "int64"},
                "resourceVersion": {"type": "string"},
                "selfLink": {"type": "string"},
            },
        },
        "io.k8s.api.autoscaling.v1.Scale": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": OBJECT_META_REF},
                "spec": scale_spec,
                "status": {
                    "type": "object",
                    "properties": {
                        "replicas": {"type": "integer", "format": "int32"},
                        "selector": {"type": "string"},
                    },
                },
            },
            "x-kubernetes-group-version-kind": [_gvk("autoscaling", "v1", "Scale")],
        },
        "io.k8s.api.policy.v1.Eviction": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": OBJECT_META_REF},
                "deleteOptions": {"$ref": f"#/components/schemas/{META}.DeleteOptions"},
            },
            "x-kubernetes-group-version-kind": [_gvk("policy", "v1", "Eviction")],
        },
    }


def _custom_resource_schema(schema: Obj) -> Obj:
    """A CRD's openAPIV3Schema as its served OpenAPI shows it: metadata is ObjectMeta."""
    converted = json.loads(json.dumps(schema))
    converted.setdefault("type", "object")
    properties = converted.setdefault("properties", {})
    properties["metadata"] = {"allOf": [{"$ref": OBJECT_META_REF}]}
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    return converted


def _parameter(name: str, where: str = "query", *, type_: str = "string", required: bool = False, v2: bool) -> Obj:
    parameter: Obj = {"name": name, "in": where}
    if required or where == "path":
        parameter["required"] = True
    if v2:
        parameter["type"] = type_
    else:
        parameter["schema"] = {"type": type_, "uniqueItems": True}
    return parameter


def _query_type(name: str) -> str:
    if name in ("allowWatchBookmarks", "watch", "sendInitialEvents", "force"):
        return "boolean"
    if name in ("limit", "timeoutSeconds", "gracePeriodSeconds"):
        return "integer"
    return "string"


def _operation(
    *,
    action: str,
    operation_id: str,
    gvk: Obj,
    response_ref: str,
    query: tuple[str, ...] = (),
    body_ref: str | None = None,
    body_types: tuple[str, ...] = ("application/json",),
    v2: bool,
) -> Obj:
    operation: Obj = {
        "operationId": operation_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [_parameter(name, type_=_query_type(name), v2=v2) for name in query],
    }
    ref = f"#/components/schemas/{response_ref}"
    if v2:
        operation["produces"] = ["application/json", "application/yaml"]
        if body_ref is not None:
            operation["consumes"] = list(body_types)
            operation["parameters"].append(
                {"name": "body", "in": "body", "required": True, "schema": {"$ref": f"#/components/schemas/{body_ref}"}}
            )
        operation["responses"] = {"200": {"description": "OK", "schema": {"$ref": ref}}}
    else:
        if body_ref is not None:
            operation["requestBody"] = {
                "content": {t: {"schema": {"$ref": f"#/components/schemas/{body_ref}"}} for t in body_types},
                "required": True,
            }
        operation["responses"] = {
            "200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}},
            "401": {"description": "Unauthorized"},
        }
    return operation


def _paths_for(rtype: ResourceType, root: str, *, v2: bool) -> Obj:
    """Path items of one kind: collection, item, subresources, and watch paths."""
    gvk = _gvk(rtype.group, rtype.version, rtype.kind)
    prefix = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
    scope = "/namespaces/{namespace}" if rtype.namespaced else ""
    collection = f"{prefix}{scope}/{rtype.plural}"
    item = f"{collection}/{{name}}"
    op_suffix = f"{rtype.group.split('.')[0].capitalize()}{rtype.version.capitalize()}{rtype.kind}"
    ns_param = [_parameter("namespace", "path", v2=v2)] if rtype.namespaced else []
    pretty = [_parameter("pretty", v2=v2)]
    patch_types = _PATCH_CONTENT_TYPES if rtype.schema is None else _PATCH_CONTENT_TYPES[:3]
    list_ref = f"{root}List"
    if tuple(rtype.verbs) == ("create",):
        # Reviews: a collection path that only takes POST.
        post = _operation(
            action="post",
            operation_id=f"create{op_suffix}",
            gvk=gvk,
            response_ref=root,
            query=_WRITE_PARAMETERS,
            body_ref=root,
            v2=v2,
        )
        return {collection: {"post": post, "parameters": ns_param + pretty}}
    paths: Obj = {
        collection: {
            "get": _operation(
                action="list",
                operation_id=f"list{op_suffix}",
                gvk=gvk,
                response_ref=list_ref,
                query=_LIST_PARAMETERS,
                v2=v2,
            ),
            "post": _operation(
                action="post",
                operation_id=f"create{op_suffix}",
                gvk=gvk,
                response_ref=root,
                query=_WRITE_PARAMETERS,
                body_ref=root,
                v2=v2,
            ),
            "delete": _operation(
                action="deletecollection",
                operation_id=f"deletecollection{op_suffix}",
                gvk=gvk,
                response_ref=f"{META}.Status",
                query=("dryRun", "gracePeriodSeconds", "propagationPolicy", *_LIST_PARAMETERS),
                body_ref=f"{META}.DeleteOptions",
                v2=v2,
            ),
            "parameters": ns_param + pretty,
        },
        item: {
            "get": _operation(action="get", operation_id=f"read{op_suffix}", gvk=gvk, response_ref=root, v2=v2),
            "put": _operation(
                action="put",
                operation_id=f"replace{op_suffix}",
                gvk=gvk,
                response_ref=root,
                query=_WRITE_PARAMETERS,
                body_ref=root,
                v2=v2,
            ),
            "patch": _operation(
                action="patch",
                operation_id=f"patch{op_suffix}",
                gvk=gvk,
                response_ref=root,
                query=(*_WRITE_PARAMETERS, "force"),
                body_ref=f"{META}.Patch",
                body_types=patch_types,
                v2=v2,
            ),
            "delete": _operation(
                action="delete",
                operation_id=f"delete{op_suffix}",
                gvk=gvk,
                response_ref=f"{META}.Status",
                query=("dryRun", "gracePeriodSeconds", "propagationPolicy"),
                body_ref=f"{META}.DeleteOptions",
                v2=v2,
            ),
            "parameters": [_parameter("name", "path", v2=v2), *ns_param, *pretty],
        },
    }
    if rtype.namespaced:
        paths[f"{prefix}/{rtype.plural}"] = {
            "get": _operation(
                action="list",
                operation_id=f"list{op_suffix}ForAllNamespaces",
                gvk=gvk,
                response_ref=list_ref,
                query=_LIST_PARAMETERS,
                v2=v2,
            ),
            "parameters": pretty,
        }
    paths[f"{prefix}/watch{scope}/{rtype.plural}"] = {
        "get": _operation(
            action="watchlist",
            operation_id=f"watch{op_suffix}List",
            gvk=gvk,
            response_ref=f"{META}.Status",
            query=_LIST_PARAMETERS,
            v2=v2,
        ),
        "parameters": ns_param + pretty,
    }
    item_params = [_parameter("name", "path", v2=v2), *ns_param, *pretty]
    for sub in sorted(rtype.subresources):
        sub_path = f"{item}/{sub}"
        if sub == "status":
            paths[sub_path] = {
                "get": _operation(
                    action="get", operation_id=f"read{op_suffix}Status", gvk=gvk, response_ref=root, v2=v2
                ),
                "put": _operation(
                    action="put",
                    operation_id=f"replace{op_suffix}Status",
                    gvk=gvk,
                    response_ref=root,
                    query=_WRITE_PARAMETERS,
                    body_ref=root,
                    v2=v2,
                ),
                "patch": _operation(
                    action="patch",
                    operation_id=f"patch{op_suffix}Status",
                    gvk=gvk,
                    response_ref=root,
                    query=(*_WRITE_PARAMETERS, "force"),
                    body_ref=f"{META}.Patch",
                    body_types=patch_types,
                    v2=v2,
                ),
                "parameters": item_params,
            }
        elif sub == "scale":
            scale_gvk = _gvk("autoscaling", "v1", "Scale")
            scale = "io.k8s.api.autoscaling.v1.Scale"
            paths[sub_path] = {
                "get": _operation(
                    action="get", operation_id=f"read{op_suffix}Scale", gvk=scale_gvk, response_ref=scale, v2=v2
                ),
                "put": _operation(
                    action="put",
                    operation_id=f"replace{op_suffix}Scale",
                    gvk=scale_gvk,
                    response_ref=scale,
                    query=_WRITE_PARAMETERS,
                    body_ref=scale,
                    v2=v2,
                ),
                "patch": _operation(
                    action="patch",
                    operation_id=f"patch{op_suffix}Scale",
                    gvk=scale_gvk,
                    response_ref=scale,
                    query=(*_WRITE_PARAMETERS, "force"),
                    body_ref=f"{META}.Patch",
                    body_types=patch_types,
                    v2=v2,
                ),
                "parameters": item_params,
            }
        elif sub == "eviction":
            eviction = "io.k8s.api.policy.v1.Eviction"
            paths[sub_path] = {
                "post": _operation(
                    action="post",
                    operation_id=f"create{op_suffix}Eviction",
                    gvk=_gvk("policy", "v1", "Eviction"),
                    response_ref=eviction,
                    query=_WRITE_PARAMETERS,
                    body_ref=eviction,
                    v2=v2,
                ),
                "parameters": item_params,
            }
        elif sub == "log":
            paths[sub_path] = {
                "get": {
                    "operationId": f"read{op_suffix}Log",
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": [
                        _parameter(name, type_=_query_type(name), v2=v2)
                        for name in ("container", "follow", "previous", "sinceSeconds", "tailLines", "timestamps")
                    ],
                    "responses": {"200": {"description": "OK"}},
                },
                "parameters": item_params,
            }
    return paths


# -- unknown fields -------------------------------------------------------------------------------------


def prune_unknown_fields(
    value: Any, schema: Obj, components: Mapping[str, Obj], path: str = ""
) -> tuple[Any, list[str]]:
    """``value`` without the fields ``schema`` does not know, and the paths of those fields.

    Follows structural-schema pruning: properties are kept, additionalProperties
    describe map values, ``x-kubernetes-preserve-unknown-fields`` keeps the
    rest, and an object schema with neither keeps nothing else.
    """
    schema = _resolve(schema, components)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        if not properties and additional is None and (preserve or "type" not in schema):
            return value, []
        kept: Obj = {}
        unknown: list[str] = []
        for key, item in value.items():
            child_path = f"{path}.{key}" if path else key
            if key in properties:
                kept[key], found = prune_unknown_fields(item, properties[key], components, child_path)
                unknown.extend(found)
            elif isinstance(additional, dict):
                kept[key], found = prune_unknown_fields(item, additional, components, child_path)
                unknown.extend(found)
            elif additional is True or preserve or (embedded and key in ("apiVersion", "kind", "metadata")):
                kept[key] = item
            else:
                unknown.append(child_path)
        return kept, unknown
    if isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return value, []
        pruned_items, unknown = [], []
        for index, item in enumerate(value):
            pruned, found = prune_unknown_fields(item, items, components, f"{path}[{index}]")
            pruned_items.append(pruned)
            unknown.extend(found)
        return pruned_items, unknown
    return value, []


def _resolve(schema: Obj, components: Mapping[str, Obj]) -> Obj:
    for _ in range(16):  # refs to refs are short; bound it against cycles
        if "allOf" in schema and len(schema["allOf"]) == 1 and not schema.get("properties"):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            schema = {**schema["allOf"][0], **merged}
            continue
        ref = schema.get("$ref")
        if not ref:
            return schema
        schema = components.get(ref.removeprefix("#/components/schemas/"), {})
    return schema


def complete_required_fields(value: Any, schema: Obj, components: Mapping[str, Obj], *, now: str) -> None:
    """Fill, in place, required fields that are missing with the zero values Go would serialize.

    A real server decodes objects into Go structs and encodes them back, so a
    required string it stores comes back as ``""`` rather than absent; clients
    generated from the OpenAPI document (the ``kubernetes`` Python client)
    refuse objects without them.  Numbers sent for string fields become
    strings, as quantities do on a real server.  Required timestamps get
    ``now``.
    """
    schema = _resolve(schema, components)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if value.get(key) is None and key in properties:
                zero = _zero_value(properties[key], components, now=now)
                if zero is not None:
                    value[key] = zero
        for key, item in list(value.items()):
            child = properties.get(key)
            if child is None:
                additional = schema.get("additionalProperties")
                child = additional if isinstance(additional, dict) else None
            if child is None:
                continue
            resolved = _resolve(child, components)
            if resolved.get("type") == "string" and isinstance(item, (int, float)) and not isinstance(item, bool):
                value[key] = str(item)
            elif isinstance(item, (dict, list)):
                complete_required_fields(item, resolved, components, now=now)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            resolved = _resolve(items, components)
            for index, item in enumerate(value):
                if resolved.get("type") == "string" and isinstance(item, (int, float)) and not isinstance(item, bool):
                    value[index] = str(item)
                elif isinstance(item, (dict, list)):
                    complete_required_fields(item, resolved, components, now=now)


def _zero_value(schema: Obj, components: Mapping[str, Obj], *, now: str) -> Any:
    resolved = _resolve(schema, components)
    kind = resolved.get("type")
    if kind == "string":
        return now if resolved.get("format") == "date-time" else ""
    if kind in {"integer", "number"}:
        return 0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        zero: Obj = {}
        complete_required_fields(zero, resolved, components, now=now)
        return zero
    return None  # int-or-string and free-form fields have no single zero value


# -- protobuf request bodies ---------------------------------------------------------------------------
#
# Typed client-go clients send built-in objects as protobuf (kubectl create
# namespace|configmap|secret|serviceaccount|pdb, kubectl auth can-i|whoami).
# The twin reads the few messages those commands send; the field numbers are
# those of the upstream generated.proto files.  Responses stay JSON, which
# those clients accept as well.

PROTOBUF_TYPE = "application/vnd.kubernetes.protobuf"
_PROTOBUF_MAGIC = b"k8s\x00"


@dataclass(frozen=True)
class ProtoField:
    name: str
    kind: str  # string, bytes, bool, int, map<string,string>, map<string,bytes>, Time, IntOrString, or a message
    repeated: bool = False


def _fields(*entries: tuple[int, str, str] | tuple[int, str, str, bool]) -> Mapping[int, ProtoField]:
    return MappingProxyType({entry[0]: ProtoField(entry[1], entry[2], *entry[3:]) for entry in entries})


_PROTO_MESSAGES: Mapping[str, Mapping[int, ProtoField]] = MappingProxyType(
    {
        "ObjectMeta": _fields(
            (1, "name", "string"),
            (2, "generateName", "string"),
            (3, "namespace", "string"),
            (5, "uid", "string"),
            (6, "resourceVersion", "string"),
            (7, "generation", "int"),
            (8, "creationTimestamp", "Time"),
            (9, "deletionTimestamp", "Time"),
            (10, "deletionGracePeriodSeconds", "int"),
            (11, "labels", "map<string,string>"),
            (12, "annotations", "map<string,string>"),
            (13, "ownerReferences", "OwnerReference", True),
            (14, "finalizers", "string", True),
        ),
        "OwnerReference": _fields(
            (1, "kind", "string"),
            (3, "name", "string"),
            (4, "uid", "string"),
            (5, "apiVersion", "string"),
            (6, "controller", "bool"),
            (7, "blockOwnerDeletion", "bool"),
        ),
        "LabelSelector": _fields(
            (1, "matchLabels", "map<string,string>"), (2, "matchExpressions", "Requirement", True)
        ),
        "Requirement": _fields((1, "key", "string"), (2, "operator", "string"), (3, "values", "string", True)),
        "SelectorAttributes": _fields((1, "rawSelector", "string"), (2, "requirements", "Requirement", True)),
        "Preconditions": _fields((1, "uid", "string"), (2, "resourceVersion", "string")),
        "DeleteOptions": _fields(
            (1, "gracePeriodSeconds", "int"),
            (2, "preconditions", "Preconditions"),
            (3, "orphanDependents", "bool"),
            (4, "propagationPolicy", "string"),
            (5, "dryRun", "string", True),
        ),
        "ObjectReference": _fields(
            (1, "kind", "string"),
            (2, "namespace", "string"),
            (3, "name", "string"),
            (4, "uid", "string"),
            (5, "apiVersion", "string"),
            (6, "resourceVersion", "string"),
            (7, "fieldPath", "string"),
        ),
        "LocalObjectReference": _fields((1, "name", "string")),
        "Namespace": _fields((1, "metadata", "ObjectMeta"), (2, "spec", "NamespaceSpec")),
        "NamespaceSpec": _fields((1, "finalizers", "string", True)),
        "ConfigMap": _fields(
            (1, "metadata", "ObjectMeta"),
            (2, "data", "map<string,string>"),
            (3, "binaryData", "map<string,bytes>"),
            (4, "immutable", "bool"),
        ),
        "Secret": _fields(
            (1, "metadata", "ObjectMeta"),
            (2, "data", "map<string,bytes>"),
            (3, "type", "string"),
            (4, "stringData", "map<string,string>"),
            (5, "immutable", "bool"),
        ),
        "ServiceAccount": _fields(
            (1, "metadata", "ObjectMeta"),
            (2, "secrets", "ObjectReference", True),
            (3, "imagePullSecrets", "LocalObjectReference", True),
            (4, "automountServiceAccountToken", "bool"),
        ),
        "PodDisruptionBudget": _fields((1, "metadata", "ObjectMeta"), (2, "spec", "PodDisruptionBudgetSpec")),
        "PodDisruptionBudgetSpec": _fields(
            (1, "minAvailable", "IntOrString"),
            (2, "selector", "LabelSelector"),
            (3, "maxUnavailable", "IntOrString"),
            (4, "unhealthyPodEvictionPolicy", "string"),
        ),
        "Eviction": _fields((1, "metadata", "ObjectMeta"), (2, "deleteOptions", "DeleteOptions")),
        # k8s.io/api/rbac/v1 generated.proto (kubectl create role|clusterrole|rolebinding|clusterrolebinding).
        "Role": _fields((1, "metadata", "ObjectMeta"), (2, "rules", "PolicyRule", True)),
        "ClusterRole": _fields(
            (1, "metadata", "ObjectMeta"), (2, "rules", "PolicyRule", True), (3, "aggregationRule", "AggregationRule")
        ),
        "AggregationRule": _fields((1, "clusterRoleSelectors", "LabelSelector", True)),
        "PolicyRule": _fields(
            (1, "verbs", "string", True),
            (2, "apiGroups", "string", True),
            (3, "resources", "string", True),
            (4, "resourceNames", "string", True),
            (5, "nonResourceURLs", "string", True),
        ),
        "RoleBinding": _fields(
            (1, "metadata", "ObjectMeta"), (2, "subjects", "Subject", True), (3, "roleRef", "RoleRef")
        ),
        "Subject": _fields(
            (1, "kind", "string"), (2, "apiGroup", "string"), (3, "name", "string"), (4, "namespace", "string")
        ),
        "RoleRef": _fields((1, "apiGroup", "string"), (2, "kind", "string"), (3, "name", "string")),
        "SelfSubjectAccessReview": _fields((1, "metadata", "ObjectMeta"), (2, "spec", "SelfSubjectAccessReviewSpec")),
        "SelfSubjectAccessReviewSpec": _fields(
            (1, "resourceAttributes", "ResourceAttributes"), (2, "nonResourceAttributes", "NonResourceAttributes")
        ),
        "ResourceAttributes": _fields(
            (1, "namespace", "string"),
            (2, "verb", "string"),
            (3, "group", "string"),
            (4, "version", "string"),
            (5, "resource", "string"),
            (6, "subresource", "string"),
            (7, "name", "string"),
            (8, "fieldSelector", "SelectorAttributes"),
            (9, "labelSelector", "SelectorAttributes"),
        ),
        "NonResourceAttributes": _fields((1, "path", "string"), (2, "verb", "string")),
        "SelfSubjectRulesReview": _fields((1, "metadata", "ObjectMeta"), (2, "spec", "SelfSubjectRulesReviewSpec")),
        "SelfSubjectRulesReviewSpec": _fields((1, "namespace", "string")),
        "SelfSubjectReview": _fields((1, "metadata", "ObjectMeta")),
        "TokenRequest": _fields((1, "metadata", "ObjectMeta"), (2, "spec", "TokenRequestSpec")),
        "TokenRequestSpec": _fields(
            (1, "audiences", "string", True),
            (3, "boundObjectRef", "BoundObjectReference"),
            (4, "expirationSeconds", "int"),
        ),
        "BoundObjectReference": _fields(
            (1, "kind", "string"), (2, "apiVersion", "string"), (3, "name", "string"), (4, "uid", "string")
        ),
    }
)

# (apiVersion, kind) -> message; the kinds kubectl's typed clients send.
_PROTO_KINDS: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        ("v1", "Namespace"): "Namespace",
        ("v1", "ConfigMap"): "ConfigMap",
        ("v1", "Secret"): "Secret",
        ("v1", "ServiceAccount"): "ServiceAccount",
        ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
        ("policy/v1", "Eviction"): "Eviction",
        ("rbac.authorization.k8s.io/v1", "Role"): "Role",
        ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
        ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "RoleBinding",
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "SelfSubjectRulesReview",
        ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
        ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest",
    }
)


def decode_protobuf_object(body: bytes) -> Obj:
    """A Kubernetes protobuf request body (``k8s\\0`` + runtime.Unknown) as the JSON object it encodes.

    Raises ValueError for malformed bodies and kinds the twin does not read.
    """
    if not body.startswith(_PROTOBUF_MAGIC):
        raise ValueError("the body does not start with the Kubernetes protobuf magic number")
    envelope = dict(_wire_fields(body[len(_PROTOBUF_MAGIC) :]))
    type_meta = dict(_wire_fields(_raw(envelope.get(1, b""))))
    api_version = _text(type_meta.get(1, b""))
    kind = _text(type_meta.get(2, b""))
    message = _PROTO_KINDS.get((api_version, kind))
    if message is None:
        raise ValueError(f"protobuf bodies of {kind} ({api_version}) are not supported by the twin; send JSON")
    obj = _decode_message(_raw(envelope.get(2, b"")), message)
    return {"apiVersion": api_version, "kind": kind, **obj}


def _decode_message(data: bytes, message: str) -> Obj:
    fields = _PROTO_MESSAGES[message]
    result: Obj = {}
    for number, value in _wire_fields(data):
        spec = fields.get(number)
        if spec is None:
            continue  # fields the twin does not read
        decoded = _decode_value(value, spec.kind)
        if spec.kind.startswith("map<"):
            key, item = decoded
            result.setdefault(spec.name, {})[key] = item
        elif spec.repeated:
            result.setdefault(spec.name, []).append(decoded)
        else:
            result[spec.name] = decoded
    return result


def _decode_value(value: int | bytes, kind: str) -> Any:
    if kind == "string":
        return _text(value)
    if kind == "bool":
        return bool(value)
    if kind == "int":
        number = int(value) if isinstance(value, int) else 0
        return number - (1 << 64) if number >= 1 << 63 else number
    if kind == "bytes":
        return base64.b64encode(_raw(value)).decode()
    if kind in ("map<string,string>", "map<string,bytes>"):
        entry = dict(_wire_fields(_raw(value)))
        item = _raw(entry.get(2, b""))
        return _text(entry.get(1, b"")), (_text(item) if kind.endswith("string>") else base64.b64encode(item).decode())
    if kind == "Time":
        seconds = int(dict(_wire_fields(_raw(value))).get(1, 0))
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "IntOrString":
        parts = dict(_wire_fields(_raw(value)))
        return _text(parts.get(3, b"")) if parts.get(1) == 1 else int(parts.get(2, 0))
    return _decode_message(_raw(value), kind)


def _raw(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("malformed protobuf: expected a length-delimited field")
    return value


def _text(value: int | bytes) -> str:
    return _raw(value).decode()


def _wire_fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of one protobuf message: varints as int, length-delimited as bytes."""
    fields: list[tuple[int, int | bytes]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(data, position)
            fields.append((number, value))
        elif wire_type == 2:
            length, position = _varint(data, position)
            if position + length > len(data):
                raise ValueError("malformed protobuf: truncated field")
            fields.append((number, data[position : position + length]))
            position += length
        elif wire_type == 1:
            fields.append((number, int.from_bytes(data[position : position + 8], "little")))
            position += 8
        elif wire_type == 5:
            fields.append((number, int.from_bytes(data[position : position + 4], "little")))
            position += 4
        else:
            raise ValueError(f"malformed protobuf: wire type {wire_type}")
    return fields


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("malformed protobuf: bad varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
