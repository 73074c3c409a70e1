"""Invoke tasks: the command line of gpuprov. Thin: options in, the command's module
(remote/commands/, through its table's `call`) does the work, exit out.

The installed `gpuprov` command runs these same tasks (remote/program.py); in a clone `invoke
TASK` does too. `gpuprov --help` lists them, `gpuprov TASK --help` shows each one's options.
Options have Ansible's names and short flags where Ansible has one (`-i`, `-l`, `-e`, `-C`,
`-D`, `-f`, `-v`, `-t`, `-K`); `-h` is always help.
"""
from functools import partial
from typing import Any

from invoke import Exit, Task, task

from remote.commands import call
from remote.ground.ages import DEFAULT_MAX_AGE
from remote.ground.exitcodes import EXIT_INPUT
from remote.ground.forks import DEFAULT_FORKS
from remote.ground.reboots import REBOOT_TIMEOUT_S
from remote.ground.runfolder import LOGS_DIR
from validate.shared import BUG_REPORT_FULL_TIMEOUT_S, BUG_REPORT_SAFE_TIMEOUT_S

INVENTORY = "./inventory.yaml, else ~/.config/gpuprov/inventory.yaml"
RECIPE = "site.yaml shipped with gpuprov"
# Invoke's own options, under `invoke`: none reaches gpuprov's SSH work, so a run with one set
# would do something else than asked (`invoke --dry provision` would change hosts).
INVOKE_ONLY = {"dry": "--dry (for a dry run: provision --check)", "echo": "--echo",
               "hide": "--hide", "pty": "--pty", "warn": "--warn-only"}


class GpuprovTask(Task):
    """An Invoke task whose options may have more names than their own: `short` maps an
    option to extra names (`{"inventory": ["i"], "var": ["extra-vars", "e"]}`)."""

    def __init__(self, *args: Any, short: Any = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.short = short or {}

    def get_arguments(self, ignore_unknown_help: Any = None) -> Any:
        args = super().get_arguments(ignore_unknown_help)
        for arg in args:
            extra = self.short.get(arg.attr_name or arg.name, ())
            arg.names = tuple(arg.names) + tuple(extra)
        return args


# Every option is a flag (`--host gpu1`), never a positional word, so `TASK --help` is help and
# not a host named '--help'; short flags only where given, so `-h` stays help.
task = partial(task, positional=[], auto_shortflags=False, klass=GpuprovTask)
SHORT = {"inventory": ["i"], "limit": ["l"], "var": ["extra-vars", "e"], "check": ["C"],
         "diff": ["D"], "forks": ["f"], "verbose": ["v"], "tags": ["t"],
         "ask_become_pass": ["K"]}
HOST = "hosts: a name, a group, a glob, 'all'; ',' or ':' joins, '!x' leaves x out, '&x' keeps only x"
LIMIT = "narrow the hosts further, same patterns as --host (Ansible's -l); alone it applies to all"
LIST_HOSTS = "print the hosts selected and exit; contact none"
FORKS = f"how many hosts to work on at once (default {DEFAULT_FORKS})"
VERBOSE = ("show each step's output live, line by line with the host name; -vv: also the "
           "commands each step ran, under its line (secrets masked)")
JSON = "also write per-host results as JSON to this file; '-' writes only the JSON to stdout"
JUNIT = "also write JUnit XML to this file (a testsuite per host, a testcase per step and check)"
SERIAL = ("canary rollout: hosts in batches of N, N% of them, or a list (1,10,50%), in "
          "inventory order; each batch done before the next starts (Ansible's serial)")
MAX_FAIL = ("with --serial: stop at the first batch where more than P% of its hosts failed "
            "(default 0: the first failure stops; a batch that failed whole always stops)")
EVIDENCE = ("after a validation whose action is 'drain and replace (RMA)', gather the host's "
            "evidence as gpuprov evidence does (default; --no-evidence leaves it out)")


def _refuse_invoke_options(c) -> None:
    """Under `invoke`, its core options are set in `c.config`; refuse each (exit 2)."""
    run = c.config.get("run", {})
    given = [text for key, text in INVOKE_ONLY.items() if run.get(key)]
    if c.config.get("sudo", {}).get("password"):
        given.append("--prompt-for-sudo-password (use --ask-become-pass)")
    if given:
        raise Exit(f"error: invoke option {', '.join(given)} does not apply to gpuprov; run "
                   "without it", code=EXIT_INPUT)


def _exit(status: int) -> None:
    if status:
        raise Exit(code=status)


def _inventory(given):
    from remote.ground import paths
    from remote.ground.errors import InputError

    try:
        return paths.inventory_path(given)
    except InputError as exc:
        raise Exit(f"error: {exc}", code=EXIT_INPUT) from None


def _need_host(host, limit, task_name: str) -> None:
    if host is None and limit is None:
        raise Exit(f"error: {task_name}: --host is required, e.g. --host gpu1 "
                   f"(see {task_name} --help)", code=EXIT_INPUT)


@task(
    iterable=["var"], incrementable=["verbose"], short=SHORT,
    help={
        "host": HOST, "limit": LIMIT,
        "recipe": f"recipe file, or the name of a shipped one such as cuda-wheels.yaml "
                  f"(default {RECIPE})",
        "inventory": f"inventory file (default {INVENTORY})",
        "check": "probe only: report what would change and the exact commands; change nothing",
        "diff": "show a unified diff of what file and template steps change (or would, with -C)",
        "tags": "run only steps with one of these tags (comma list); 'always' steps run too",
        "skip-tags": "leave out steps with one of these tags (comma list)",
        "var": "set variables: NAME=VALUE, a JSON object, or @FILE.yaml (repeatable; "
               "overrides every other level)",
        "forks": FORKS, "verbose": VERBOSE, "list-hosts": LIST_HOSTS, "json": JSON,
        "junit": JUNIT,
        "ask-become-pass": "prompt for the sudo password (else $GPUPROV_BECOME_PASSWORD)",
        "validate": "after the recipe, push validate/ and run it (default; --no-validate skips)",
        "suite": "validation suite: quick (default) or full",
        "serial": SERIAL + "; overrides the recipe's serial:",
        "max-fail-percentage": MAX_FAIL + "; overrides the recipe's max_fail_percentage:",
        "evidence": EVIDENCE,
        "bundle": "install from this bundle (gpuprov bundle) only: checked first, pushed once "
                  "per host, apt and pip read nothing else (air-gapped sites)",
        "bundle-key": "the fingerprint of the site key that must have signed the bundle "
                      "(gpuprov bundle --sign-key); with --bundle-keyring",
        "bundle-keyring": "the file holding that key's public half (gpg --export FINGERPRINT), "
                          "carried to this machine out of band",
        "bundle-sha256": "the sha256 the bundle must have (as gpuprov bundle printed it), "
                         "given out of band; instead of or beside --bundle-key",
    },
)
def provision(c, host=None, limit=None, recipe=None, inventory=None, check=False, diff=False,
              tags="", skip_tags="", var=None, forks=None, verbose=0, list_hosts=False,
              json=None, junit=None, ask_become_pass=False, validate=True, suite="quick",
              serial=None, max_fail_percentage=None,
              evidence=True, bundle=None, bundle_key="", bundle_keyring="", bundle_sha256=""):
    """Apply a recipe to hosts over SSH, idempotently and in parallel, then validate them."""
    from remote.ground import paths

    _refuse_invoke_options(c)
    _need_host(host, limit, "provision")
    inventory = _inventory(inventory)
    _exit(call("provision", host=host, limit=limit, recipe=paths.recipe_path(recipe),
                        inventory=inventory, check=check, diff=diff, tags=tags,
                        skip_tags=skip_tags, var=var, forks=forks, verbose=verbose,
                        list_hosts=list_hosts, json_path=json, junit_path=junit,
                        ask_become_pass=ask_become_pass, validate=validate, suite=suite,
                        serial=serial, max_fail_percentage=max_fail_percentage,
                        evidence=evidence, bundle=bundle, bundle_key=bundle_key,
                        bundle_keyring=bundle_keyring, bundle_sha256=bundle_sha256))


@task(short=SHORT, help={"host": HOST, "limit": LIMIT,
                         "inventory": f"inventory file (default {INVENTORY})",
                         "list-hosts": LIST_HOSTS,
                         "json": "also write the facts as JSON to this file; '-' writes only "
                                 "the JSON to stdout"})
def facts(c, host=None, limit=None, inventory=None, list_hosts=False, json=None):
    """Gather and show facts (OS, CPUs, memory, GPUs, driver, CUDA, cuDNN...) in one round trip."""
    _refuse_invoke_options(c)
    _need_host(host, limit, "facts")
    inventory = _inventory(inventory)
    _exit(call("facts", host=host, limit=limit, inventory=inventory, list_hosts=list_hosts,
                    json_path=json))


@task(
    iterable=["var"], incrementable=["verbose"], short=SHORT,
    help={"host": HOST, "limit": LIMIT,
          "inventory": f"inventory file (default {INVENTORY})",
          "suite": "quick (system, cuDNN, torch, a few models) or full (every check)",
          "json": JSON, "junit": JUNIT,
          "var": "set variables: NAME=VALUE, a JSON object, or @FILE.yaml "
                 "(e.g. validate_python=/opt/venv/bin/python)",
          "forks": FORKS, "verbose": VERBOSE, "list-hosts": LIST_HOSTS,
          "drain-failed": "Slurm clusters: drain the nodes that did not pass, with the reason",
          "resume-passed": "Slurm clusters: validate again the nodes gpuprov drained, resume "
                           "those that pass",
          "serial": SERIAL, "max-fail-percentage": MAX_FAIL,
          "evidence": EVIDENCE,
          "sweep": "Slurm clusters: validate only the idle nodes, in batches, as jobs of "
                   "slurm.sweep_partition that real work preempts (a preempted node is not "
                   "validated, never failed)",
          "max-age": f"with --sweep: skip nodes whose latest validation started within this "
                     f"(s, m, h, d, w: 24h, 7d; default {DEFAULT_MAX_AGE})",
          "distributed": "after each node's own validation, one multi-node PyTorch job "
                         "(torchrun) across the nodes that passed: all-reduce, a training step "
                         "(docs/how-to/multi-node.md)",
          "prometheus": "with --distributed: also write each node's part in the job in the "
                        "Prometheus text format to this file",
          "container": "validate inside this image (podman or docker on SSH hosts; on Slurm, "
                       "pyxis or srun --container with an OCI bundle's path); never pulled"},
)
def validate(c, host=None, limit=None, inventory=None, suite="quick", json=None, junit=None,
             var=None, forks=None, verbose=0, list_hosts=False, drain_failed=False,
             resume_passed=False, serial=None, max_fail_percentage=None, evidence=True,
             sweep=False, max_age=None, distributed=False, prometheus=None,
             container=None):
    """Push validate/ to hosts, run it there, pull the results into logs/<host>/<run>/.
    A host with slurm: validates its partition's nodes through Slurm instead."""
    _refuse_invoke_options(c)
    _need_host(host, limit, "validate")
    inventory = _inventory(inventory)
    _exit(call("validate", host=host, limit=limit, inventory=inventory, suite=suite, json_path=json,
                       junit_path=junit, var=var, forks=forks, verbose=verbose,
                       list_hosts=list_hosts, drain_failed=drain_failed,
                       resume_passed=resume_passed, serial=serial,
                       max_fail_percentage=max_fail_percentage, evidence=evidence,
                       sweep=sweep, max_age=max_age, distributed=distributed,
                       prometheus=prometheus, container=container))


@task(
    iterable=["var"], short=SHORT,
    help={"host": HOST + "; at least 2 nodes", "limit": LIMIT,
          "inventory": f"inventory file (default {INVENTORY})",
          "json": JSON,
          "junit": "also write JUnit XML to this file (a testsuite per node, a testcase per "
                   "pair it sent)",
          "prometheus": "also write each pair's figure and each node's verdict in the "
                        "Prometheus text format to this file",
          "html": "also write the matrix of pairs as an HTML heat map to this file",
          "var": "set variables: fabric_seconds=N (each test, default 3), fabric_tool=iperf3, "
                 "fabric_floor='{\"iperf3\": 20}' (floor per tool, in its unit), "
                 "fabric_relative=0.5 (slow below this share of the median), "
                 "fabric_ports=49152-65471 (the servers' ports)",
          "list-hosts": LIST_HOSTS,
          "ask-become-pass": "prompt for the sudo password (else $GPUPROV_BECOME_PASSWORD)",
          "drain-failed": "Slurm clusters: drain the suspect nodes, with the reason, through "
                          "the login node selected with them"},
)
def fabric(c, host=None, limit=None, inventory=None, json=None, junit=None, prometheus=None,
           html=None, var=None, list_hosts=False, drain_failed=False, ask_become_pass=False):
    """Pairwise tests across nodes (ib_write_bw, all_reduce_perf or iperf3): name the bad node or link."""
    _refuse_invoke_options(c)
    _need_host(host, limit, "fabric")
    inventory = _inventory(inventory)
    _exit(call("fabric", host=host, limit=limit, inventory=inventory, json_path=json,
                     junit_path=junit, prometheus=prometheus, html=html, var=var,
                     list_hosts=list_hosts, drain_failed=drain_failed,
                     ask_become_pass=ask_become_pass))


@task(short=SHORT, help={"host": "hosts to fetch from (patterns as in provision --help)",
                         "limit": LIMIT, "inventory": f"inventory file (default {INVENTORY})",
                         "list-hosts": LIST_HOSTS})
def logs(c, host=None, limit=None, inventory=None, list_hosts=False):
    """Pull what the last validation left on hosts into logs/<host>/<run>/."""
    _refuse_invoke_options(c)
    _need_host(host, limit, "logs")
    inventory = _inventory(inventory)
    _exit(call("logs", host=host, limit=limit, inventory=inventory, list_hosts=list_hosts))


@task(short=SHORT, help={"host": "hosts to gather from (patterns as in provision --help)",
                         "limit": LIMIT, "inventory": f"inventory file (default {INVENTORY})",
                         "list-hosts": LIST_HOSTS,
                         "bug-report-timeout": "seconds for nvidia-bug-report.sh's full run, and "
                                               "again for its --safe-mode run when the full one "
                                               f"hangs (default {BUG_REPORT_FULL_TIMEOUT_S:g}, then "
                                               f"{BUG_REPORT_SAFE_TIMEOUT_S:g})"})
def evidence(c, host=None, limit=None, inventory=None, list_hosts=False, bug_report_timeout=None):
    """Gather evidence for a GPU replacement into logs/<host>/<run>/evidence-<host>-<serials>.tar.gz."""
    _refuse_invoke_options(c)
    _need_host(host, limit, "evidence")
    inventory = _inventory(inventory)
    _exit(call("evidence", host=host, limit=limit, inventory=inventory, list_hosts=list_hosts,
                       bug_report_timeout=bug_report_timeout))


@task(
    iterable=["var"], incrementable=["verbose"], short=SHORT,
    help={"host": HOST, "limit": LIMIT, "inventory": f"inventory file (default {INVENTORY})",
          "check": "print the plan (node, finding, action, next step, who waits for the "
                   "breaker) and change nothing",
          "max-out": "at most K nodes, or P% of the pool (rounded down, at least 1), out of "
                     "service for remediation at once (default 1); the rest wait",
          "reboot-timeout": f"seconds a rebooted node has to come back (default "
                            f"{REBOOT_TIMEOUT_S:g}; on Slurm, at least until Slurm's own "
                            "verdict at the cluster's ResumeTimeout)",
          "suite": "the re-validation's suite: quick (default) or full",
          "logs-dir": f"where the verdicts are read and the records written (default {LOGS_DIR})",
          "var": "set variables: NAME=VALUE, a JSON object, or @FILE.yaml (the profile the "
                 "nodes are validated again with)",
          "forks": FORKS, "verbose": VERBOSE, "list-hosts": LIST_HOSTS},
)
def remediate(c, host=None, limit=None, inventory=None, check=False, max_out=None,
              reboot_timeout=None, suite="quick", logs_dir=LOGS_DIR, var=None, forks=None,
              verbose=0, list_hosts=False):
    """Repair the nodes whose latest verdict names an action: out, act, validate again, back."""
    _refuse_invoke_options(c)
    _need_host(host, limit, "remediate")
    inventory = _inventory(inventory)
    _exit(call("remediate", host=host, limit=limit, inventory=inventory, check=check,
               max_out=max_out, reboot_timeout=reboot_timeout, suite=suite, logs_dir=logs_dir,
               var=var, forks=forks, verbose=verbose, list_hosts=list_hosts))


@task(help={"logs": f"folder of {LOGS_DIR}/<host>/<run>/ to read (default {LOGS_DIR})",
            "out": "where to write the report (default reports/<time>/)",
            "baseline": "compare with this run id, host, or HOST/RUN instead of each host's previous run",
            "threshold": "percent slower that counts as an outlier or a regression "
                         "(default: 15 for outliers, 10 for regressions)",
            "fail-on-outlier": "exit 1 when a slow host or a regression is flagged",
            "prometheus": "also write each host's latest verdicts and bench figures in the "
                          "Prometheus text format to this file (node_exporter's textfile "
                          "collector)",
            "quarantine": "K/N: flag a host for quarantine when it failed K of its last N "
                          "runs (default 2/3)",
            "json": "also write flags.json's document (history included) to this file; '-' "
                    "writes it on stdout and the printed report on stderr",
            "repair-window": "N: a repair that worked and is followed by a failed run within "
                             "the node's next N runs did not hold (default 3)"})
def report(c, logs=LOGS_DIR, out=None, baseline=None, threshold=None, fail_on_outlier=False,
           prometheus=None, quarantine=None, json=None, repair_window=None):
    """Compare benchmark logs across hosts and runs: merged table, slow hosts, regressions, HTML."""
    _refuse_invoke_options(c)
    _exit(call("report", logs=logs, out=out, baseline=baseline, threshold=threshold,
                     fail_on_outlier=fail_on_outlier, prometheus=prometheus,
                     quarantine=quarantine, json_path=json, repair_window=repair_window))


@task(help={"cuda": "only this row of playbooks/stack.yaml (default: every row)",
            "torch-index": "lock the row's torch from this index (PyTorch's, e.g. "
                           "https://download.pytorch.org/whl/cu130; needs --cuda). A URL with "
                           "a password: set $GPUPROV_TORCH_INDEX instead, which no other user "
                           "of this machine can read",
            "out": "folder to write the locks to (default: playbooks/locks shipped with gpuprov)",
            "apt": "lock the apt route instead: exact versions of the CUDA toolkit, cuDNN and the "
                   "driver branch from NVIDIA's repository index (run where it can be reached)",
            "apt-repo": "with --apt: only this NVIDIA repository, e.g. ubuntu2404/x86_64 "
                        "(default: every one of stack.yaml's cuda_keyring_sha256s)",
            "apt-base": "with --apt: read the index from this mirror of NVIDIA's repositories "
                        "(default: stack.yaml's nvidia_repo_base)"})
def lock(c, cuda=None, torch_index=None, out=None, apt=False, apt_repo=None, apt_base=None):
    """Generate the locks: the wheel route's with uv (hash-pinned), or with --apt the apt route's."""
    _exit(call("lock", cuda=cuda, torch_index=torch_index, out=out, apt=apt, apt_repo=apt_repo,
               apt_base=apt_base))


@task(help={"cuda": "the row of playbooks/stack.yaml whose locks the bundle carries (e.g. 13.0)",
            "torch": "the row's lock with torch and torchvision (default: without)",
            "distro": "the hosts' distribution: debian12, debian13, ubuntu2204 or ubuntu2404 "
                      "(default: this machine's; another's .debs come from its own archive)",
            "arch": "the hosts' architecture: x86_64 (default) or aarch64",
            "out": "the archive to write (whole, or not at all)",
            "index-url": "the index the wheels come from (default PyPI); one with a password: "
                         "set $GPUPROV_BUNDLE_INDEX instead, which no other user can read",
            "recipe": "the recipe whose apt packages and deb files it carries (default "
                      "cuda-wheels.yaml)",
            "locks": "the folder of the locks (default: playbooks/locks)",
            "debs": "carry the recipe's Debian packages (default; --no-debs: wheels only)",
            "apt-repo": "also carry the .debs of the row's apt lock for this NVIDIA repository "
                        "(gpuprov lock --apt), e.g. debian12/x86_64",
            "apt-base": "where that repository is (default: stack.yaml's nvidia_repo_base)",
            "mirror": "the distribution's archive from this mirror (default: this machine's apt "
                      "for its own distribution, else deb.debian.org or archive.ubuntu.com)",
            "security-mirror": "its security archive from this mirror (default: the "
                               "distribution's, or --mirror for Ubuntu)",
            "sign-key": "sign the bundle's manifest with this key of your gpg keyring (its full "
                        "fingerprint): the site key that provision --bundle-key names"})
def bundle(c, cuda, out, torch=False, distro="", arch="x86_64", index_url="", recipe="",
           locks="", debs=True, apt_repo="", apt_base="", mirror="", security_mirror="",
           sign_key=""):
    """Build one archive with a row's locked wheels, uv and the recipe's .debs (air-gapped sites)."""
    _refuse_invoke_options(c)
    # every option, as given (before any other name is made here): BundleOptions is their one
    # list, and the manifest's rebuild command is made from it
    options = {name: value for name, value in locals().items() if name != "c"}
    _exit(call("bundle", **options))


@task(positional=["action"],
      help={"action": "up (start throwaway local hosts), down (stop them, remove every mount) "
                      "or status (which are running)",
            "hosts": "how many hosts for 'up' (default 2): sandbox1..sandboxN",
            "offline": "with 'up': hosts with no route out (they reach nothing; only their sshd "
                       "is reached), to try provision --bundle"})
def sandbox(c, action=None, hosts=None, offline=False):
    """Throwaway local Debian 12 hosts (needs root) for trying recipes: sandbox up|down|status."""
    if action in ("-h", "--help"):  # under invoke: the positional word took the flag
        from invoke import Collection, Program

        Program(namespace=Collection(sandbox), binary="invoke").run(["invoke", "--help", "sandbox"],
                                                                     exit=False)
        return
    _refuse_invoke_options(c)
    _exit(call("sandbox", action=action, hosts=hosts, offline=offline))
