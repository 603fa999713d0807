"""Offline stand-in for the get-pip bootstrap script that ansible-test downloads.

ansible-test runs it as ``python get_pip_<version>.py [pip options] pip==X ...``
inside a fresh virtual environment.  Instead of unpacking an embedded pip it
uses the interpreter's own ``ensurepip`` and then installs the requested
packages from the configured package index.
"""

import subprocess
import sys

# ensurepip's pip does not know these get-pip-only switches.
_GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> None:
    subprocess.run(
        [sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"], check=True, stdout=subprocess.DEVNULL
    )
    arguments = [arg for arg in sys.argv[1:] if arg not in _GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *arguments], check=True)


if __name__ == "__main__":
    main()
