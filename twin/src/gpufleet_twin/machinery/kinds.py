"""The resource types the simulation reads and writes, looked up once from the registry."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Registry, ResourceType


@dataclass(frozen=True)
class Kinds:
    namespace: ResourceType
    node: ResourceType
    pod: ResourceType
    event: ResourceType
    configmap: ResourceType
    serviceaccount: ResourceType
    service: ResourceType
    daemonset: ResourceType
    deployment: ResourceType
    replicaset: ResourceType
    controllerrevision: ResourceType
    job: ResourceType
    pdb: ResourceType
    statefulset: ResourceType

    @classmethod
    def from_registry(cls, registry: Registry) -> Kinds:
        def find(group: str, plural: str) -> ResourceType:
            rtype = registry.get(group, plural)
            if rtype is None:
                raise KeyError(f"the registry has no {plural}.{group or 'core'}: register the built-in kinds first")
            return rtype

        return cls(
            namespace=find("", "namespaces"),
            node=find("", "nodes"),
            pod=find("", "pods"),
            event=find("", "events"),
            configmap=find("", "configmaps"),
            serviceaccount=find("", "serviceaccounts"),
            service=find("", "services"),
            daemonset=find("apps", "daemonsets"),
            deployment=find("apps", "deployments"),
            replicaset=find("apps", "replicasets"),
            controllerrevision=find("apps", "controllerrevisions"),
            job=find("batch", "jobs"),
            pdb=find("policy", "poddisruptionbudgets"),
            statefulset=find("apps", "statefulsets"),
        )
