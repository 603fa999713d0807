# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The upgrade controller's skip label, as the GPU driver and the OFED driver rollouts both hold nodes with it
(collection-internal).

The GPU Operator and the Network Operator run the same upgrade controller
(NVIDIA/k8s-operator-libs ``pkg/upgrade``); its keys carry the driver's name
(``consts.go``: ``nvidia.com/%s-driver-upgrade.skip``). The controller leaves
a node whose skip label is ``"true"`` alone. This collection holds nodes with
it (a canary's other nodes, a paced rollout's next ones) and marks each hold
it sets with an annotation of its own, whose value says why, so it only ever
releases its own holds, never a person's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

SKIP_LABEL_FORMAT = "nvidia.com/{}-driver-upgrade.skip"


def _meta(node: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return (node.get("metadata") or {}).get(key) or {}


@dataclass(frozen=True)
class SkipLabel:
    """One driver's skip label and this collection's mark on the holds it set."""

    label: str
    annotation: str

    def held(self, node: Mapping[str, Any]) -> bool:
        return _meta(node, "labels").get(self.label) == "true"

    def held_by_us(self, node: Mapping[str, Any]) -> bool:
        return self.annotation in _meta(node, "annotations")

    def held_by_others(self, node: Mapping[str, Any]) -> bool:
        """Held, and not by this collection: someone's own hold, which a release never touches."""
        return self.held(node) and not self.held_by_us(node)

    def hold_patch(self, reason: str) -> Dict[str, Any]:
        """The merge patch that holds a node, ``reason`` (canary, halt, the rollout's name) in the mark."""
        return {"metadata": {"labels": {self.label: "true"}, "annotations": {self.annotation: reason}}}

    def release_patch(self, node: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """The merge patch that releases this collection's hold (the label left out when ``node`` has none)."""
        patch: Dict[str, Any] = {"metadata": {"annotations": {self.annotation: None}}}
        if node is None or self.label in _meta(node, "labels"):
            patch["metadata"]["labels"] = {self.label: None}
        return patch


GPU_DRIVER = SkipLabel(SKIP_LABEL_FORMAT.format("gpu"), "gpufleet.io/gpu-driver-upgrade-hold")
OFED_DRIVER = SkipLabel(SKIP_LABEL_FORMAT.format("ofed"), "gpufleet.io/ofed-upgrade-hold")
