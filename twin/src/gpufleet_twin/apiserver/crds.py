"""CustomResourceDefinitions: loading and installing them, their admission, and the kinds they register live."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..machinery import crd_schema, errors
from ..machinery.registry import Registry, ResourceType
from ..machinery.store import Obj, Store, WatchEvent
from .cluster import Twin

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")


def load_crd_manifests(directory: Path) -> list[Obj]:
    """Every CustomResourceDefinition in the YAML files of ``directory`` (multi-document files and
    ``kubectl get crd -o yaml`` Lists too), sorted by file name."""
    found: list[Obj] = []
    for path in sorted(directory.iterdir()):
        if path.suffix.lower() not in (".yaml", ".yml", ".json") or not path.is_file():
            continue
        # libyaml's loader when present: the upstream CRDs are large (seconds with the pure-Python one).
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for document in yaml.load_all(path.read_text(), Loader=loader):
            if not isinstance(document, dict):
                continue
            candidates = document.get("items") if document.get("kind", "").endswith("List") else [document]
            found.extend(
                item
                for item in candidates or []
                if isinstance(item, dict) and item.get("kind") == "CustomResourceDefinition"
            )
    return found


def install_crds(twin: Twin, crds: Iterable[Obj]) -> list[str]:
    """Create each CRD, or replace the one of the same name (``--crds`` replaces the twin's own)."""
    crd_type = twin.registry.get(*CRD_KEY)
    assert crd_type is not None, "install_api_machinery first"
    names = []
    for manifest in crds:
        crd = _strip_server_fields(manifest)
        name = crd["metadata"]["name"]
        existing = twin.store.try_get(crd_type, None, name)
        if existing is None:
            twin.store.create(crd_type, crd)
        else:
            crd["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            twin.store.update(crd_type, crd)
        names.append(name)
    return names


def own_crds_directory() -> Path:
    """The twin's own minimal CRDs (ClusterPolicy, NVIDIADriver), used without ``--crds``."""
    return Path(__file__).resolve().parent.parent / "crds"


def _strip_server_fields(manifest: Obj) -> Obj:
    crd = copy.deepcopy(manifest)
    meta = crd.setdefault("metadata", {})
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink"):
        meta.pop(key, None)
    crd.pop("status", None)
    return crd


def admit_crd_object(operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Validate a CustomResourceDefinition and give it the status the apiextensions controllers write."""
    if rtype.key != CRD_KEY:
        return
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    name = obj["metadata"].get("name", "")
    causes = []
    # apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go wording.
    missing = [
        path
        for path, value in (("spec.group", spec.get("group")), ("spec.names.plural", names.get("plural")))
        if not value
    ]
    if not names.get("kind"):
        missing.append("spec.names.kind")
    for path in missing:
        causes.append({"reason": "FieldValueRequired", "field": path, "message": "Required value"})
    if not missing and name != f"{names['plural']}.{spec['group']}":
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "metadata.name",
                "message": f'Invalid value: {json.dumps(name)}: must be spec.names.plural+"."+spec.group',
            }
        )
    versions = spec.get("versions") or []
    if not versions:
        causes.append({"reason": "FieldValueRequired", "field": "spec.versions", "message": "Required value"})
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "spec.versions",
                "message": f"Invalid value: {json.dumps(versions, separators=(',', ':'))}: "
                "must have exactly one version marked as storage version",
            }
        )
    if causes:
        raise errors.invalid(rtype.kind, name, causes, rtype.group)
    storage = next(v["name"] for v in versions if v.get("storage"))
    previous = (old or {}).get("status") or {}
    stored = list(previous.get("storedVersions") or [])
    if storage not in stored:
        stored.append(storage)
    accepted = dict(names)
    accepted.setdefault("singular", names["kind"].lower())
    accepted.setdefault("listKind", f"{names['kind']}List")
    now = obj["metadata"].get("creationTimestamp") or ""
    conditions = []
    for condition_type, reason, message in (
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ):
        prior = next((c for c in previous.get("conditions") or () if c.get("type") == condition_type), None)
        conditions.append(
            {
                "type": condition_type,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": (prior or {}).get("lastTransitionTime") or now,
            }
        )
    spec_names = spec.setdefault("names", names)
    spec_names.setdefault("singular", accepted["singular"])
    spec_names.setdefault("listKind", accepted["listKind"])
    obj["status"] = {"acceptedNames": accepted, "conditions": conditions, "storedVersions": stored}


@dataclass
class CustomResourceRegistrar:
    """Store listener: a CRD written registers its kind (storage version); deleted, it goes with its objects."""

    registry: Registry
    store: Store
    served: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __call__(self, event: WatchEvent) -> None:
        if event.rtype.key != CRD_KEY:
            return
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            key = self.served.pop(name, None)
            if key is not None:
                rtype = self.registry.get(*key)
                if rtype is not None:
                    self._purge(rtype)
                self.registry.remove(*key)
            return
        rtypes = crd_schema.resource_types_from_crd(event.obj)
        if not rtypes:
            return
        previous = self.served.get(name)
        if previous is not None and previous != rtypes[0].key:
            self.registry.remove(*previous)
        self.registry.add(rtypes[0])
        self.served[name] = rtypes[0].key

    def _purge(self, rtype: ResourceType) -> None:
        for obj in self.store.list(rtype):
            meta = obj["metadata"]
            self.store.delete(rtype, meta.get("namespace"), meta["name"], immediate=True)
