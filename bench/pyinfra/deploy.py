"""The 10-step recipe of bench/noop_rerun.py (gpuprov) written as a pyinfra deploy.

bench/compare.py runs `pyinfra -y INVENTORY deploy.py`; the inventory sets `work` (this tool's
own target folder) and `motd` (the template's path) as host data. One operation or fact per
gpuprov step; where pyinfra has no exact equivalent the comment says so.
"""
import io

from pyinfra import host
from pyinfra.facts.files import File
from pyinfra.facts.hardware import Cpus
from pyinfra.facts.server import Command
from pyinfra.operations import files, server

work = host.data.work
prefix = f"{work}/{host.name}"

for i in range(4):
    # files.put compares the remote file's sha1 and mode with the local content: as gpuprov's
    # `file` with content + mode.
    files.put(name=f"file {i}", src=io.StringIO(f"line {i}\n"), dest=f"{prefix}-f{i}",
              mode="640")

files.directory(name="dir", path=f"{prefix}-d")

# pyinfra gathers no facts by default, only the ones a deploy asks for; the template and the
# assert below need the CPU count, so that one fact is read (gpuprov and Ansible gather a set).
cpus = host.get_fact(Cpus)
files.template(name="template", src=host.data.motd, dest=f"{prefix}-motd", cpus=cpus)

# Not exact: server.shell has no `creates`/`unless` guard (it always runs and reports a change).
# The pyinfra idiom is to decide with a fact while the deploy is planned: the same test on the
# host, and no operation at all (nothing to report) when the state already holds.
marker = f"{prefix}-m"
if not host.get_fact(File, path=marker):
    server.shell(name="marker", commands=[f"date > {marker}"])

unless_path = f"{prefix}-u"
unless_stat = host.get_fact(File, path=unless_path)   # `test -s`: exists and is not empty
if not (unless_stat and unless_stat.get("size")):
    server.shell(name="unless", commands=[f"echo x > {unless_path}"])

# Not exact: server.shell has no `changed_when: false` (it always counts as a change), so the
# read-only probe is a Command fact: the command runs on the host and changes nothing.
host.get_fact(Command, command="uname -r")

# `assert` over facts: a plain Python assert while planning (a failed one fails the host).
assert cpus > 0, "facts.cpus > 0"
