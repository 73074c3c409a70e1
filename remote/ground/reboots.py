"""How long a reboot is waited for by default: the `reboot` step kind's (remote/kinds/reboot.py)
and `gpuprov remediate`'s (remote/remediation/ladder.py, `--reboot-timeout`). Light on purpose:
tasks.py shows it in `remediate --help`, and every `gpuprov` start imports tasks.py.
"""
from __future__ import annotations

# Chosen: GPU servers POST slowly; longer than Ansible's reboot module's 600 s
# (docs.ansible.com ansible.builtin.reboot, `reboot_timeout`).
REBOOT_TIMEOUT_S = 900
