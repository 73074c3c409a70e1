"""The no-root route's compiler compiles: the CUDA 13.0 row's compiler wheels, exactly as
playbooks/stack.yaml pins them, installed from PyPI into a venv on a sandbox host, build and link
a vector-add .cu (no GPU is needed to compile). Unpinned, pip took nvvm/crt 13.5 beside nvcc 13.0
and ptxas rejected every .cu ("Unsupported .version 9.5; current version is '9.0'").
"""
from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.conftest import REPO, invoke, write_yaml
from tests.sandbox_fixture import sandbox_hosts  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="sandbox hosts need root")]

HOST = "sandbox2"      # sandbox1's apt is fenced to the stand-in repository by test_apt_route
VENV = "/home/admin/.gpuprov-nvcc-test/venv"
ROW = yaml.safe_load((REPO / "playbooks" / "stack.yaml").read_text())["vars"]["compat"]["13.0"]
VECTOR_ADD = r"""// vector add, compiled by the venv's nvcc (gpuprov test)
#include <cstdio>
__global__ void add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main() {
  const int n = 1 << 10;
  float *a, *b, *c;
  if (cudaMallocManaged(&a, n * sizeof(float)) != cudaSuccess) { puts("no CUDA device"); return 0; }
  cudaMallocManaged(&b, n * sizeof(float));
  cudaMallocManaged(&c, n * sizeof(float));
  add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  cudaDeviceSynchronize();
  return 0;
}
"""


def test_venv_nvcc_compiles_and_links_a_kernel(sandbox_hosts, work):  # noqa: F811
    if HOST not in sandbox_hosts.names:
        pytest.skip(f"{HOST} is not among the sandbox hosts")
    # the compiler's wheels alone (cuDNN and the meta-package's cuBLAS are hundreds of MB)
    compiler_wheels = [w for w in ROW["wheels"] if w.startswith(("nvidia-cuda-", "nvidia-nvvm"))]
    recipe = write_yaml(work / "nvcc.yaml", {"name": "CUDA 13.0 compiler wheels", "steps": [
        {"name": "g++", "apt": {"packages": ["g++"], "update_cache": True}, "become": True},
        {"name": "compiler wheels", "pip": {"venv": VENV, "packages": compiler_wheels}}]})
    result = invoke("provision", "--host", HOST, "--inventory", str(sandbox_hosts.inventory),
                    "--recipe", str(recipe), "--no-validate", "--json", str(work / "r.json"),
                    cwd=work, timeout=900)
    host = json.loads((work / "r.json").read_text())["hosts"][HOST]
    assert result.rc == 0 and host["failed"] == 0, result.out + result.err

    rc, out, err = sandbox_hosts.run(HOST, f"""set -e
d=$({VENV}/bin/python -c 'import nvidia; print(list(nvidia.__path__)[0])')/cu13
cd "$(mktemp -d)"
cat > va.cu <<'EOF'
{VECTOR_ADD}EOF
"$d/bin/nvcc" --version | tail -n 2
{VENV}/bin/python -m pip list 2>/dev/null | grep -E '^nvidia-(cuda-nvcc|nvvm|cuda-crt|cuda-runtime) '
"$d/bin/nvcc" -arch=sm_90 va.cu -o va -L"$d/lib"
./va
""", user="admin", timeout=600)
    assert rc == 0, f"rc={rc}\n{out}\n{err}"
    assert "release 13.0" in out
    versions = dict(line.split()[:2] for line in out.splitlines() if line.startswith("nvidia-"))
    assert set(versions) == {"nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime"}
    assert all(v.startswith("13.0.") for v in versions.values()), versions
    assert "no CUDA device" in out          # it linked and ran; a sandbox host has no GPU
