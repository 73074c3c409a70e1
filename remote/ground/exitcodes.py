"""Exit statuses of every gpuprov command, in one place (docs/reference/exit-codes.md, and `--help`).

Ansible's ansible-playbook exits 2 when a host failed and 4 when one was unreachable
(lib/ansible/executor/task_queue_manager.py, RUN_FAILED_HOSTS = 2, RUN_UNREACHABLE_HOSTS = 4; see
https://github.com/ansible/ansible/issues/19720). gpuprov keeps 2 for bad input, as before, so
a script can tell "fix the command" from "look at the hosts"; 4 is the same as Ansible's.
Imports nothing.
"""
EXIT_OK = 0
EXIT_STEP_FAILED = 1          # a step failed on at least one host, or a job's own work did
                              # (`gpuprov evidence` could not collect a host's evidence,
                              # `gpuprov logs` could not pull a host's run: no verdict either)
EXIT_INPUT = 2                # bad input: nothing was contacted
EXIT_VALIDATION_FAILED = 3    # every step ran, but validation failed on at least one host
EXIT_UNREACHABLE = 4          # a host could not be reached (and no step failed elsewhere)
EXIT_INTERRUPTED = 130        # Ctrl-C or SIGTERM
EXIT_BROKEN_PIPE = 141        # the reader went away (`| head`): 128 + SIGPIPE, as a shell reports

# What each status means, as `gpuprov --help` says it (HELP) and docs/reference/exit-codes.md
# lists it (docs/gen_reference.py).
MEANINGS = {
    EXIT_OK: "every selected host succeeded",
    EXIT_STEP_FAILED: "a step failed on a host (for `gpuprov evidence`: its evidence could not "
                      "be collected; for `gpuprov logs`: its run could not be pulled)",
    EXIT_INPUT: "bad input (one line on stderr, no host contacted)",
    EXIT_VALIDATION_FAILED: "validation failed on a host (its steps succeeded; for `gpuprov "
                            "remediate`: a node is left out of service, or still waits for "
                            "the breaker)",
    EXIT_UNREACHABLE: "a host was unreachable",
    EXIT_INTERRUPTED: "interrupted",
    EXIT_BROKEN_PIPE: "the reader went away (`gpuprov provision -h | head -3`): ended quietly",
}
ORDER = "When several apply, 1 comes before 4, and 4 before 3."
# Nothing to show is no failure: the command says so in a line and exits 0.
NOTHING = ("Nothing to show is not a failure: `gpuprov logs` for a host with no validation run "
           "(one only provisioned) and `gpuprov report` over no validation results say so and "
           "exit 0.")
# A pull is `logs`'s whole job: the verdict it fetched is shown, not its exit status.
PULLED = ("`gpuprov logs` exits 0 once it pulled a host's run, whatever the verdict it shows "
          "(passed, failed or not validated), so `gpuprov logs && gpuprov report` goes on "
          "after a failed validation; `gpuprov validate`'s status is the verdict.")
HELP = ("Exit status: " + "; ".join(f"{code} {text}" for code, text in MEANINGS.items()
                                    if code != EXIT_BROKEN_PIPE) + ". " + ORDER)
