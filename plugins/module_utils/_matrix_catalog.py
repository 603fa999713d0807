# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The compatibility catalog: public facts the matrix rules check against (collection-internal).

Every fact carries ``sources``: ids of entries in ``sources``, each a URL or a
repository/path/ref. ``Catalog.from_data`` refuses a fact without one, so a
user catalog cannot add an unsourced claim either. Where the catalog does not
know, rules answer "warning: not in catalog", never "pass".

The shipped catalog is built by ``shipped_catalog_data()`` (a fresh dict per
call: module_utils keep no mutable globals). Users extend or override it
with a YAML file of the same format next to their matrix
(``CATALOG_FILE_NAME``); ``merge_catalog_data`` merges mappings key by key
and replaces lists and scalars. The format is documented in docs/matrix.md.

What was read to build it (2026-08): NVIDIA/gpu-operator chart values per tag;
NVIDIA/cloud-native-docs gpu-operator life-cycle-policy.rst (component
matrix: documented drivers) and platform-support.rst (RHCOS range) at the
commit that documented each release; Mellanox/network-operator
hack/release.yaml per tag and release branches; Mellanox/network-operator-docs
vars.rst and platform-support.rst per tag; NVIDIA MFT "Legal Notices" pages
(the firmware each MLNX_OFED/DOCA release shipped with); NVIDIA mlxup release
notes (firmware families); openshift/os release branches (RHEL base of RHCOS);
openshift/sriov-network-operator release branches (CSV version);
nvidia-smi output captured in public repositories (CUDA version per driver branch).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import parse_yaml_text
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    Version,
    try_parse,
)

CATALOG_FORMAT = 1
CATALOG_FILE_NAME = "catalog.yaml"
FACT_SECTIONS = (
    "gpu_operator",
    "network_operator",
    "mofed_firmware",
    "firmware_families",
    "openshift",
    "rhel_kernels",
    "sriov_operator",
    "driver_cuda",
)

_CND = "NVIDIA/cloud-native-docs"
_GPU_OPERATOR = "NVIDIA/gpu-operator"
_NETOP = "Mellanox/network-operator"
_NETOP_DOCS = "Mellanox/network-operator-docs"


@dataclass(frozen=True)
class _GpuOperatorRow:
    tag: str
    default_driver: str
    dcgm: str
    dcgm_hostengine: str
    device_plugin: str
    container_toolkit: str
    documented_drivers: Tuple[str, ...]
    component_matrix_commit: Optional[str]
    openshift_min: str
    openshift_max: str
    platform_support_commit: str


@dataclass(frozen=True)
class _NetworkOperatorRow:
    tag: str
    driver: str
    driver_lts: Optional[str]
    openshift: Tuple[str, ...]
    driver_from: str
    docs_tag: Optional[str]


# GPU Operator releases: default driver and operands from the chart values at
# the tag (dcgm is dcgmExporter.version without its OS suffix, dcgm_hostengine
# the standalone host engine's dcgm.version as written); documented drivers
# from the component matrix at the docs commit that documented the release
# (recommended updates included); RHCOS range from platform-support.rst.
_GPU_OPERATOR_RELEASES = (
    _GpuOperatorRow(
        tag="v23.9.0",
        default_driver="535.104.12",
        dcgm="3.2.6-3.1.9",
        dcgm_hostengine="3.2.6-1-ubuntu20.04",
        device_plugin="v0.14.2",
        container_toolkit="v1.14.3",
        documented_drivers=(),
        component_matrix_commit=None,
        openshift_min="4.9",
        openshift_max="4.14",
        platform_support_commit="b829a068eef5a0cc4b57962f52caf07f177ebf76",
    ),
    _GpuOperatorRow(
        tag="v23.9.1",
        default_driver="535.129.03",
        dcgm="3.3.0-3.2.0",
        dcgm_hostengine="3.3.0-1-ubuntu22.04",
        device_plugin="v0.14.3",
        container_toolkit="v1.14.3",
        documented_drivers=("535.154.05", "535.129.03", "525.147.05", "470.223.02"),
        component_matrix_commit="3cc272d77ef6a0b4867138dfb581c12a55922805",
        openshift_min="4.9",
        openshift_max="4.15",
        platform_support_commit="5ab9073ecadda6dadbcd44829f0590f105eb160e",
    ),
    _GpuOperatorRow(
        tag="v23.9.2",
        default_driver="550.54.14",
        dcgm="3.3.0-3.2.0",
        dcgm_hostengine="3.3.0-1-ubuntu22.04",
        device_plugin="v0.14.5",
        container_toolkit="v1.14.6",
        documented_drivers=("550.54.15", "550.54.14", "535.161.08", "535.161.07", "470.239.06"),
        component_matrix_commit="3156b644bf1f7b165627553e8281c5a266411ee5",
        openshift_min="4.12",
        openshift_max="4.15",
        platform_support_commit="dafd1645518c719ead8b41901ef0486c5b706d8d",
    ),
    _GpuOperatorRow(
        tag="v24.3.0",
        default_driver="550.54.15",
        dcgm="3.3.5-3.4.1",
        dcgm_hostengine="3.3.5-1-ubuntu22.04",
        device_plugin="v0.15.0",
        container_toolkit="v1.15.0",
        documented_drivers=("550.90.07", "550.54.15", "535.183.01", "535.161.08", "470.256.02", "470.239.06"),
        component_matrix_commit="ee50cd6ece6040160c0da6bd1316a563cf9fdae8",
        openshift_min="4.12",
        openshift_max="4.16",
        platform_support_commit="29d18ab02f86865082e2fbd25908c7115d67a257",
    ),
    _GpuOperatorRow(
        tag="v24.6.0",
        default_driver="550.90.07",
        dcgm="3.3.7-3.5.0",
        dcgm_hostengine="3.3.7-1-ubuntu22.04",
        device_plugin="v0.16.1",
        container_toolkit="v1.16.1",
        documented_drivers=("550.90.07", "535.183.06"),
        component_matrix_commit="f20a1bb7d8895f3959ad9f474505ca289cd2f3b2",
        openshift_min="4.12",
        openshift_max="4.16",
        platform_support_commit="e31e3f14afb1997034cb5eb0fd815f0548f954c5",
    ),
    _GpuOperatorRow(
        tag="v24.6.1",
        default_driver="550.90.07",
        dcgm="3.3.7-3.5.0",
        dcgm_hostengine="3.3.7-1-ubuntu22.04",
        device_plugin="v0.16.2",
        container_toolkit="v1.16.1",
        documented_drivers=("560.35.03", "550.90.12", "550.90.07", "535.183.06"),
        component_matrix_commit="f7e93389126adbf2e82ad62c0c2d9b1d51e55c4b",
        openshift_min="4.12",
        openshift_max="4.16",
        platform_support_commit="f20a1bb7d8895f3959ad9f474505ca289cd2f3b2",
    ),
    _GpuOperatorRow(
        tag="v24.6.2",
        default_driver="550.90.07",
        dcgm="3.3.7-3.5.0",
        dcgm_hostengine="3.3.7-1-ubuntu22.04",
        device_plugin="v0.16.2",
        container_toolkit="v1.16.2",
        documented_drivers=("560.35.03", "550.127.05", "550.90.12", "550.90.07", "535.216.01", "535.183.06"),
        component_matrix_commit="34d2f5bab05e151766cfbbf0a4ec07f2fe951f5c",
        openshift_min="4.12",
        openshift_max="4.17",
        platform_support_commit="237b58fa05f8e897f91b1f01a0878c6e04888139",
    ),
    _GpuOperatorRow(
        tag="v24.9.0",
        default_driver="550.127.05",
        dcgm="3.3.8-3.6.0",
        dcgm_hostengine="3.3.8-1-ubuntu22.04",
        device_plugin="v0.17.0",
        container_toolkit="v1.17.0",
        documented_drivers=("565.57.01", "560.35.03", "550.127.08", "550.127.05", "535.216.03", "535.216.01"),
        component_matrix_commit="fa4b34fcf7b04b205e5fd7cd40dd05a452be3805",
        openshift_min="4.12",
        openshift_max="4.17",
        platform_support_commit="f1ea3ff87eb29cfdce369f5399f517127d5da2e5",
    ),
    _GpuOperatorRow(
        tag="v24.9.1",
        default_driver="550.127.08",
        dcgm="3.3.9-3.6.1",
        dcgm_hostengine="3.3.9-1-ubuntu22.04",
        device_plugin="v0.17.0",
        container_toolkit="v1.17.3",
        documented_drivers=("565.57.01", "560.35.03", "550.144.03", "550.127.08", "535.230.02", "535.216.03"),
        component_matrix_commit="015f25b02abad1f2275f6edfe7bc7954290117c4",
        openshift_min="4.12",
        openshift_max="4.17",
        platform_support_commit="73575d6d1eee1c892dca397bed3703724e01116d",
    ),
    _GpuOperatorRow(
        tag="v24.9.2",
        default_driver="550.144.03",
        dcgm="3.3.9-3.6.1",
        dcgm_hostengine="3.3.9-1-ubuntu22.04",
        device_plugin="v0.17.0",
        container_toolkit="v1.17.4",
        documented_drivers=(
            "570.86.15",
            "565.57.01",
            "560.35.03",
            "550.144.03",
            "550.127.08",
            "535.230.02",
            "535.216.03",
        ),
        component_matrix_commit="c1f262c22aa94255c2feb783f1288fca65df27ff",
        openshift_min="4.12",
        openshift_max="4.17",
        platform_support_commit="df7d1fc83c894428c4d1d10e83b4e0e8432780a1",
    ),
    _GpuOperatorRow(
        tag="v25.3.0",
        default_driver="570.124.06",
        dcgm="4.1.1-4.0.4",
        dcgm_hostengine="4.1.1-2-ubuntu22.04",
        device_plugin="v0.17.1",
        container_toolkit="v1.17.5",
        documented_drivers=("570.148.08", "570.133.20", "570.124.06", "570.86.15", "550.163.01", "535.247.01"),
        component_matrix_commit="b9922fd9134f54d5f050eb0c0e1dbeebb475af0c",
        openshift_min="4.12",
        openshift_max="4.18",
        platform_support_commit="7788e32906a0c9bcd8672a95e4e2c40d954598ea",
    ),
    _GpuOperatorRow(
        tag="v25.3.1",
        default_driver="570.148.08",
        dcgm="4.2.3-4.1.3",
        dcgm_hostengine="4.2.3-1-ubuntu22.04",
        device_plugin="v0.17.2",
        container_toolkit="v1.17.8",
        documented_drivers=("575.57.08", "570.158.01", "570.148.08", "550.163.01", "535.247.01"),
        component_matrix_commit="d2766f5f3be3118b63a37abd4c8e3bbc98e82f9e",
        openshift_min="4.12",
        openshift_max="4.19",
        platform_support_commit="834b5e716eeeb222e2f9c80596ad5ed59be79ddd",
    ),
    _GpuOperatorRow(
        tag="v25.3.2",
        default_driver="570.148.08",
        dcgm="4.2.3-4.1.3",
        dcgm_hostengine="4.2.3-1-ubuntu22.04",
        device_plugin="v0.17.3",
        container_toolkit="v1.17.8",
        documented_drivers=(
            "580.65.06",
            "575.57.08",
            "570.172.08",
            "570.158.01",
            "570.148.08",
            "550.163.01",
            "535.261.03",
            "535.247.01",
        ),
        component_matrix_commit="738f8227f55d4554d4ac2c7b3190bcf3b396a0e6",
        openshift_min="4.12",
        openshift_max="4.19",
        platform_support_commit="f6612c2889fb103e37b22f2296717239fd1afb88",
    ),
    _GpuOperatorRow(
        tag="v25.3.3",
        default_driver="580.82.07",
        dcgm="4.3.1-4.4.0",
        dcgm_hostengine="4.3.1-1-ubuntu22.04",
        device_plugin="v0.17.4",
        container_toolkit="v1.17.8",
        documented_drivers=(
            "580.82.07",
            "580.65.06",
            "575.57.08",
            "570.172.08",
            "570.158.01",
            "570.148.08",
            "550.163.01",
            "535.261.03",
            "535.247.01",
        ),
        component_matrix_commit="7185608a6a8c262ee86ca9c274b932fe0e0ef101",
        openshift_min="4.12",
        openshift_max="4.19",
        platform_support_commit="7185608a6a8c262ee86ca9c274b932fe0e0ef101",
    ),
    _GpuOperatorRow(
        tag="v25.3.4",
        default_driver="580.82.07",
        dcgm="4.3.1-4.4.0",
        dcgm_hostengine="4.3.1-1-ubuntu22.04",
        device_plugin="v0.17.4",
        container_toolkit="v1.17.8",
        documented_drivers=(
            "580.82.07",
            "580.65.06",
            "575.57.08",
            "570.172.08",
            "570.158.01",
            "570.148.08",
            "550.163.01",
            "535.261.03",
            "535.247.01",
        ),
        component_matrix_commit="0cc95ad4515d083b86bb1e8e242ae3fa1efacdf7",
        openshift_min="4.12",
        openshift_max="4.19",
        platform_support_commit="b6aba6f25f11ec784568f2bb868a6e8152412e07",
    ),
    _GpuOperatorRow(
        tag="v25.10.0",
        default_driver="580.95.05",
        dcgm="4.4.1-4.6.0",
        dcgm_hostengine="4.4.1-2-ubuntu22.04",
        device_plugin="v0.18.0",
        container_toolkit="v1.18.0",
        documented_drivers=("580.95.05", "580.82.07", "575.57.08", "570.195.03", "550.163.01", "535.274.02"),
        component_matrix_commit="7cf3c8593fa5e30994bcd03167bd91ac6b359bcd",
        openshift_min="4.14",
        openshift_max="4.20",
        platform_support_commit="3e11d2757eb77fa05eab7ac512c992881989526e",
    ),
    _GpuOperatorRow(
        tag="v25.10.1",
        default_driver="580.105.08",
        dcgm="4.4.2-4.7.0",
        dcgm_hostengine="4.4.2-1-ubuntu22.04",
        device_plugin="v0.18.1",
        container_toolkit="v1.18.1",
        documented_drivers=(
            "590.48.01",
            "580.126.16",
            "580.126.09",
            "580.105.08",
            "580.95.05",
            "580.82.07",
            "575.57.08",
            "570.211.01",
            "570.195.03",
            "550.163.01",
            "535.288.01",
            "535.274.02",
        ),
        component_matrix_commit="7cf3c8593fa5e30994bcd03167bd91ac6b359bcd",
        openshift_min="4.14",
        openshift_max="4.21",
        platform_support_commit="67e449a442b7cfc940e1349630ce3493a4c824a6",
    ),
    _GpuOperatorRow(
        tag="v26.3.0",
        default_driver="580.126.20",
        dcgm="4.5.1-4.8.0",
        dcgm_hostengine="4.5.2-1-ubuntu22.04",
        device_plugin="v0.19.0",
        container_toolkit="v1.19.0",
        documented_drivers=(
            "595.71.05",
            "595.58.03",
            "590.48.01",
            "580.173.02",
            "580.167.08",
            "580.159.04",
            "580.159.03",
            "580.126.20",
            "570.211.01",
            "535.309.01",
            "535.288.01",
        ),
        component_matrix_commit="0696d0443c7507f1beb61722f8c3d4b3799a3944",
        openshift_min="4.17",
        openshift_max="4.21",
        platform_support_commit="adfe922405e1e7954b28885eff04b835b32b1871",
    ),
    _GpuOperatorRow(
        tag="v26.3.1",
        default_driver="580.126.20",
        dcgm="4.5.1-4.8.0",
        dcgm_hostengine="4.5.2-1-ubuntu22.04",
        device_plugin="v0.19.0",
        container_toolkit="v1.19.0",
        documented_drivers=(
            "595.71.05",
            "595.58.03",
            "590.48.01",
            "580.173.02",
            "580.167.08",
            "580.159.04",
            "580.159.03",
            "580.126.20",
            "570.211.01",
            "535.309.01",
            "535.288.01",
        ),
        component_matrix_commit="0696d0443c7507f1beb61722f8c3d4b3799a3944",
        openshift_min="4.17",
        openshift_max="4.21",
        platform_support_commit="1b7e6ae99685c9cb82e3c1c936b2a3157add830c",
    ),
    _GpuOperatorRow(
        tag="v26.3.2",
        default_driver="580.126.20",
        dcgm="4.5.3-4.8.2",
        dcgm_hostengine="4.5.2-1-ubuntu22.04",
        device_plugin="v0.19.2",
        container_toolkit="v1.19.1",
        documented_drivers=(
            "595.71.05",
            "595.58.03",
            "590.48.01",
            "580.173.02",
            "580.167.08",
            "580.159.04",
            "580.159.03",
            "580.126.20",
            "570.211.01",
            "535.309.01",
            "535.288.01",
        ),
        component_matrix_commit="0696d0443c7507f1beb61722f8c3d4b3799a3944",
        openshift_min="4.17",
        openshift_max="4.21",
        platform_support_commit="de99f9d32c49f2c586cee9b74c324cbbab6b1b60",
    ),
    _GpuOperatorRow(
        tag="v26.3.3",
        default_driver="580.126.20",
        dcgm="4.5.3-4.8.2",
        dcgm_hostengine="4.5.2-1-ubuntu22.04",
        device_plugin="v0.19.3",
        container_toolkit="v1.19.1",
        documented_drivers=(
            "610.57.04",
            "595.91.07",
            "595.71.05",
            "595.58.03",
            "590.48.01",
            "580.178.04",
            "580.173.02",
            "580.167.08",
            "580.159.04",
            "580.159.03",
            "580.126.20",
            "570.211.01",
            "535.309.01",
            "535.288.01",
        ),
        component_matrix_commit="0696d0443c7507f1beb61722f8c3d4b3799a3944",
        openshift_min="4.18",
        openshift_max="4.22",
        platform_support_commit="0b3e69b5ca8645cd3de3ad08ed1385f70a99115f",
    ),
    _GpuOperatorRow(
        tag="v26.7.0",
        default_driver="595.91.07",
        dcgm="4.6.0-4.8.3",
        dcgm_hostengine="4.6.0-1-ubuntu24.04",
        device_plugin="v0.20.0",
        container_toolkit="v1.20.0",
        documented_drivers=("610.57.04", "595.91.07", "580.173.02", "535.309.01"),
        component_matrix_commit="187a4a5bdc9d6ca222ee59cde894bad4ab20eec0",
        openshift_min="4.18",
        openshift_max="4.22",
        platform_support_commit="0696d0443c7507f1beb61722f8c3d4b3799a3944",
    ),
)

# Release lines that exist: GPU Operator from its tags, Network Operator from
# its tags and release branches (vYY.MM.x; some release tags are missing from
# the code repository, e.g. v24.4.0, which the docs repository does tag).
_GPU_OPERATOR_LINES = (
    "1.7",
    "1.8",
    "1.9",
    "1.10",
    "1.11",
    "22.9",
    "23.3",
    "23.6",
    "23.9",
    "24.3",
    "24.6",
    "24.9",
    "25.3",
    "25.10",
    "26.3",
    "26.7",
)
_NETOP_LINES = (
    "0.1",
    "0.2",
    "0.3",
    "0.4",
    "0.5",
    "0.6",
    "1.0",
    "1.1",
    "1.2",
    "1.3",
    "1.4",
    "23.1",
    "23.4",
    "23.5",
    "23.7",
    "23.10",
    "24.1",
    "24.4",
    "24.7",
    "24.10",
    "25.1",
    "25.4",
    "25.7",
    "25.10",
    "26.1",
    "26.4",
    "26.7",
)

# Network Operator releases: default OFED/DOCA driver tag (from hack/release.yaml
# at the tag, or the docs repository's vars.rst where the code repository lacks
# the tag), the LTS driver the docs name, and the OpenShift minors validated.
_NETOP_RELEASES = (
    _NetworkOperatorRow(
        tag="v24.1.0", driver="24.01-0.3.3.1-0", driver_lts=None, openshift=(), driver_from="repo", docs_tag=None
    ),
    _NetworkOperatorRow(
        tag="v24.1.1", driver="24.01-0.3.3.1-10", driver_lts=None, openshift=(), driver_from="repo", docs_tag=None
    ),
    _NetworkOperatorRow(
        tag="v24.4.0",
        driver="24.04-0.6.6.0-0",
        driver_lts=None,
        openshift=("4.12", "4.13", "4.14", "4.15"),
        driver_from="docs",
        docs_tag="v24.4.0",
    ),
    _NetworkOperatorRow(
        tag="v24.4.1",
        driver="24.04-0.6.6.0-0",
        driver_lts=None,
        openshift=("4.12", "4.13", "4.14", "4.15"),
        driver_from="docs",
        docs_tag="v24.4.1",
    ),
    _NetworkOperatorRow(
        tag="v24.7.0",
        driver="24.07-0.6.1.0-0",
        driver_lts=None,
        openshift=("4.14", "4.15", "4.16"),
        driver_from="repo",
        docs_tag="v24.7.0",
    ),
    _NetworkOperatorRow(
        tag="v24.7.1", driver="24.07-0.6.1.0-0", driver_lts=None, openshift=(), driver_from="repo", docs_tag=None
    ),
    _NetworkOperatorRow(
        tag="v24.10.0",
        driver="24.10-0.7.0.0-0",
        driver_lts=None,
        openshift=("4.14", "4.15", "4.16"),
        driver_from="repo",
        docs_tag="v24.10.0",
    ),
    _NetworkOperatorRow(
        tag="v24.10.1",
        driver="24.10-0.7.0.0-0",
        driver_lts=None,
        openshift=("4.14", "4.15", "4.16"),
        driver_from="repo",
        docs_tag="v24.10.1",
    ),
    _NetworkOperatorRow(
        tag="v25.1.0",
        driver="25.01-0.6.0.0-0",
        driver_lts="24.10-0.7.0.0-0",
        openshift=("4.14", "4.16", "4.17"),
        driver_from="repo",
        docs_tag="v25.1.0",
    ),
    _NetworkOperatorRow(
        tag="v25.4.0",
        driver="25.04-0.6.1.0-2",
        driver_lts="24.10-0.7.0.0-0",
        openshift=("4.15", "4.16", "4.17", "4.18"),
        driver_from="repo",
        docs_tag="v25.4.0",
    ),
    _NetworkOperatorRow(
        tag="v25.7.0",
        driver="doca3.1.0-25.07-0.9.7.0-0",
        driver_lts="24.10-0.7.0.0-0",
        openshift=("4.15", "4.16", "4.17", "4.18", "4.19"),
        driver_from="repo",
        docs_tag="v25.7.0",
    ),
    _NetworkOperatorRow(
        tag="v25.10.0",
        driver="doca3.2.0-25.10-1.2.8.0-2",
        driver_lts="24.10-0.7.0.0-0",
        openshift=("4.17", "4.18", "4.19", "4.20"),
        driver_from="repo",
        docs_tag="v25.10.0",
    ),
    _NetworkOperatorRow(
        tag="v26.1.0",
        driver="doca3.3.0-26.01-1.0.0.0-0",
        driver_lts="24.10-0.7.0.0-0",
        openshift=("4.17", "4.18", "4.19", "4.20"),
        driver_from="repo",
        docs_tag="v26.1.0",
    ),
    _NetworkOperatorRow(
        tag="v26.1.1",
        driver="doca3.3.0-26.01-1.0.0.0-4",
        driver_lts="doca3.2.2-25.10-2.4.1.0-4",
        openshift=("4.17", "4.18", "4.19", "4.20"),
        driver_from="repo",
        docs_tag="v26.1.1",
    ),
    _NetworkOperatorRow(
        tag="v26.1.2",
        driver="doca3.3.0-26.01-1.0.0.0-0",
        driver_lts=None,
        openshift=(),
        driver_from="repo",
        docs_tag=None,
    ),
    _NetworkOperatorRow(
        tag="v26.4.0",
        driver="doca3.4.0-26.04-0.8.6.0-0",
        driver_lts=None,
        openshift=(),
        driver_from="repo",
        docs_tag=None,
    ),
    _NetworkOperatorRow(
        tag="v26.4.1",
        driver="doca3.4.1-26.04-1.1.0.0-1",
        driver_lts=None,
        openshift=(),
        driver_from="repo",
        docs_tag=None,
    ),
)

# Firmware each OFED/DOCA release shipped with, from the "Legal Notices and 3rd
# Party Licenses" page of the MFT release bundled with it: (driver, firmware
# train, page).
_MOFED_FIRMWARE: Tuple[Tuple[str, str, str], ...] = (
    (
        "23.04-0.5.3.3",
        "xx.37.1014",
        "https://docs.nvidia.com/networking/display/mftv4240/legal+notices+and+3rd+party+licenses",
    ),
    (
        "23.07-0.5.0.0",
        "xx.38.1002",
        "https://docs.nvidia.com/networking/display/MFTv4251/Legal+Notices+and+3rd+Party+Licenses",
    ),
    (
        "23.10-1.1.9.0",
        "xx.39.2048",
        "https://docs.nvidia.com/networking/display/mftv4261lts/legal+notices+and+3rd+party+licenses",
    ),
    (
        "24.01-0.3.3.1",
        "xx.40.1000",
        "https://docs.nvidia.com/networking/display/mftv4270/Legal+Notices+and+3rd+Party+Licenses",
    ),
    (
        "24.04-0.6.6.0",
        "xx.41.1000",
        "https://docs.nvidia.com/networking/display/mftv4280/legal+notices+and+3rd+party+licenses",
    ),
    (
        "24.07-0.6.1.0",
        "xx.42.1000",
        "https://docs.nvidia.com/networking/display/mftv4290/legal+notices+and+3rd+party+licenses",
    ),
    (
        "24.10-0.7.0.0",
        "xx.43.1000",
        "https://docs.nvidia.com/networking/display/mlnxenv24100700/Legal+Notices+and+3rd+Party+Licenses",
    ),
    (
        "24.10-1.1.4.0",
        "xx.43.2026",
        "https://docs.nvidia.com/networking/display/mftv43011210lts/Legal+Notices+and+3rd+Party+Licenses",
    ),
    (
        "25.01",
        "xx.44.1036",
        "https://docs.nvidia.com/networking/display/mftv43106021/legal+notices+and+3rd+party+licenses",
    ),
    (
        "doca3.2.0",
        "xx.47.1012",
        "https://docs.nvidia.com/networking/display/mftv4340/Legal-Notices-and-3rd-Party-Licenses",
    ),
)

_MLXUP_4290 = "https://docs.nvidia.com/networking/display/mlxuprnv4290/Supported+Adapters+Cards+and+Firmware+Versions"
# (first firmware field, adapter, matrix key names that mean this adapter)
_FIRMWARE_FAMILIES: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("16", "ConnectX-5", ("cx5",)),
    ("20", "ConnectX-6", ("cx6",)),
    ("22", "ConnectX-6 Dx", ("cx6dx", "cx6_dx")),
    ("24", "BlueField-2", ("bf2", "bluefield2")),
    ("26", "ConnectX-6 Lx", ("cx6lx", "cx6_lx")),
    ("28", "ConnectX-7", ("cx7",)),
    ("32", "BlueField-3", ("bf3", "bluefield3")),
)

_OS_REPO = "openshift/os"


def _source_repo(repo: str, path: str, ref: str, title: str) -> Dict[str, str]:
    return {"repo": repo, "path": path, "ref": ref, "title": title}


def _source_url(url: str, title: str) -> Dict[str, str]:
    return {"url": url, "title": title}


def _minors(low: str, high: str) -> List[str]:
    major, first = (int(part) for part in low.split("."))
    last = int(high.split(".")[1])
    return [f"{major}.{minor}" for minor in range(first, last + 1)]


def _gpu_operator_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    releases: Dict[str, Any] = {}
    for row in _GPU_OPERATOR_RELEASES:
        values_id = f"gpu-operator-values-{row.tag}"
        sources[values_id] = _source_repo(
            _GPU_OPERATOR, "deployments/gpu-operator/values.yaml", row.tag, f"GPU Operator {row.tag} chart values"
        )
        platform_id = f"cnd-platform-support-{row.platform_support_commit[:10]}"
        sources[platform_id] = _source_repo(
            _CND,
            "gpu-operator/platform-support.rst",
            row.platform_support_commit,
            "GPU Operator platform support (Red Hat Core OS row)",
        )
        entry: Dict[str, Any] = {
            "default_driver": row.default_driver,
            "operands": {
                "dcgm": row.dcgm,
                "dcgm_hostengine": row.dcgm_hostengine,
                "device_plugin": row.device_plugin,
                "container_toolkit": row.container_toolkit,
            },
            "openshift": _minors(row.openshift_min, row.openshift_max),
            "sources": [values_id, platform_id],
        }
        if row.documented_drivers and row.component_matrix_commit:
            matrix_id = f"cnd-component-matrix-{row.component_matrix_commit[:10]}"
            sources[matrix_id] = _source_repo(
                _CND,
                "gpu-operator/life-cycle-policy.rst",
                row.component_matrix_commit,
                "GPU Operator component matrix (NVIDIA GPU Driver row)",
            )
            entry["documented_drivers"] = list(row.documented_drivers)
            entry["sources"].append(matrix_id)
        releases[row.tag] = entry
    sources["gpu-operator-tags"] = _source_url(
        "https://github.com/NVIDIA/gpu-operator/tags", "GPU Operator release tags"
    )
    return {
        "release_lines": {"lines": list(_GPU_OPERATOR_LINES), "sources": ["gpu-operator-tags"]},
        "releases": releases,
    }


def _network_operator_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    releases: Dict[str, Any] = {}
    for row in _NETOP_RELEASES:
        if row.driver_from == "repo":
            driver_id = f"netop-release-{row.tag}"
            sources[driver_id] = _source_repo(
                _NETOP, "hack/release.yaml", row.tag, f"Network Operator {row.tag} component versions"
            )
        else:
            driver_id = f"netop-docs-vars-{row.tag}"
            sources[driver_id] = _source_repo(
                _NETOP_DOCS, "docs/common/vars.rst", row.tag, f"Network Operator {row.tag} docs versions"
            )
        entry: Dict[str, Any] = {"mofed": row.driver, "sources": [driver_id]}
        if row.driver_lts:
            entry["mofed_lts"] = row.driver_lts
        if row.openshift and row.docs_tag:
            platform_id = f"netop-docs-platform-{row.docs_tag}"
            sources[platform_id] = _source_repo(
                _NETOP_DOCS,
                "docs/platform-support.rst",
                row.docs_tag,
                f"Network Operator {row.docs_tag} platform support",
            )
            entry["openshift"] = list(row.openshift)
            entry["sources"].append(platform_id)
        releases[row.tag] = entry
    sources["netop-branches"] = _source_url(
        "https://github.com/Mellanox/network-operator/branches/all", "Network Operator release branches vYY.MM.x"
    )
    return {"release_lines": {"lines": list(_NETOP_LINES), "sources": ["netop-branches"]}, "releases": releases}


def _mofed_firmware_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    section: Dict[str, Any] = {}
    for driver, firmware, url in _MOFED_FIRMWARE:
        source_id = "mft-legal-" + url.split("/display/")[1].split("/")[0].lower()
        sources[source_id] = _source_url(
            url, "NVIDIA MFT/MLNX docs: Legal Notices (firmware and driver shipped together)"
        )
        section[driver] = {"firmware": firmware, "sources": [source_id]}
    return section


def _firmware_family_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    sources["mlxup-4.29.0"] = _source_url(
        _MLXUP_4290, "mlxup 4.29.0 release notes: supported adapters and firmware versions"
    )
    return {
        prefix: {"adapter": adapter, "keys": list(keys), "sources": ["mlxup-4.29.0"]}
        for prefix, adapter, keys in _FIRMWARE_FAMILIES
    }


def _openshift_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    manifests = {
        "4.14": ("manifest.yaml", "9.2"),
        "4.15": ("manifest.yaml", "9.2"),
        "4.16": ("manifest.yaml", "9.4"),
        "4.17": ("manifest.yaml", "9.4"),
        "4.18": ("manifest.yaml", "9.4"),
        "4.19": ("manifest.yaml", "9.6"),
        "4.20": ("build-node-image.sh", "9.6"),
    }
    section: Dict[str, Any] = {}
    for minor, (path, rhel) in manifests.items():
        source_id = f"openshift-os-release-{minor}"
        sources[source_id] = _source_repo(
            _OS_REPO, path, f"release-{minor}", f"RHCOS {minor} build: RHEL {rhel} manifests"
        )
        section[minor] = {"rhel": rhel, "sources": [source_id]}
    sources["ocp-docs-pr-82284"] = _source_url(
        "https://github.com/openshift/openshift-docs/pull/82284",
        "OpenShift 4.17 release notes: RHCOS uses RHEL 9.4 packages",
    )
    sources["ocp-docs-pr-94193"] = _source_url(
        "https://github.com/openshift/openshift-docs/pull/94193", "OpenShift 4.19 release notes: RHCOS uses RHEL 9.6"
    )
    sources["blob-csi-2192"] = _source_url(
        "https://github.com/kubernetes-sigs/blob-csi-driver/issues/2192",
        "os-release of OpenShift 4.18 (RHEL_VERSION=9.4) and 4.19 (RHEL 9.6) nodes",
    )
    sources["cincinnati-7810"] = _source_url(
        "https://github.com/openshift/cincinnati-graph-data/pull/7810",
        "OpenShift 4.19.9 node image lists kernel-5.14.0-570.35.1.el9_6",
    )
    section["4.17"]["sources"].append("ocp-docs-pr-82284")
    section["4.18"]["sources"].append("blob-csi-2192")
    section["4.19"]["sources"] += ["ocp-docs-pr-94193", "blob-csi-2192"]
    section["4.19"]["kernels"] = {"4.19.9": "5.14.0-570.35.1.el9_6"}
    section["4.19"]["sources"].append("cincinnati-7810")
    return section


def _rhel_kernel_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    sources["ocp417-docs-nfd-labels"] = _source_url(
        "https://docs.redhat.com/en/documentation/openshift_container_platform/4.17/html/hardware_accelerators/",
        "OpenShift 4.17 Hardware accelerators, GPUDirect RDMA, NFD labels of an RHCOS 417.94.202409121747-0 node: "
        "kernel-version.full 5.14.0-427.35.1.el9_4.x86_64, RHEL_VERSION 9.4",
    )
    sources["ocp-build-data-7780"] = _source_url(
        "https://github.com/openshift-eng/ocp-build-data/pull/7780",
        "RHCOS 9.6.20250925-0 (OpenShift 4.19) ships kernel 5.14.0-570.49.1.el9_6",
    )
    return {
        "9.4": {"kernel": "5.14.0", "release_stream": "427", "sources": ["ocp417-docs-nfd-labels"]},
        "9.6": {"kernel": "5.14.0", "release_stream": "570", "sources": ["cincinnati-7810", "ocp-build-data-7780"]},
    }


def _sriov_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    section: Dict[str, Any] = {}
    for minor in ("4.12", "4.13", "4.14", "4.15", "4.16", "4.17", "4.18", "4.19", "4.20", "4.21", "4.22"):
        source_id = f"sriov-release-{minor}"
        sources[source_id] = _source_repo(
            "openshift/sriov-network-operator",
            "manifests/stable/sriov-network-operator.clusterserviceversion.yaml",
            f"release-{minor}",
            f"SR-IOV Network Operator CSV on the release-{minor} branch (version {minor}.0)",
        )
        section[f"{minor}.0"] = {"openshift": minor, "sources": [source_id]}
    return section


def _driver_cuda_section(sources: Dict[str, Dict[str, str]]) -> Dict[str, Any]:
    gpud = "leptonai/gpud"
    gpud_ref = "5098ae174a618f0893c79cd774d1d3b4788e5360"
    exporter = "utkuozdemir/nvidia_gpu_exporter"
    exporter_ref = "e656cd81a180e7e0e7862b53c9acd4c2fb0f590b"
    captures = {
        "525": (
            "12.0",
            gpud,
            "components/accelerator/nvidia/query/testdata/nvidia-smi.525.125.06.out.0.valid",
            gpud_ref,
        ),
        "535": (
            "12.2",
            gpud,
            "components/accelerator/nvidia/query/testdata/nvidia-smi-query.535.161.08.out.0.valid",
            gpud_ref,
        ),
        "550": (
            "12.4",
            gpud,
            "components/accelerator/nvidia/query/testdata/nvidia-smi.550.90.07.out.0.valid",
            gpud_ref,
        ),
        "560": (
            "12.6",
            gpud,
            "components/accelerator/nvidia/query/testdata/nvidia-smi-query.560.35.03.out.0.valid",
            gpud_ref,
        ),
        "590": ("13.1", exporter, "internal/captures/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", exporter_ref),
        "595": ("13.2", exporter, "internal/captures/linux-x86_64__nvidia-l40s__595.80.txt", exporter_ref),
    }
    section: Dict[str, Any] = {}
    for branch, (cuda, repo, path, ref) in captures.items():
        source_id = f"nvidia-smi-{branch}"
        sources[source_id] = _source_repo(repo, path, ref, f"nvidia-smi of a {branch} driver: CUDA Version {cuda}")
        section[branch] = {"cuda": cuda, "sources": [source_id]}
    return section


def shipped_catalog_data() -> Dict[str, Any]:
    """The catalog shipped with the collection, as plain data (a new dict each call)."""
    sources: Dict[str, Dict[str, str]] = {}
    data: Dict[str, Any] = {
        "catalog_format": CATALOG_FORMAT,
        "gpu_operator": _gpu_operator_section(sources),
        "network_operator": _network_operator_section(sources),
        "mofed_firmware": _mofed_firmware_section(sources),
        "firmware_families": _firmware_family_section(sources),
        "openshift": _openshift_section(sources),
        "rhel_kernels": _rhel_kernel_section(sources),
        "sriov_operator": _sriov_section(sources),
        "driver_cuda": _driver_cuda_section(sources),
    }
    data["sources"] = sources
    return data


class CatalogError(InvalidInputError):
    """A catalog (shipped or user) that breaks the format, e.g. a fact without a source."""


def merge_catalog_data(base: Mapping[str, Any], override: Mapping[str, Any]) -> Dict[str, Any]:
    """Mappings merge key by key (the override wins); lists and scalars are replaced."""
    merged: Dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_catalog_data(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _fact_entries(data: Mapping[str, Any]) -> Iterable[Tuple[str, Any]]:
    for section in FACT_SECTIONS:
        body = data.get(section) or {}
        if not isinstance(body, Mapping):
            yield section, body
            continue
        if section in ("gpu_operator", "network_operator"):
            yield f"{section}.release_lines", body.get("release_lines")
            for tag, entry in (body.get("releases") or {}).items():
                yield f"{section}.releases.{tag}", entry
        else:
            for name, entry in body.items():
                yield f"{section}.{name}", entry


def check_catalog_data(data: Mapping[str, Any], *, source: str) -> None:
    """Refuse facts without sources, sources without a place, and unknown sections."""
    if not isinstance(data, Mapping):
        raise CatalogError(f"{source}: found {type(data).__name__}, expected a catalog mapping")
    unknown = set(data) - set(FACT_SECTIONS) - {"sources", "catalog_format"}
    if unknown:
        raise CatalogError(f"{source}: unknown catalog sections {sorted(unknown)}; expected {list(FACT_SECTIONS)}")
    sources = data.get("sources") or {}
    for source_id, entry in sources.items():
        if not isinstance(entry, Mapping) or not (entry.get("url") or (entry.get("repo") and entry.get("path"))):
            raise CatalogError(f"{source}: source {source_id} has neither a url nor a repo and path")
    for where, entry in _fact_entries(data):
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{source}: {where}: found {entry!r}, expected a mapping with sources")
        cited = entry.get("sources")
        if not cited:
            raise CatalogError(
                f"{source}: {where}: a fact without sources; every catalog fact names where it comes from"
            )
        missing = [source_id for source_id in cited if source_id not in sources]
        if missing:
            raise CatalogError(f"{source}: {where}: sources {missing} are not defined under sources")
        _check_fact_values(entry, where=where, source=source)


def _check_fact_values(value: Any, *, where: str, source: str) -> None:
    """Every fact is text: ``cuda: 12.10`` read as a number would compare as 12.1 (the shipped facts are all text)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_fact_values(item, where=f"{where}.{key}", source=source)
    elif isinstance(value, list):
        for item in value:
            _check_fact_values(item, where=where, source=source)
    elif not isinstance(value, str):
        written = getattr(value, "written", "") or repr(value)
        raise CatalogError(f'{source}: {where}: found {written}, expected a string (quote it in YAML: "{written}")')


@dataclass(frozen=True)
class Fact:
    """A catalog answer and where it comes from (rendered citations)."""

    value: Any
    sources: Tuple[str, ...]


@dataclass
class Catalog:
    data: Dict[str, Any]
    origin: str = "shipped"

    @classmethod
    def from_data(cls, data: Mapping[str, Any], *, origin: str = "shipped") -> Catalog:
        check_catalog_data(data, source=origin)
        return cls(data=copy.deepcopy(dict(data)), origin=origin)

    # -- citations -------------------------------------------------------
    def cite(self, source_ids: Iterable[str]) -> Tuple[str, ...]:
        rendered = []
        for source_id in source_ids:
            entry = self.data.get("sources", {}).get(source_id, {})
            if entry.get("url"):
                place = entry["url"]
            else:
                place = "{}:{}@{}".format(entry.get("repo"), entry.get("path"), entry.get("ref", "HEAD"))
            title = entry.get("title")
            rendered.append(f"{title} <{place}>" if title else place)
        return tuple(rendered)

    def _fact(self, value: Any, entry: Mapping[str, Any]) -> Fact:
        return Fact(value=value, sources=self.cite(entry.get("sources", ())))

    # -- operator releases ----------------------------------------------
    def _release(self, section: str, version: Version) -> Optional[Tuple[str, Dict[str, Any]]]:
        releases = (self.data.get(section) or {}).get("releases") or {}
        for tag, entry in releases.items():
            parsed = try_parse(section, tag)
            if parsed is not None and parsed.same_as(version):
                return tag, entry
        return None

    def gpu_operator_release(self, version: Version) -> Optional[Tuple[str, Dict[str, Any]]]:
        return self._release("gpu_operator", version)

    def network_operator_release(self, version: Version) -> Optional[Tuple[str, Dict[str, Any]]]:
        return self._release("network_operator", version)

    def release_line_known(self, section: str, version: Version) -> Optional[Fact]:
        """Fact(True/False) when the catalog lists release lines of ``section``; None when it does not."""
        lines_entry = (self.data.get(section) or {}).get("release_lines")
        if not lines_entry:
            return None
        line = f"{version.key[0]}.{version.key[1]}"
        return self._fact(line in lines_entry.get("lines", ()), lines_entry)

    def newest_release(self, section: str) -> Optional[Version]:
        releases = (self.data.get(section) or {}).get("releases") or {}
        parsed = [try_parse(section, tag) for tag in releases]
        known = [version for version in parsed if version is not None]
        return max(known, key=lambda version: version.key) if known else None

    def release_fact(self, section: str, tag: str) -> Fact:
        entry = self.data[section]["releases"][tag]
        return self._fact(tag, entry)

    # -- drivers, CUDA --------------------------------------------------
    def known_drivers(self) -> Dict[str, List[str]]:
        """Driver version -> GPU Operator releases that document it (or ship it as default)."""
        known: Dict[str, List[str]] = {}
        for tag, entry in ((self.data.get("gpu_operator") or {}).get("releases") or {}).items():
            for driver in [*list(entry.get("documented_drivers", [])), entry.get("default_driver")]:
                if driver:
                    known.setdefault(driver, [])
                    if tag not in known[driver]:
                        known[driver].append(tag)
        return known

    def driver_cuda(self, branch: int) -> Optional[Fact]:
        entry = (self.data.get("driver_cuda") or {}).get(str(branch))
        return self._fact(entry["cuda"], entry) if entry else None

    # -- network: MOFED/DOCA and firmware --------------------------------
    def known_mofed(self) -> Dict[str, List[str]]:
        """OFED/DOCA driver tag -> where the catalog knows it from (operator release or firmware pairing)."""
        known: Dict[str, List[str]] = {}
        for tag, entry in ((self.data.get("network_operator") or {}).get("releases") or {}).items():
            for key in ("mofed", "mofed_lts"):
                if entry.get(key):
                    known.setdefault(entry[key], []).append(f"Network Operator {tag}")
        for driver in self.data.get("mofed_firmware") or {}:
            known.setdefault(driver, []).append("firmware pairing")
        return known

    def mofed_firmware(self, mofed: Version) -> Optional[Tuple[str, Fact]]:
        """(catalog key, Fact(firmware train)) for the most specific pairing entry that matches."""
        pairs = self.data.get("mofed_firmware") or {}
        doca = mofed.detail.get("doca")
        if doca and f"doca{doca}" in pairs:
            entry = pairs[f"doca{doca}"]
            return f"doca{doca}", self._fact(entry["firmware"], entry)
        driver = mofed.detail.get("driver", "")
        best = None
        for key in pairs:
            if key.startswith("doca"):
                continue
            matches = driver == key or driver.startswith((key + "-", key + "."))
            if matches and (best is None or len(key) > len(best)):
                best = key
        if best is None:
            return None
        return best, self._fact(pairs[best]["firmware"], pairs[best])

    def firmware_family(self, family_id: int) -> Optional[Fact]:
        entry = (self.data.get("firmware_families") or {}).get(str(family_id))
        return self._fact(entry["adapter"], entry) if entry else None

    def firmware_family_for_key(self, key_name: str) -> Optional[Tuple[str, Fact]]:
        """(family id, Fact(adapter)) of the adapter a key such as firmware_cx7 names."""
        for family_id, entry in (self.data.get("firmware_families") or {}).items():
            if key_name in entry.get("keys", ()):
                return family_id, self._fact(entry["adapter"], entry)
        return None

    # -- OpenShift, kernels, SR-IOV ---------------------------------------
    def openshift_minor(self, minor: str) -> Optional[Dict[str, Any]]:
        return (self.data.get("openshift") or {}).get(minor)

    def openshift_fact(self, minor: str, value: Any) -> Fact:
        return self._fact(value, self.data["openshift"][minor])

    def rhel_kernel(self, rhel: str) -> Optional[Tuple[Dict[str, Any], Fact]]:
        entry = (self.data.get("rhel_kernels") or {}).get(rhel)
        if not entry:
            return None
        return entry, self._fact(entry, entry)

    def sriov_release(self, version: Version) -> Optional[Tuple[str, Fact]]:
        for tag, entry in (self.data.get("sriov_operator") or {}).items():
            parsed = try_parse("sriov_operator", tag)
            if parsed is not None and parsed.key == version.key:
                return tag, self._fact(entry["openshift"], entry)
        return None

    def operand_defaults(self, operand: str) -> Dict[str, List[str]]:
        """Operand version -> GPU Operator releases that ship it by default."""
        found: Dict[str, List[str]] = {}
        for tag, entry in ((self.data.get("gpu_operator") or {}).get("releases") or {}).items():
            value = (entry.get("operands") or {}).get(operand)
            if value:
                found.setdefault(value, []).append(tag)
        return found

    def sources_of(self, section: str, name: str) -> Tuple[str, ...]:
        entry = (self.data.get(section) or {}).get(name) or {}
        return self.cite(entry.get("sources", ()))


def load_catalog(user_data: Optional[Mapping[str, Any]] = None, *, user_origin: str = "user catalog") -> Catalog:
    """The shipped catalog, merged with a user catalog when one is given (both checked for sources)."""
    shipped = shipped_catalog_data()
    if not user_data:
        return Catalog.from_data(shipped, origin="shipped")
    check_catalog_data(merge_catalog_data({"sources": shipped["sources"]}, user_data), source=user_origin)
    return Catalog.from_data(merge_catalog_data(shipped, user_data), origin=f"shipped + {user_origin}")


def catalog_from_text(text: str, *, origin: str) -> Catalog:
    """Parse a user catalog YAML text and merge it over the shipped catalog."""
    data = parse_yaml_text(text, source=origin)
    if data is None:
        return load_catalog()
    if not isinstance(data, Mapping):
        raise CatalogError(f"{origin}: found {type(data).__name__}, expected a catalog mapping")
    return load_catalog(data, user_origin=origin)
