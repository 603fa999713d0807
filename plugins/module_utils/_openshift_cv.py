# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""ClusterVersion logic without I/O: where an update stands, what to write, what refuses it
(collection-internal).

Facts used (openshift/api ``config/v1/types_cluster_version.go``, cluster-version-operator):
``spec.desiredUpdate`` {version, image, force} starts an update; ``status.history`` is newest first
with ``state`` Partial until the release is fully applied, then Completed; conditions Available,
Progressing, Failing, Upgradeable. ``Upgradeable=False`` blocks minor-version updates only (a
z-stream update within the minor still goes). OpenShift does not support downgrades or rollbacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def version_key(version: str) -> Tuple[int, int, int]:
    match = _VERSION.match(str(version).strip().lstrip("v"))
    if match is None:
        return (0, 0, 0)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def minor_of(version: str) -> str:
    major, minor, _patch = version_key(version)
    return f"{major}.{minor}"


def _conditions(cv: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {str(c.get("type")): dict(c) for c in ((cv.get("status") or {}).get("conditions") or [])}


@dataclass(frozen=True)
class UpdateState:
    """The ClusterVersion seen against one target version."""

    current: str  # newest Completed release
    desired: str  # status.desired.version (what the CVO works towards)
    requested: str  # spec.desiredUpdate.version
    channel: str
    target_entry: Dict[str, Any]
    conditions: Dict[str, Dict[str, Any]]
    history: List[Dict[str, Any]] = field(default_factory=list)

    def condition(self, kind: str) -> str:
        return str((self.conditions.get(kind) or {}).get("status") or "Unknown")

    def message(self, kind: str) -> str:
        return str((self.conditions.get(kind) or {}).get("message") or "")

    @property
    def completed(self) -> bool:
        newest = self.history[0] if self.history else {}
        return (
            newest.get("version") == self.target_entry.get("version")
            and newest.get("state") == "Completed"
            and self.condition("Progressing") != "True"
        )

    @property
    def failing(self) -> bool:
        return self.condition("Failing") == "True"

    def summary(self) -> Dict[str, Any]:
        return {
            "current": self.current,
            "desired": self.desired,
            "requested": self.requested,
            "channel": self.channel,
            "target_history": self.target_entry or None,
            "conditions": {
                kind: {"status": self.condition(kind), "message": self.message(kind)}
                for kind in ("Available", "Progressing", "Failing", "Upgradeable")
            },
        }


def update_state(cv: Mapping[str, Any], *, version: str) -> UpdateState:
    spec = cv.get("spec") or {}
    status = cv.get("status") or {}
    history = [dict(item) for item in (status.get("history") or [])]
    current = next((str(h.get("version")) for h in history if h.get("state") == "Completed"), "")
    target = next((h for h in history if h.get("version") == version), {})
    return UpdateState(
        current=current,
        desired=str((status.get("desired") or {}).get("version") or ""),
        requested=str((spec.get("desiredUpdate") or {}).get("version") or ""),
        channel=str(spec.get("channel") or ""),
        target_entry=target,
        conditions=_conditions(cv),
        history=history,
    )


def refusal(state: UpdateState, *, version: str) -> Optional[str]:
    """Why the CVO must not be asked for ``version`` now (None: it may)."""
    if not state.current:
        return "the ClusterVersion has no Completed release in its history"
    if version in (state.current, state.requested, state.desired):
        return None  # already there or on its way: nothing new is asked
    if version_key(version) < version_key(state.current):
        return (
            f"OpenShift {state.current} cannot go back to {version}: OpenShift does not support downgrades "
            "(restore from an etcd backup instead)"
        )
    if state.condition("Progressing") == "True" and state.desired and state.desired != state.current:
        return f"the cluster is already updating to {state.desired}; wait for it to finish before asking for {version}"
    if state.failing:
        return f"the ClusterVersion is Failing: {state.message('Failing') or 'no message'}"
    if minor_of(version) != minor_of(state.current) and state.condition("Upgradeable") == "False":
        return (
            f"Upgradeable=False blocks the minor update {state.current} -> {version}: "
            f"{state.message('Upgradeable') or 'no message'}"
        )
    return None


def desired_update_patch(
    cv: Mapping[str, Any], *, version: str, image: Optional[str], channel: Optional[str], force: bool
) -> Dict[str, Any]:
    """The merge patch asking the CVO for ``version`` ({} when already asked)."""
    spec = cv.get("spec") or {}
    current = dict(spec.get("desiredUpdate") or {})
    wanted: Dict[str, Any] = {"version": version, "force": force}
    if image:
        wanted["image"] = image
    patch: Dict[str, Any] = {}
    if channel and spec.get("channel") != channel:
        patch["channel"] = channel
    state = update_state(cv, version=version)
    if state.current == version and not current:
        return {"spec": patch} if patch else {}
    differs = any(current.get(key) != value for key, value in wanted.items()) or (
        not image and current.get("image") and current.get("version") != version
    )
    if differs:
        desired: Dict[str, Any] = dict(wanted)
        if not image:
            desired["image"] = None
        patch["desiredUpdate"] = desired
    return {"spec": patch} if patch else {}


def progress_line(state: UpdateState) -> str:
    """One line a person reads: like the STATUS column of ``oc get clusterversion``."""
    if state.completed:
        return f"Cluster version is {state.target_entry.get('version')}"
    if state.failing:
        return f"Failing: {state.message('Failing')}"
    return state.message("Progressing") or f"Working towards {state.desired or state.requested}"
