"""Make the checkout importable as ``ansible_collections.gpufleet.upgrade``.

Playbooks, pytest and molecule find the collection through
``.build/collections/ansible_collections/gpufleet/upgrade``, a link to the
checkout, so nobody has to move the repository.  ansible-test resolves links
and needs a real copy; ``scripts/test`` makes that one separately.
"""

from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
COLLECTIONS = ROOT / ".build" / "collections"
LINK = COLLECTIONS / "ansible_collections" / "gpufleet" / "upgrade"


def ensure_collection_link() -> pathlib.Path:
    LINK.parent.mkdir(parents=True, exist_ok=True)
    if LINK.is_symlink() and LINK.resolve() == ROOT:
        return COLLECTIONS
    if LINK.is_symlink() or LINK.exists():
        LINK.unlink()
    os.symlink(ROOT, LINK, target_is_directory=True)
    return COLLECTIONS


if __name__ == "__main__":
    print(ensure_collection_link())
