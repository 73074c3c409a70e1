"""Bundles for air-gapped sites: `gpuprov bundle` puts a stack row's locked wheels, uv, and the
Debian packages the recipe installs (with their dependencies, in a local apt repository signed
by a key made for the bundle) into one tar archive; `gpuprov provision --bundle FILE` checks it,
pushes it to each host and installs from it alone, on hosts that reach no network.

- `archive`  the archive's layout and manifest, and its check (a file that does not match the
             manifest, or a lock that does not match the recipe's: one line naming it, exit 2).
- `build`    `gpuprov bundle`: wheels with `pip download`, .debs with `apt-get download`, the
             signed repository (Debian's own index stanzas) and gpg; written whole or not at all.
- `distro`   a private apt configuration of another distribution's archive (its sources,
             key, lists and cache in a scratch folder): `--distro X` built on a machine that
             is not X, `--mirror`, `--arch` another architecture.
- `aptrepo`  `--apt-repo`: the .debs of a row's apt lock from NVIDIA's repository, each checked
             against the lock's sha256, for the bundle's signed repository.
- `trust`    what vouches for a bundle, never taken from it: the site key's signature of its
             manifest (`gpuprov bundle --sign-key`, `provision --bundle-key --bundle-keyring`),
             or its sha256 given out of band (`--bundle-sha256`); the chain of trust from that
             signature to every installed byte is in its docstring.
- `push`     the job that sends a checked bundle to a host once and unpacks it there, before
             the recipe's steps; the kinds then install from it (`Kind.through_bundle`).
- `site`     the inventory's `bundle_site:`: the bundle pushed once, to the site host, which
             serves it over HTTP to the other hosts; they check what they fetch against the
             control machine's hashes (the signed manifest's apt key, the recipe's locks).
"""
from __future__ import annotations

from . import trust
from .archive import Bundle, BundleError, read_bundle
from .build import BundleOptions, run_bundle
from .push import PushBundle

__all__ = ["Bundle", "BundleError", "BundleOptions", "PushBundle", "read_bundle", "run_bundle",
           "trust"]
