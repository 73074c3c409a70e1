"""iperf3's own authentication for one fabric run: a fresh RSA key pair, a user name and a
password made on the control side for this run only, so an iperf3 server of the run serves
no one but the run's own clients (a stranger that connects first is refused by iperf3 itself,
and the server goes on waiting for the partner).

What iperf3 takes (iperf3(1), esnet/iperf src/iperf3.1 at tag 3.12, "Authentication - RSA
Keypair"): the server `--rsa-private-key-path` (PEM) and `--authorized-users-path` (lines
`user,sha256("{user}password")` in hex); the client `--username`, `--rsa-public-key-path`
(PEM) and the password in the IPERF3_PASSWORD environment variable (src/iperf_api.c reads it
with getenv before it would prompt). The hash is `check_authentication`'s
(src/iperf_auth.c: `sprintf(salted, "{%s}%s", username, password)`, then SHA-256 in hex).

The secrets never travel on a command line (ps) nor into a log: each node's command gets them
on its stdin, `UNPACK` writes them into a folder of its own (mode 0700, files 0600) under
/tmp, exports the folder as `GPUPROV_AUTH` (and the password as IPERF3_PASSWORD, an
environment only the node's login user and root can read), and removes the folder when the
command ends, on a signal too. A command killed outright (SIGKILL, a node that died) leaves
its folder: the next command of a fabric run on that node removes the login user's own such
folders older than STALE_MINUTES first. Lines of the stdin are tagged by their first letter: `K` the
private key, `U` the users file, `B` the public key, `P` the password.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

KEY_BITS = 2048  # as iperf3(1)'s example (`openssl genrsa ... 2048`)
# Older than any fabric command runs (fabric_seconds at most 600 s, plus the tool's start):
# gpuprov's choice.
STALE_MINUTES = 15

# The node's side: stdin into the private folder, each tag into its file, the password into
# the environment. `a` and the traps are the command's own shell's; the caller's script follows.
UNPACK = (
    "find /tmp -maxdepth 1 -name 'gpuprov-auth.*' -user \"$(id -u)\" "
    f"-mmin +{STALE_MINUTES} -exec rm -rf {{}} + 2>/dev/null\n"
    "umask 077; a=$(mktemp -d /tmp/gpuprov-auth.XXXXXXXX) || exit 1\n"
    "trap 'rm -rf \"$a\"' EXIT; trap 'rm -rf \"$a\"; exit 143' HUP INT TERM\n"
    "cat >\"$a/in\"\n"
    "sed -n 's/^K//p' \"$a/in\" >\"$a/key.pem\"; sed -n 's/^U//p' \"$a/in\" >\"$a/users.csv\"\n"
    "sed -n 's/^B//p' \"$a/in\" >\"$a/pub.pem\"\n"
    "IPERF3_PASSWORD=$(sed -n 's/^P//p' \"$a/in\"); export IPERF3_PASSWORD\n"
    "rm -f \"$a/in\"; GPUPROV_AUTH=$a; export GPUPROV_AUTH\n"
)


def _tagged(tag: str, text: str) -> str:
    return "".join(f"{tag}{line}\n" for line in text.splitlines())


@dataclass(frozen=True)
class Credentials:
    """One run's user, password and key pair (PEM)."""

    user: str
    password: str
    private_pem: str
    public_pem: str

    def users_line(self) -> str:
        digest = hashlib.sha256(f"{{{self.user}}}{self.password}".encode()).hexdigest()
        return f"{self.user},{digest}"

    def server_stdin(self) -> bytes:
        """What a server's command reads: the private key and the users file."""
        return (_tagged("K", self.private_pem) + _tagged("U", self.users_line())).encode()

    def client_stdin(self) -> bytes:
        """What a client's command reads: the public key and the password."""
        return (_tagged("B", self.public_pem) + _tagged("P", self.password)).encode()


def new_credentials() -> Credentials:
    """A fresh key pair, user name and password (random, for this run only)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return Credentials(f"gpuprov-{secrets.token_hex(6)}", secrets.token_hex(24), private, public)
