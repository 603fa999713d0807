"""Every command the README shows parses and names files and make targets that exist.

The commands are read from the README's ``bash`` blocks; tests/integration/test_readme_fresh_clone.py
runs the cheap ones in a fresh clone.
"""

from __future__ import annotations

import pathlib
import re
import shlex
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The two set-up commands that stay on the first screen.
FIRST_SCREEN = ("make demo", "make test")


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def repo_paths(command: str) -> list[str]:
    """Arguments that name a file of the repository (playbooks/..., examples/..., docs/...)."""
    found = []
    for word in words(command):
        value = word.split("=", 1)[1] if word.startswith(("-e", "audit_matrix_file=")) and "=" in word else word
        if re.match(r"^(playbooks|examples|docs|roles|scripts|bench|twin|requirements)/", value):
            found.append(value)
    return found


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.M))


def test_the_first_screen_keeps_its_two_commands():
    commands = readme_commands()
    assert commands[:2] == list(FIRST_SCREEN)


@pytest.mark.parametrize("command", readme_commands())
def test_each_command_parses_and_names_what_exists(command):
    checked = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    argv = words(command)
    # Leading VAR=value assignments are the environment, not the program.
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv.pop(0)
    if argv[0] == "make":
        assert set(argv[1:]) <= make_targets(), command
    for path in repo_paths(command):
        assert (ROOT / path).exists(), f"{command}: {path} does not exist"
    if argv[0].startswith(".venv/bin/") or argv[0] in ("ansible-playbook", "ansible-galaxy", "kubectl", "source"):
        return
    assert argv[0] in ("make", "kubectl"), f"{command}: a program the README does not set up"
