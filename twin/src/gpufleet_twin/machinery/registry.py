"""The kinds the twin serves: built-in types and CustomResourceDefinitions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get`` table output (as a CRD's additionalPrinterColumns)."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0
    format: str = ""


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # Subresources served: "status", "scale", "eviction", "log", "binding".
    subresources: frozenset[str] = frozenset()
    printer_columns: tuple[PrinterColumn, ...] = ()
    # Structural openAPIV3Schema of a CRD version (validation and pruning);
    # None for built-in kinds.
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # Verbs as discovery lists them.
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> tuple[str, str]:
        """Identity inside the store: (group, plural)."""
        return (self.group, self.plural)

    @property
    def resource_name(self) -> str:
        """``plural.group`` as error messages and RBAC name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def base_path(self, namespace: str | None = None) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"


class Registry:
    """Every kind the server knows, looked up by (group, plural) or by kind."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], ResourceType] = {}

    def add(self, rtype: ResourceType) -> ResourceType:
        self._by_key[rtype.key] = rtype
        return rtype

    def remove(self, group: str, plural: str) -> None:
        self._by_key.pop((group, plural), None)

    def get(self, group: str, plural: str) -> ResourceType | None:
        return self._by_key.get((group, plural))

    def by_kind(self, kind: str, group: str | None = None) -> ResourceType:
        for rtype in self._by_key.values():
            if rtype.kind == kind and (group is None or rtype.group == group):
                return rtype
        raise KeyError(f"no resource of kind {kind!r} (group {group!r})")

    def all(self) -> list[ResourceType]:
        return list(self._by_key.values())

    def group_versions(self) -> dict[str, list[str]]:
        """{group: [versions]} for discovery ("" is the core group)."""
        versions: dict[str, list[str]] = {}
        for rtype in self._by_key.values():
            listed = versions.setdefault(rtype.group, [])
            if rtype.version not in listed:
                listed.append(rtype.version)
        return versions

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [r for r in self._by_key.values() if r.group == group and r.version == version]
