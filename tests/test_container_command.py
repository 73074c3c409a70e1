"""The container command's choices, table-tested: GPUs through CDI (podman) or `--gpus all`
(docker), the host's own open-files hard limit, the runtime's failure named.

This machine has no GPU, no NVIDIA driver and no docker daemon: those cases cannot be made real
here, so the host's tools are stand-ins (sh scripts named nvidia-smi, nvidia-ctk, podman, docker,
on a PATH that holds nothing else but the coreutils the lines use) that print what the real ones
print and record the `run` arguments. The lines themselves run in a real sh. The command with a
real podman runs in tests/test_container_ssh.py; on a GPU it is unrun so far.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remote.container import check_image
from remote.container.host import host_command
from remote.container.image import NOT_STARTED

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
DIGEST = "sha256:" + "ab" * 32
SMI = "#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: NVIDIA H200 (UUID: GPU-0000)'\nexit 0\n"
CTK = "#!/bin/sh\n[ \"$1 $2\" = 'cdi list' ] && echo 'nvidia.com/gpu=all'\nexit 0\n"
RUNTIME = """#!/bin/sh
case "$1 $2" in
  "image exists") exit 0 ;;
  "image inspect") case "$*" in *Id*) echo sha256:{id} ;; *Digest*|*RepoDigests*) echo {digest} ;; esac; exit 0 ;;
  "info "*) exit 0 ;;
esac
if [ "$1" = run ]; then printf '%s\\n' "$@" > {record}; exit {rc}; fi
exit 0
"""
TOOLS = ("sh", "id", "sed", "grep", "head", "mkdir", "cat", "printf")


def _host(tmp_path: Path, runtime: str, gpu: bool, cdi: bool, rc: int = 0) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    stubs = {runtime: RUNTIME.format(id="cd" * 32, digest=DIGEST, record=tmp_path / "run-args",
                                     rc=rc)}
    if gpu:
        stubs["nvidia-smi"] = SMI
    if cdi:
        stubs["nvidia-ctk"] = CTK
    for name, text in stubs.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path, hard_limit: int = 0) -> tuple[int, list[str], str]:
    (tmp_path / "pkg").mkdir()
    lines = host_command(check_image(IMAGE), str(tmp_path / "pkg"), str(tmp_path / "out"),
                         ["--quick"])
    limit = f"ulimit -n {hard_limit}\n" if hard_limit else ""  # soft and hard
    proc = subprocess.run(["/bin/sh", "-c", f"{limit}PY=python3\n{lines}"], capture_output=True,
                          text=True, timeout=60, env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
    record = tmp_path / "run-args"
    return proc.returncode, record.read_text().splitlines() if record.exists() else [], proc.stderr


@pytest.mark.parametrize("runtime, gpu, cdi, wanted, gpus_env", [
    ("podman", True, True, ["--device", "nvidia.com/gpu=all"], "cdi"),
    ("podman", True, False, [], "none"),
    ("podman", False, True, [], "none"),
    ("docker", True, False, ["--gpus", "all"], "gpus-all"),
    ("docker", False, False, [], "none"),
])
def test_gpus_reach_the_container_through_cdi_or_gpus_all(tmp_path, runtime, gpu, cdi, wanted,
                                                          gpus_env):
    rc, args, err = _run(tmp_path, _host(tmp_path, runtime, gpu, cdi))
    assert rc == 0, err
    assert args[:3] == ["run", "--rm", "--pull=never"]
    flags = [a for a in args if a in ("--device", "nvidia.com/gpu=all", "--gpus", "all")]
    assert flags == wanted
    assert f"GPUPROV_CONTAINER_GPUS={gpus_env}" in args
    assert f"GPUPROV_CONTAINER_RUNTIME={runtime}" in args
    assert f"GPUPROV_CONTAINER_DIGEST={DIGEST}" in args
    assert args[args.index("-w") + 2] == IMAGE  # the image, then its command
    if runtime == "docker":  # files in the output folder belong to the host's user
        assert args[args.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    if gpu and not cdi and runtime == "podman":
        assert "no CDI spec for nvidia.com/gpu=all (nvidia-ctk cdi generate" in err


def test_the_container_gets_the_hosts_own_hard_limit_on_open_files(tmp_path):
    rc, args, err = _run(tmp_path, _host(tmp_path, "podman", False, False), hard_limit=4096)
    assert rc == 0, err
    assert args[args.index("--ulimit") + 1] == "nofile=4096:4096"


@pytest.mark.parametrize("runtime_rc", [125, 126, 127])
def test_a_runtime_that_cannot_start_the_container_is_said_so(tmp_path, runtime_rc):
    rc, args, err = _run(tmp_path, _host(tmp_path, "podman", False, False, rc=runtime_rc))
    assert rc == NOT_STARTED
    assert f"gpuprov-container: podman run failed (exit {runtime_rc})" in err
    assert check_image(IMAGE).refusal(rc) == ("container: the container did not start (the "
                                              "runtime's error is in the host's log)")


def test_a_host_with_neither_runtime_is_said_so(tmp_path):
    bin_dir = _host(tmp_path, "podman", False, False)
    (bin_dir / "podman").unlink()
    rc, args, err = _run(tmp_path, bin_dir)
    assert check_image(IMAGE).refusal(rc) == ("container: no container runtime on the host "
                                              "(neither podman nor docker)")
    assert "gpuprov-container: no podman or docker on this host" in err


# Slurm: which container support a cluster's answer picks, and what each step then gets. Pyxis
# is not installed here (and no GPU): its srun options are table-tested, unrun.
@pytest.mark.parametrize("image, kinds, srun_args", [
    ("/srv/bundles/pytorch", {"slurm-oci", "pyxis"}, ["--container=/srv/bundles/pytorch"]),
    ("/srv/images/pytorch.sqsh", {"pyxis"}, ["--container-image=/srv/images/pytorch.sqsh",
                                             "--container-writable"]),
    (IMAGE, {"pyxis", "slurm-oci"}, ["--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
                                     "--container-writable"]),
    ("ubuntu:24.04", {"pyxis"}, ["--container-image=ubuntu:24.04", "--container-writable"]),
    ("localhost/gpuprov:1", {"pyxis"}, ["--container-image=localhost#gpuprov:1",
                                        "--container-writable"]),
])
def test_slurm_picks_pyxis_for_a_reference_and_oci_for_a_bundle(image, kinds, srun_args):
    from remote.container.slurm import choose

    assert choose(check_image(image), kinds).srun_args == srun_args


@pytest.mark.parametrize("image, kinds, message", [
    (IMAGE, {"slurm-oci"}, "the cluster runs only OCI bundles"),
    ("/srv/bundles/pytorch", set(), "the cluster has no container support gpuprov can use"),
])
def test_slurm_without_support_that_fits_is_said_so(image, kinds, message):
    from remote.container.slurm import Unsupported, choose

    with pytest.raises(Unsupported, match=message):
        choose(check_image(image), kinds)


def test_only_the_probes_marker_lines_count():
    from remote.container.slurm import MARK, found

    said = f"{MARK} pyxis\n{MARK} oci-ish\nsomething {MARK} slurm-oci\n  {MARK} slurm-oci  \n"
    assert found(said) == {"pyxis", "slurm-oci"}
