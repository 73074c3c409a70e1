"""The image `--container` names, checked on the control side, and the container command's own
exit statuses (each a named failure of its host).

An image is either an image reference as podman, docker and enroot read it, or an absolute
path: an OCI bundle on a Slurm cluster's nodes (`srun --container`: "The bundle must already
exist on the requested path on the execution node", https://slurm.schedmd.com/containers.html,
"Known limitations"), or a squashfs image enroot imports (pyxis). gpuprov never pulls: an
image that is not already on the host is a failure of that host (`--pull=never`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..ground.errors import InputError

# The image reference grammar of github.com/distribution/reference (reference.go, "Grammar"):
#   reference := name [ ":" tag ] [ "@" digest ]; name := [domain '/'] path-component ['/' ...]
#   domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/ (dots between,
#   an optional ":" port-number); path-component := alpha-numeric [separator alpha-numeric]*;
#   alpha-numeric := /[a-z0-9]+/; separator := /[_.]|__|[-]*/; tag := /[\w][\w.-]{0,127}/;
#   digest := algorithm ":" hex (sha256: 64 hex digits).
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
                       r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?", re.ASCII)
# An absolute path: plain characters only (it reaches srun and the host's shell quoted, but a
# ':' or ',' would split podman's and Slurm's own option syntax); chosen, not sourced.
PATH = re.compile(r"/[A-Za-z0-9._+/-]*", re.ASCII)
MAX_LENGTH = 255  # distribution/reference: "NameTotalLengthMax = 255" (for the name part)

# The container command's exit statuses on a host (after validate's own 0-3 and the unpack's 90,
# remote/engine/jobs/validate.py UNPACK_FAILED): ours, chosen.
NO_RUNTIME, NO_IMAGE, NO_PYTHON, NOT_STARTED = 91, 92, 93, 94
# What each means, for the host's line in the recap ("not validated: container: ...").
REFUSALS = {
    NO_RUNTIME: "no container runtime on the host (neither podman nor docker)",
    NO_IMAGE: "image {image} is not on the host (gpuprov never pulls: load or build it there)",
    NO_PYTHON: "image {image} has no python3",
    NOT_STARTED: "the container did not start (the runtime's error is in the host's log)",
}
NO_VERDICT = "the container did not run validate"  # the run folder's record of such a host


@dataclass(frozen=True)
class Container:
    """The image every selected host validates in."""

    image: str

    @property
    def is_path(self) -> bool:
        """An OCI bundle or a squashfs image on the nodes, not a reference."""
        return self.image.startswith("/")

    def refusal(self, rc: Optional[int]) -> Optional[str]:
        """Why the container did not run validate, from the command's exit status; None when
        validate ran (its own status, judged from its results)."""
        text = REFUSALS.get(rc) if rc is not None else None
        return f"container: {text.format(image=self.image)}" if text else None


def check_image(given: Optional[str]) -> Optional[Container]:
    """`--container IMAGE` as given: None without it; an `InputError` (exit 2) naming what is
    wrong with a malformed one."""
    if given is None:
        return None
    image = given.strip()
    if not image:
        raise InputError("--container needs an image, e.g. --container nvcr.io/nvidia/pytorch:25.01-py3")
    if len(image) > MAX_LENGTH:
        raise InputError(f"--container {image[:40]!r}...: longer than {MAX_LENGTH} characters")
    if image.startswith("/"):
        if not PATH.fullmatch(image) or "/../" in image + "/" or image.endswith("/.."):
            raise InputError(f"--container {image!r}: a path must be absolute and plain "
                             "(letters, digits, '._+-/', no '..')")
        return Container(image)
    if not REFERENCE.fullmatch(image):
        raise InputError(f"--container {image!r} is not an image reference "
                         "([registry/]name[:tag][@sha256:digest], lower-case name) "
                         "nor an absolute path")
    return Container(image)
