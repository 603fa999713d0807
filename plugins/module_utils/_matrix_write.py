# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Promotion written back into the matrix file, comments kept (collection-internal).

After a promotion the matrix says what now runs: ``canary_testing``'s
versions become ``current_production``, the production versions they replace
become the ``rollback`` entry (only the components that changed: rollback
builds on current_production), and ``canary_testing`` keeps only its status
(``promoted``) and a note: pinning nothing, it equals production, so the
planner and the audit see no change until a person writes the next one.
``next_planned``, which builds on canary_testing, keeps the same effective
versions because production now holds them.

The file is edited with ruamel.yaml's round trip, so comments, quoting and
key order survive, including inside the ConfigMap form's embedded
``matrix.yaml`` text, and written atomically (``write_text_atomically``).
Optionally the change is committed to Git and tagged ``vYYYY-MM-stable``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import os
import shlex
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError, InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    CONFIGMAP_DATA_KEY,
    METADATA_KEYS,
    VERSIONS_FORM_KEYS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

try:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import CommentMark, YAMLError
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString
    from ruamel.yaml.tokens import CommentToken

    HAS_RUAMEL = True
    RUAMEL_IMPORT_ERROR: Optional[str] = None
except ImportError:
    HAS_RUAMEL = False
    RUAMEL_IMPORT_ERROR = traceback.format_exc()

PRODUCTION_NAMES = ("current_production", "current")
CANARY_NAMES = ("canary_testing", "canary")
ROLLBACK_NAMES = ("rollback",)


class GitError(GpuFleetError):
    """A git command failed; ``msg`` carries git's own words."""


@dataclass
class Promotion:
    """The promoted matrix and what moved where."""

    text: str
    changed: bool
    form: str
    message: str
    promoted: Dict[str, str] = field(default_factory=dict)  # component -> version now in production
    rollback: Dict[str, str] = field(default_factory=dict)  # component -> version production had

    def as_dict(self) -> Dict[str, Any]:
        return {
            "changed": self.changed,
            "form": self.form,
            "message": self.message,
            "promoted": dict(self.promoted),
            "rollback": dict(self.rollback),
        }


def _yaml() -> Any:
    if not HAS_RUAMEL:
        raise InvalidInputError("ruamel.yaml is required to write the matrix back with its comments")
    handler = YAML()
    handler.preserve_quotes = True
    handler.width = 4096
    handler.indent(mapping=2, sequence=4, offset=2)
    return handler


def _load(text: str, *, source: str) -> Any:
    try:
        return _yaml().load(text)
    except YAMLError as err:
        raise InvalidInputError(f"{source} is not valid YAML: {str(err).splitlines()[0]}") from err


def _dump(data: Any) -> str:
    stream = io.StringIO()
    _yaml().dump(data, stream)
    return stream.getvalue()


def _find(document: Any, names: Sequence[str]) -> Tuple[Optional[str], Optional[Any]]:
    for name in names:
        if name in document:
            return name, document[name]
    return None, None


# Comments after a mapping's last entry are held by that entry in ruamel.yaml
# (``ca.items[last][2]``): they are what precedes the next top-level key, the
# blank line included, so they move with the position, not with the entry.
def _split_trailing(mapping: Any) -> Tuple[str, str]:
    """(end-of-line comment of the last entry, the lines that follow it)."""
    if not isinstance(mapping, CommentedMap) or not mapping:
        return "", ""
    slots = mapping.ca.items.get(list(mapping)[-1])
    if not slots or len(slots) < 3 or slots[2] is None:
        return "", ""
    value = str(slots[2].value)
    if value.startswith("#"):
        head, _newline, rest = value.partition("\n")
        return head, rest
    return "", value[1:] if value.startswith("\n") else value


def _set_trailing(mapping: Any, *, eol: str, following: str) -> None:
    if not isinstance(mapping, CommentedMap) or not mapping:
        return
    slots = mapping.ca.items.setdefault(list(mapping)[-1], [None, None, None, None])
    while len(slots) < 4:
        slots.append(None)
    slots[2] = CommentToken(f"{eol}\n{following}", CommentMark(0), None) if eol or following else None


def _append_keeping_trailing(mapping: Any, key: Any, value: Any) -> None:
    """Add a last entry; what followed the old last entry now follows the new one."""
    eol, following = _split_trailing(mapping)
    _set_trailing(mapping, eol=eol, following="")
    mapping[key] = value
    _set_trailing(mapping, eol="", following=following)


def _quoted(value: Any) -> Any:
    return DoubleQuotedScalarString(str(value))


def _canonical(key: str, *, versions_form: bool) -> str:
    return VERSIONS_FORM_KEYS.get(key, key) if versions_form else key


def promote_document(document: Any, *, promoted_on: str, note: str, versions_form: bool, source: str) -> Promotion:
    """Promote in place on a round-trip mapping of stages; returns what moved (nothing when the canary pins
    nothing that differs from production, as after a promotion: running it twice changes nothing)."""
    if not isinstance(document, CommentedMap):
        raise InvalidInputError(f"{source}: expected a mapping of stages")
    production_name, production = _find(document, PRODUCTION_NAMES)
    canary_name, canary = _find(document, CANARY_NAMES)
    if production is None:
        raise InvalidInputError(f"{source}: no current_production stage to promote into")
    if canary is None:
        return Promotion(text="", changed=False, form="", message="no canary_testing stage: nothing to promote")
    # ``written``: canonical component name -> the key spelling this file uses.
    written = {_canonical(str(key), versions_form=versions_form): key for key in production}
    moves = []
    for key, value in canary.items():
        name = _canonical(str(key), versions_form=versions_form)
        if name in METADATA_KEYS:
            continue
        target_key = written.get(name, key)
        old = production.get(target_key)
        if old is None or str(old) != str(value):
            moves.append((name, target_key, value, old))
    if not moves:
        return Promotion(
            text="",
            changed=False,
            form="",
            message=f"{canary_name} pins nothing that differs from {production_name}: nothing to promote",
        )
    promoted: Dict[str, str] = {}
    rollback: Dict[str, str] = {}
    for name, target_key, value, old in moves:
        promoted[name] = str(value)
        if old is not None:
            rollback[name] = str(old)
        if target_key in production:
            production[target_key] = _quoted(value)
            continue
        # New components go before the metadata (status, notes...) so the block stays readable.
        position = next(
            (
                index
                for index, existing in enumerate(production)
                if _canonical(str(existing), versions_form=versions_form) in METADATA_KEYS
            ),
            len(production),
        )
        if position < len(production):
            production.insert(position, target_key, _quoted(value))
        else:
            _append_keeping_trailing(production, target_key, _quoted(value))
        written[name] = target_key
    # canary_testing stays, pinning nothing (so it equals production and every
    # tool that plans towards it sees no change) until a person writes the next change.
    _eol, following = _split_trailing(canary)
    emptied = CommentedMap()
    emptied["status"] = _quoted("promoted")
    emptied["notes"] = _quoted(f"Promoted to {production_name} on {promoted_on}; write the next change here.")
    if canary.ca.comment:
        emptied.ca.comment = canary.ca.comment
    document[canary_name] = emptied
    _set_trailing(emptied, eol="", following=following)
    message = "promoted " + ", ".join(
        f"{name} {rollback.get(name, '(new)')} -> {version}" for name, version in promoted.items()
    )
    _set_metadata(production, "status", "production")
    _set_metadata(production, "deployed", promoted_on)
    if note:
        _set_metadata(production, "notes", note)
    if rollback:
        _write_rollback(document, rollback, promoted_on=promoted_on, versions_form=versions_form, written=written)
    return Promotion(text="", changed=True, form="", message=message, promoted=promoted, rollback=rollback)


def _set_metadata(stage: Any, key: str, value: str) -> None:
    if key in stage:
        stage[key] = _quoted(value)
    else:
        _append_keeping_trailing(stage, key, _quoted(value))


def _write_rollback(
    document: Any, rollback: Dict[str, str], *, promoted_on: str, versions_form: bool, written: Dict[str, str]
) -> None:
    """The rollback entry becomes the production versions just replaced (it builds on current_production)."""
    name, existing = _find(document, ROLLBACK_NAMES)
    fresh = CommentedMap()
    for component, version in rollback.items():
        fresh[written.get(component, component)] = _quoted(version)
    fresh["status"] = _quoted("rollback-available")
    fresh["notes"] = _quoted(f"Production until {promoted_on}; restore with stage=rollback.")
    if existing is None:
        document["rollback"] = fresh
        return
    _eol, following = _split_trailing(existing)
    if isinstance(existing, CommentedMap) and existing.ca.comment:
        fresh.ca.comment = existing.ca.comment
    document[name] = fresh
    _set_trailing(fresh, eol="", following=following)


def promote_matrix_text(text: str, *, source: str, promoted_on: str, note: str = "") -> Promotion:
    """The matrix file's text after promotion (stages, ConfigMap and ``versions`` forms)."""
    outer = _load(text, source=source)
    if isinstance(outer, CommentedMap) and outer.get("kind") == "ConfigMap":
        data = outer.get("data")
        if not isinstance(data, CommentedMap) or not isinstance(data.get(CONFIGMAP_DATA_KEY), str):
            raise InvalidInputError(f"{source}: a ConfigMap matrix keeps its stages under data.{CONFIGMAP_DATA_KEY}")
        inner = _load(str(data[CONFIGMAP_DATA_KEY]), source=f"{source} data.{CONFIGMAP_DATA_KEY}")
        result = promote_document(inner, promoted_on=promoted_on, note=note, versions_form=False, source=source)
        if result.changed:
            data[CONFIGMAP_DATA_KEY] = LiteralScalarString(_dump(inner))
        result.form = "configmap"
    elif isinstance(outer, CommentedMap) and isinstance(outer.get("versions"), CommentedMap):
        result = promote_document(
            outer["versions"], promoted_on=promoted_on, note=note, versions_form=True, source=source
        )
        result.form = "versions"
    else:
        result = promote_document(outer, promoted_on=promoted_on, note=note, versions_form=False, source=source)
        result.form = "stages"
    result.text = _dump(outer) if result.changed else text
    return result


def write_text_atomically(path: str, text: str, *, mode: int = 0o644) -> None:
    """Write through a temporary file in the same directory, then rename it over the target.

    A reader (or a crash) sees the old file or the new one, never half of one:
    a rename is atomic within one file system, which is why the temporary
    file lives beside the target and not in /tmp. The target's mode is kept.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        if os.path.exists(path):
            mode = os.stat(path).st_mode & 0o7777
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except OSError:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def matrix_folder_lock(path: str, *, timeout: float, sleep: float = 0.2) -> Iterator[float]:
    """Hold an exclusive lock on the matrix file's folder while a promotion reads, rewrites, commits and pushes it.

    A fleet promotion runs ``matrix_promote`` for every cluster at once (one
    fork each) on the same file: without the lock two of them read the same
    text, both write it, and their ``git add``/``commit``/``tag`` collide on
    the repository's ``index.lock``. With it they take turns, and the later
    ones find the matrix promoted already (no change, no second commit).
    The folder is locked, not the file: the file is replaced by a rename, so
    a lock on it would be left behind on the old inode, and the folder is
    also where Git works. ``flock`` locks go with the process, so a killed
    run leaves none behind. Yields the seconds waited.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError as err:
        raise InvalidInputError(f"Cannot open the matrix folder {directory}: {err.strerror}") from err

    def locked() -> bool:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        waited = wait_until(
            locked,
            bool,
            timeout=timeout,
            sleep=sleep,
            what=f"another promotion of a matrix in {directory} to finish",
        )
        yield waited.elapsed
    finally:
        # Closing the descriptor releases the lock.
        os.close(handle)


def promote_matrix_file(path: str, *, promoted_on: str, note: str = "", check_mode: bool = False) -> Promotion:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise InvalidInputError(f"Cannot read the matrix file {path}: {err.strerror}") from err
    result = promote_matrix_text(text, source=path, promoted_on=promoted_on, note=note)
    if result.changed and not check_mode:
        try:
            write_text_atomically(path, result.text)
        except OSError as err:
            raise InvalidInputError(f"Cannot write the matrix file {path}: {err.strerror}") from err
    return result


# -- Git --------------------------------------------------------------------------------------------

RunCommand = Callable[[List[str]], Tuple[int, str, str]]
# A command run with extra environment variables (the push's credential travels there, never in argv).
RunCommandWithEnv = Callable[[List[str], Dict[str, str]], Tuple[int, str, str]]


def stable_tag(promoted_on: str) -> str:
    """``vYYYY-MM-stable`` for a promotion date ``YYYY-MM-DD``."""
    return f"v{promoted_on[:7]}-stable"


def git_commit_and_tag(
    run: RunCommand,
    *,
    path: str,
    message: str,
    tag: str = "",
    author_name: str = "gpufleet.upgrade",
    author_email: str = "gpufleet-upgrade@localhost",
    also: Sequence[str] = (),
) -> Dict[str, Any]:
    """Commit the matrix file (only it, and the files in ``also``) and tag the commit; an existing tag is left
    where it is and reported."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    identity = ["-c", f"user.name={author_name}", "-c", f"user.email={author_email}"]

    def git(*arguments: str) -> str:
        code, out, err = run(["git", "-C", directory, *identity, *arguments])
        if code != 0:
            raise GitError(f"git {' '.join(arguments)} failed: {(err or out).strip()}")
        return out.strip()

    git("rev-parse", "--show-toplevel")  # inside a work tree, or say so
    # Pathspecs are relative to the directory git runs in (-C).
    relative = [os.path.basename(path)] + [os.path.relpath(os.path.abspath(other), directory) for other in also]
    git("add", "--", *relative)
    staged = run(["git", "-C", directory, "diff", "--cached", "--quiet", "--", *relative])[0]
    result: Dict[str, Any] = {"committed": False, "commit": "", "tag": "", "tag_existed": False}
    if staged != 0:
        git("commit", "--no-verify", "-m", message, "--", *relative)
        result["committed"] = True
    result["commit"] = git("rev-parse", "HEAD")
    if tag:
        existing = git("tag", "--list", tag)
        if existing:
            result["tag_existed"] = True
            result["tag"] = tag
        else:
            git("tag", "-a", tag, "-m", message)
            result["tag"] = tag
    return result


@dataclass(frozen=True)
class PushRequest:
    """Where and how to push a promotion's commit (and tag)."""

    remote: str = "origin"
    # Remote branch to push HEAD to; empty means the checked-out branch's own name.
    branch: str = ""
    push_tag: bool = True
    # HTTPS: a token sent as HTTP basic auth (user ``username``); SSH: a private key file.
    token: str = ""
    username: str = "git"
    ssh_key_file: str = ""


def push_environment(request: PushRequest) -> Dict[str, str]:
    """Environment for ``git push``: never prompt; the credential as config in the environment, not in argv."""
    env = {"GIT_TERMINAL_PROMPT": "0"}
    if request.token:
        basic = base64.b64encode(f"{request.username}:{request.token}".encode("utf-8")).decode("ascii")
        # GIT_CONFIG_COUNT/KEY/VALUE (git >= 2.31) keep the header out of the process list and of .git/config.
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=f"Authorization: Basic {basic}",
        )
    if request.ssh_key_file:
        env["GIT_SSH_COMMAND"] = f"ssh -i {shlex.quote(request.ssh_key_file)} -o IdentitiesOnly=yes -o BatchMode=yes"
    return env


def push_refspecs(*, branch: str, tag: str, push_tag: bool) -> List[str]:
    refspecs = [f"HEAD:refs/heads/{branch}"]
    if tag and push_tag:
        refspecs.append(f"refs/tags/{tag}:refs/tags/{tag}")
    return refspecs


def pushed_refs(porcelain: str) -> List[Dict[str, str]]:
    """The refs ``git push --porcelain`` reports, each with whether the remote moved (flag other than ``=``)."""
    refs = []
    for line in porcelain.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[0][:1] in (" ", "+", "-", "*", "=", "!"):
            refs.append({"flag": parts[0][:1], "ref": parts[1].split(":")[-1], "summary": parts[2].strip()})
    return refs


def git_push(run: RunCommandWithEnv, *, path: str, tag: str, request: PushRequest) -> Dict[str, Any]:
    """Push HEAD (and the promotion's tag) to the remote; a refused or failed push raises, naming what stayed local."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    env = push_environment(request)
    commit = run(["git", "-C", directory, "rev-parse", "HEAD"], env)[1].strip()
    branch = request.branch
    if not branch:
        code, out, err = run(["git", "-C", directory, "symbolic-ref", "--quiet", "--short", "HEAD"], env)
        if code != 0 or not out.strip():
            raise GitError(
                f"commit {commit} is only local: HEAD is detached (as in an AWX project checkout), "
                "so name the remote branch to push to (git_push_branch)",
                result={"git_push": {"pushed": False, "remote": request.remote, "commit": commit}},
            )
        branch = out.strip()
    if tag and run(["git", "-C", directory, "rev-parse", "--quiet", "--verify", f"refs/tags/{tag}"], env)[0] != 0:
        tag = ""  # a re-run on a fresh checkout: the promotion's tag was made (and pushed) elsewhere
    refspecs = push_refspecs(branch=branch, tag=tag, push_tag=request.push_tag)
    # --atomic: the branch and the tag move together or not at all (a tag without its branch misleads).
    code, out, err = run(["git", "-C", directory, "push", "--porcelain", "--atomic", request.remote, *refspecs], env)
    refs = pushed_refs(out)
    outcome = {
        "pushed": code == 0,
        "remote": request.remote,
        "branch": branch,
        "commit": commit,
        "tag": tag if tag and request.push_tag else "",
        "refs": refs,
        "changed": code == 0 and any(ref["flag"] != "=" for ref in refs),
    }
    if code != 0:
        words = " ".join((err or out).split())
        raise GitError(
            f"commit {commit}{' and tag ' + tag if tag else ''} are only local: git push to {request.remote} "
            f"({', '.join(refspecs)}) failed: {words}",
            result={"git_push": outcome},
        )
    return outcome
