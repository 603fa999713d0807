"""The repo-server part of the twin's Argo CD: resolve a revision and read plain manifests, with real ``git``.

Only local repositories are served (``repoURL`` a path or a ``file://`` URL), read with the ``git`` binary
(``rev-parse``, ``ls-tree``, ``show``), never a Python reimplementation of git.  A ``targetRevision`` is a
branch, a tag, ``HEAD`` (or empty) or a commit SHA, resolved as Argo CD's repo server does with ``git
rev-parse <rev>^{commit}``; the manifests are the ``.yaml``/``.yml``/``.json`` files of ``path`` at that
commit (the folder's own files; its subfolders too with ``directory.recurse: true``), multi-document YAML
and ``kind: List`` documents included, as Argo CD's directory source reads them
(``reposerver/repository/repository.go``: ``findManifests``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

Obj = dict[str, Any]

GIT_TIMEOUT_SECONDS = 30.0
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class SourceError(Exception):
    """The source cannot be read (Argo CD's ComparisonError); the message is the condition's."""


@dataclass(frozen=True)
class Manifests:
    revision: str
    objects: tuple[Obj, ...]


def repository_path(repo_url: str) -> Path:
    """The local folder a ``repoURL`` names, or SourceError for a remote one (not simulated)."""
    if not repo_url:
        raise SourceError("spec.source.repoURL is required")
    parsed = urlparse(repo_url)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme or repo_url.startswith("git@"):
        raise SourceError(
            f"failed to list refs: repository {repo_url} is not reachable from the twin "
            "(only local repositories, a path or a file:// URL, are simulated)"
        )
    return Path(repo_url)


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as problem:
        raise SourceError(f"git {args[0]}: {problem}") from None
    if done.returncode != 0:
        raise SourceError((done.stderr or done.stdout).strip() or f"git {args[0]} exited with {done.returncode}")
    return done.stdout


def resolve_revision(repo_url: str, target_revision: str | None) -> str:
    """The commit SHA ``target_revision`` names in the repository (``HEAD`` when empty)."""
    repo = repository_path(repo_url)
    if not repo.is_dir():
        raise SourceError(f"failed to list refs: repository not found: {repo_url}")
    revision = (target_revision or "").strip() or "HEAD"
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").strip()
    except SourceError:
        raise SourceError(f"unable to resolve '{revision}' to a commit SHA") from None


def read_manifests(repo_url: str, revision: str, path: str, *, recurse: bool = False) -> Manifests:
    """Every Kubernetes object in the manifest files of ``path`` at commit ``revision``."""
    repo = repository_path(repo_url)
    folder = (path or ".").strip().strip("/")
    folder = "" if folder in ("", ".") else folder
    spec = f"{revision}:{folder}" if folder else f"{revision}:"
    try:
        _git(repo, "cat-file", "-e", spec)
    except SourceError:
        raise SourceError(f"{path or '.'}: app path does not exist") from None
    where = ["--", f"{folder}/"] if folder else []
    listing = _git(repo, "ls-tree", *(["-r"] if recurse else []), "--full-tree", revision, *where)
    objects: list[Obj] = []
    for line in listing.splitlines():
        meta, _, name = line.partition("\t")
        if meta.split()[1:2] != ["blob"] or not name.lower().endswith(MANIFEST_SUFFIXES):
            continue
        objects.extend(_documents(_git(repo, "show", f"{revision}:{name}"), name))
    return Manifests(revision=revision, objects=tuple(objects))


def _documents(text: str, name: str) -> list[Obj]:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as problem:
        raise SourceError(f"failed to unmarshal {name}: {problem}") from None
    found: list[Obj] = []
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, dict):
            raise SourceError(f"{name}: a manifest must be an object, got {type(document).__name__}")
        if str(document.get("kind", "")).endswith("List") and isinstance(document.get("items"), list):
            found.extend(item for item in document["items"] if isinstance(item, dict))
            continue
        for required in ("apiVersion", "kind"):
            if not document.get(required):
                raise SourceError(f"{name}: Object '{required}' is missing in '{_short(document)}'")
        if not (document.get("metadata") or {}).get("name"):
            raise SourceError(f"{name}: resource name may not be empty ({document['kind']})")
        found.append(document)
    return found


def _short(document: Obj) -> str:
    return yaml.safe_dump(document, default_flow_style=True, width=10_000).strip()[:200]
