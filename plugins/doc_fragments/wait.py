# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

# The wait options, kubernetes.core's names (wait, wait_timeout, wait_sleep),
# mirrored by wait_argument_spec() in plugins/module_utils/_module.py. Each
# option is documented once; a module extends the ones it has:
#   gpufleet.upgrade.wait          wait
#   gpufleet.upgrade.wait.timeout  wait_timeout
#   gpufleet.upgrade.wait.sleep    wait_sleep
# A module whose work needs another default documents it over the fragment's,
# saying why.

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  wait:
    description:
      - Wait until the change is done (the module's description says what done is), bounded by O(wait_timeout).
      - Without it the module returns once its writes are made.
    type: bool
    default: true
"""

    TIMEOUT = r"""
options:
  wait_timeout:
    description:
      - How many seconds the wait may take in total. On timeout the task fails with how far things got.
    type: int
    default: 3600
"""

    SLEEP = r"""
options:
  wait_sleep:
    description:
      - Seconds between two looks at what is awaited (fractions allowed).
    type: float
    default: 10
"""
