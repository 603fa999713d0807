"""Two clusters of a fleet promote the same matrix file at once (two forks): both tasks succeed, the matrix is
promoted once, valid, and committed and tagged once.

A Git ``reference-transaction`` hook (run for every ref update, ``--no-verify`` or not) holds each commit and
tag for a second, so the two modules' file writes and Git commands overlap on every run instead of by chance.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import stat

import yaml

from .conftest import ROOT, run_playbook
from .test_matrix_promote_push import git

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
PLAYBOOK = "tests/integration/playbooks/matrix_promote_fleet.yml"
CLUSTERS = ["gpu-east", "gpu-west"]
SLOW_REF_UPDATES = """#!/bin/sh
# Widen the window in which a commit or tag holds the repository's locks.
[ "$1" = prepared ] && sleep 1
exit 0
"""


def test_two_clusters_promote_the_same_matrix_at_once(tmp_path: pathlib.Path) -> None:
    work = tmp_path / "matrix-repo"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    shutil.copy(EXAMPLE, work / "matrix.yaml")
    git(work, "add", "matrix.yaml")
    git(work, "commit", "-q", "-m", "matrix")
    hook = work / ".git" / "hooks" / "reference-transaction"
    hook.write_text(SLOW_REF_UPDATES)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    results = tmp_path / "results"
    results.mkdir()

    run = run_playbook(
        PLAYBOOK,
        twin=None,
        extra_vars={
            "promote_clusters": CLUSTERS,
            "promote_matrix_file": str(work / "matrix.yaml"),
            "promote_result_dir": str(results),
        },
        timeout=180,
    )
    assert run.returncode == 0, run.output
    outcome = {name: json.loads((results / f"{name}.json").read_text()) for name in CLUSTERS}
    assert all(not result.get("failed") for result in outcome.values()), outcome
    # One of them promoted; the other found the matrix promoted already.
    (first,) = [name for name, result in outcome.items() if result["changed"]]
    (second,) = [name for name, result in outcome.items() if not result["changed"]]
    assert "nothing to promote" in outcome[second]["message"]
    assert outcome[second]["lock_waited"] > 0 or outcome[first]["lock_waited"] > 0
    # The file is valid and promoted, with the promoting cluster's note, and it is what Git holds.
    matrix = yaml.safe_load(yaml.safe_load((work / "matrix.yaml").read_text())["data"]["matrix.yaml"])
    production = matrix["current_production"]
    assert outcome[first]["promoted"]["gpu_operator"] == "v25.3.0"
    assert all(str(production[name]) == version for name, version in outcome[first]["promoted"].items())
    assert production["notes"] == f"Promoted on {first}" and matrix["canary_testing"]["status"] == "promoted"
    assert git(work, "status", "--porcelain") == ""
    assert git(work, "rev-list", "--count", "HEAD") == "2"  # the matrix, then one promotion
    assert git(work, "tag", "--list") == "v2026-11-stable"
    assert outcome[first]["git"]["commit"] == git(work, "rev-parse", "HEAD")
