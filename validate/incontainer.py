"""A validation run inside a container (`gpuprov validate --container IMAGE`): the names of the
environment variables the control side's container command sets (remote/container/ imports them
from here: validate/ owns the names both sides share), what results.json's `host.container`
records from them, and the stack as validate reports it (python, torch, torch's CUDA), which the
host prints from outside the container for the report's side-by-side view
(`python3 -m validate.incontainer`).

Standard library only; torch is asked only by `stack()`, as `host_document` asks it.
"""
from __future__ import annotations

import json
import os
import platform
import re
import sys
from typing import Any, Dict, Optional

# The variables `podman run -e` / `docker run -e` / the Slurm task set inside the container.
IMAGE_ENV = "GPUPROV_CONTAINER_IMAGE"      # the image as given to --container
DIGEST_ENV = "GPUPROV_CONTAINER_DIGEST"    # the runtime's digest of it ("" when it has none)
ID_ENV = "GPUPROV_CONTAINER_ID"            # the runtime's image id ("" when it has none)
RUNTIME_ENV = "GPUPROV_CONTAINER_RUNTIME"  # podman, docker, slurm-oci, pyxis
GPUS_ENV = "GPUPROV_CONTAINER_GPUS"        # how GPUs reached it: cdi, gpus-all, none
HOST_STACK_ENV = "GPUPROV_CONTAINER_HOST_STACK"  # `stack()` as the host's python printed it
# Bounds on what is copied into results.json (the values come from the host: untrusted).
MAX_TEXT = 300
STACK_KEYS = ("python", "torch", "cuda")
_TEXT = re.compile(r"[\x20-\x7e]*")  # printable ASCII only


def _text(value: Any) -> Optional[str]:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT or not _TEXT.fullmatch(value):
        return None
    return value


def stack() -> Dict[str, Optional[str]]:
    """python, torch and torch's CUDA build, as results.json's `host` reports them."""
    from . import torchenv

    return {"python": platform.python_version(), "torch": torchenv.version_of("torch"),
            "cuda": torchenv.cuda_state().get("build_cuda")}


def _host_stack(text: str) -> Optional[Dict[str, Optional[str]]]:
    try:
        doc = json.loads(text) if text and len(text) <= 4 * MAX_TEXT else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    return {key: _text(doc.get(key)) for key in STACK_KEYS}


def container_document(environ: Optional[Dict[str, str]] = None) -> Optional[Dict[str, Any]]:
    """results.json's `host.container`: the image (as given), its digest and id, the runtime,
    how the GPUs reached it, and the host's own stack seen from outside; None outside a
    container gpuprov started."""
    env = os.environ if environ is None else environ
    image = _text(env.get(IMAGE_ENV))
    if image is None:
        return None
    return {"image": image, "digest": _text(env.get(DIGEST_ENV)), "id": _text(env.get(ID_ENV)),
            "runtime": _text(env.get(RUNTIME_ENV)), "gpus": _text(env.get(GPUS_ENV)),
            "host_stack": _host_stack(env.get(HOST_STACK_ENV, ""))}


def main() -> int:
    sys.stdout.write(json.dumps(stack(), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
