# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Filters for OLM-managed operators: what the catalog serves, and the steps of a reinstall at an older version.

Documented in olm_catalog_channels.yml and olm_reinstall_steps.yml beside this file; logic in
plugins/module_utils/_olm.py.
"""

from __future__ import annotations

from ansible_collections.gpufleet.upgrade.plugins.module_utils._olm import (
    catalog_channels,
    csv_name,
    reinstall_steps,
)


def olm_catalog_channels(manifests, package, version):
    return catalog_channels(manifests or [], package=package, csv=csv_name(package, version))


# Jinja passes a filter's arguments by position.
def olm_reinstall_steps(subscription, saved, csvs, manifests, package, version, channel=""):  # noqa: PLR0917
    return reinstall_steps(
        subscription=subscription or None,
        saved=saved or None,
        csvs=csvs or [],
        manifests=manifests or [],
        package=package,
        target_version=version,
        preferred_channel=channel or "",
    )


class FilterModule:
    def filters(self):
        return {"olm_catalog_channels": olm_catalog_channels, "olm_reinstall_steps": olm_reinstall_steps}
