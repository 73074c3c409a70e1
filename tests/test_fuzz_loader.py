"""Property test: random mutations of valid inventories and recipes thrown at the loaders.

The loaders are `remote.config.inventory.load_inventory`, `remote.config.recipe.load_recipe` and the static
checks of `remote.commands.inputs.load_and_check` (selection, vars, templates per host). Whatever the bytes,
the only outcomes allowed are a loaded model or an `InputError` whose text is one line that
starts with the path of the file at fault. Anything else (another exception, a multi-line
message, a message naming no file) is a bug.

Mutations: delete, duplicate, swap or move lines; insert tabs and odd characters (YAML and Jinja
punctuation, NUL, invalid UTF-8, BOM, line separators); change a line's indentation; replace or
insert lines with random YAML; truncate the file; flip a byte.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote.commands.inputs import load_and_check
from remote.ground.errors import InputError

# per test; GPUPROV_FUZZ_EXAMPLES=20000 for a longer exploration
EXAMPLES = int(os.environ.get("GPUPROV_FUZZ_EXAMPLES", "400"))

INVENTORIES = [
    """\
host_key_policy: accept-new
known_hosts: [known_hosts]
timeouts: {connect: 5, banner: 5, auth: 5, keepalive: 2, command: 600}
secrets: [hf_token]
vars:
  cuda_version: "12.8"
  hf_token: abc123
hosts:
  gpu1:
    address: 10.0.0.1
    user: ubuntu
    port: 2222
    identity_file: ~/.ssh/id_ed25519
    become: true
    jump: bastion
    vars: {gpu_expected: 8}
  gpu2: {address: 10.0.0.2, python: /usr/bin/python3}
  bastion: {address: 10.0.0.9, user: ubuntu}
  localhost: {connection: local}
groups:
  h100:
    hosts: [gpu1, gpu2]
    vars: {cuda_version: "12.4"}
  fleet:
    children: [h100]
    hosts: [localhost]
""",
    """\
hosts:
  a: {}
  b:
    vars:
      list: [1, 2, 3]
      nested: {k: v}
groups:
  g1: {hosts: [a]}
  g2: {children: [g1], vars: {x: "{{ cuda_version }}-{{ host }}"}}
vars: {cuda_version: "13.0"}
""",
]

RECIPE = """\
name: CUDA toolkit
vars:
  cuda_pkg: "cuda-toolkit-{{ cuda_version | replace('.', '-') }}"
  venv: /opt/venv
steps:
  - name: Marker file
    shell: "echo provisioned > /tmp/marker"
    creates: /tmp/marker
  - name: Probe GPU
    shell: nvidia-smi -L
    when: facts.gpu_count > 0
    changed_when: false
  - name: Profile script
    file: {path: /etc/profile.d/cuda.sh, content: "export PATH=/usr/local/cuda/bin:$PATH\\n", mode: "0644"}
    become: true
    notify: reload
  - name: Packages {{ cuda_pkg }}
    apt: {packages: ["{{ cuda_pkg }}", "build-essential=12.*"], update_cache: true}
    retries: 2
    delay: 1.5
    timeout: 900
    tags: [cuda, apt]
  - pip: {packages: ["torch==2.4.*", numpy], venv: "{{ venv }}"}
    unless: test -x {{ venv }}/bin/python
  - template: {src: motd.j2, dest: /etc/motd}
  - assert: {that: ["facts.cpus > 0"], msg: "no CPUs on {{ host }}"}
  - include: inc.yaml
    when: facts.distro_id == 'ubuntu'
handlers:
  reload:
    shell: "true"
"""

INCLUDE = """\
vars: {inner: 1}
steps:
  - name: inner {{ inner }}
    shell: echo {{ inner }} {{ cuda_version }}
    failed_when: rc not in [0, 3]
"""

TEMPLATE = "host={{ host }} cpus={{ facts.cpus }} cuda={{ cuda_version }}\n"

ODD = ["\t", ":", ": ", "- ", "-", "{", "}", "[", "]", "&a ", "*a", "!", "!!str ", "!!python/name:os.system ",
       "%", "@", "`", "|", ">", "'", '"', "#", ",", "?", "<<: ", "{{", "}}", "{%", "%}",
       "{{ nope }}", "{{ facts.nope }}", "\x00", "\ufeff", "\u2028", "\x85", "\r", "\n", " ",
       "~", "null", "yes", ".inf", ".nan", "0x1f", "1e400", "-1", "9" * 30, "é", "\U0001f600",
       "---\n", "...\n", "\\", "$(touch /tmp/gpuprov-pwned)"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                    st.text(max_size=12))
random_yaml = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@st.composite
def mutation(draw):
    kind = draw(st.sampled_from(["delete", "duplicate", "swap", "move", "insert", "indent",
                                 "yaml_line", "yaml_file", "truncate", "flip"]))
    return kind, draw(st.integers(0, 10_000)), draw(st.integers(0, 10_000)), \
        draw(st.sampled_from(ODD)), draw(st.integers(-4, 4)), draw(random_yaml)


def mutate(text: str, ops) -> bytes:
    data = text
    raw = None
    for kind, a, b, odd, shift, value in ops:
        lines = data.split("\n")
        i, j = a % len(lines), b % len(lines)
        if kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "move":
            lines.insert(j, lines.pop(i))
        elif kind == "insert":
            pos = b % (len(lines[i]) + 1)
            lines[i] = lines[i][:pos] + odd + lines[i][pos:]
        elif kind == "indent":
            stripped = lines[i].lstrip(" ")
            lines[i] = " " * max(0, len(lines[i]) - len(stripped) + shift) + stripped
        elif kind == "yaml_line":
            dumped = yaml.safe_dump(value, default_flow_style=bool(b % 2)).rstrip("\n")
            lines[i:i + (b % 2)] = [(" " * (shift % 5)) + line for line in dumped.split("\n")]
        elif kind == "yaml_file":
            lines = yaml.safe_dump(value).split("\n")
        elif kind == "truncate":
            lines = lines[: max(1, i)]
        data = "\n".join(lines)
        if kind == "flip":
            encoded = data.encode("utf-8", "surrogatepass")
            if encoded:
                k = a % len(encoded)
                raw = encoded[:k] + bytes([encoded[k] ^ (1 << (b % 8))]) + encoded[k + 1:]
                data = raw.decode("utf-8", "replace")
    return raw if raw is not None and ops[-1][0] == "flip" else \
        data.encode("utf-8", "surrogatepass")


_WORK = Path(tempfile.mkdtemp(prefix="gpuprov-fuzz-"))


def _check(files: dict, selection: str = "all") -> str:
    """Write `files` into a fresh folder, load them; return 'ok' or the error line."""
    folder = Path(tempfile.mkdtemp(dir=_WORK))
    try:
        for name, data in files.items():
            (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())
        try:
            load_and_check(str(folder / "inventory.yaml"), selection,
                           str(folder / "recipe.yaml"), {})
        except InputError as exc:
            text = str(exc)
            assert "\n" not in text and "\r" not in text, repr(text)
            assert exc.file is not None, text
            assert Path(exc.file).resolve().is_relative_to(folder.resolve()), text
            assert text.startswith(exc.file), text
            assert len(text) < 2000, text
            return text
        return "ok"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def teardown_module():
    shutil.rmtree(_WORK, ignore_errors=True)


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_seeds_are_valid():
    for inventory in INVENTORIES:
        assert _check({"inventory.yaml": inventory, "recipe.yaml": RECIPE, "inc.yaml": INCLUDE,
                       "motd.j2": TEMPLATE}) == "ok"


@pytest.mark.slow
@FUZZ
@given(seed=st.sampled_from(INVENTORIES), ops=st.lists(mutation(), min_size=1, max_size=4))
def test_mutated_inventory(seed, ops):
    _check({"inventory.yaml": mutate(seed, ops), "recipe.yaml": RECIPE, "inc.yaml": INCLUDE,
            "motd.j2": TEMPLATE})


@pytest.mark.slow
@FUZZ
@given(target=st.sampled_from(["recipe.yaml", "inc.yaml", "motd.j2"]),
       ops=st.lists(mutation(), min_size=1, max_size=4),
       selection=st.sampled_from(["all", "gpu1", "h100", "fleet", "gpu*", "a,b"]))
def test_mutated_recipe(target, ops, selection):
    files = {"inventory.yaml": INVENTORIES[0], "recipe.yaml": RECIPE, "inc.yaml": INCLUDE,
             "motd.j2": TEMPLATE}
    files[target] = mutate(files[target], ops)
    _check(files, selection)
