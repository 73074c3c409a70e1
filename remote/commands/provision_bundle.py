"""`provision --bundle` (or the inventory's `bundle:`): the one bundle a run installs from,
checked before any host is touched and vouched for by a trust anchor given out of band, never
by anything in the bundle (remote/bundle/trust.py). Imported only when a bundle is named.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from ..bundle import Bundle, BundleError, read_bundle, trust
from ..config.inventory import Host, Inventory
from ..config.recipe import Recipe
from ..engine.jobs import Job
from ..ground.paths import VALIDATE_DIR


def checked_bundle(inv: Inventory, hosts: list[Host], rec: Recipe[Any], given: Optional[str],
                   anchor: tuple[str, str, str], stream: TextIO) -> Optional[Bundle]:
    """The bundle `given` (`--bundle`) or the hosts' `bundle:` keys name, checked and vouched
    for by `anchor` (`--bundle-key`, `--bundle-keyring`, `--bundle-sha256`) or the
    inventory's; None when none is named."""
    path = Path(given) if given else inventory_bundle(inv, hosts)
    if path is None:
        return None
    return trusted_bundle(path, rec.path.parent / "locks",
                          trust.anchor(*anchor, inv.bundle_trust), stream)


def trusted_bundle(path: Path, locks_dir: Path, anchor: trust.Anchor, stream: TextIO) -> Bundle:
    """The bundle at `path`, checked (`read_bundle`) and vouched for by `anchor`
    (remote/bundle/trust.py); BundleError (one line naming it, exit 2) otherwise. No anchor is
    refused before the archive is read."""
    if not anchor:
        raise BundleError("no such bundle (gpuprov bundle makes one)" if not path.exists()
                          else f"no trust anchor for this bundle: {trust.HOW}", path)
    checked = read_bundle(path, locks_dir=locks_dir, validate_dir=VALIDATE_DIR)
    stream.write(f"bundle {checked.id}: {trust.check(checked, anchor)}\n")
    return checked


def inventory_bundle(inv: Inventory, hosts: list[Host]) -> Optional[Path]:
    """The bundle the selected hosts' `bundle:` keys name (one per run: the run checks it once
    and every host installs from it), None when none names one; InputError naming the key."""
    named = {h.name: inv.bundle_for(h) for h in hosts}
    given = [(name, b) for name, b in named.items() if b is not None]
    if not given:
        return None
    first_name, first = given[0]
    for name, other in named.items():
        if other is None or other.path != first.path:
            said = f"names {other.path}" if other is not None else "names no bundle"
            where = other.where if other is not None else first.where
            raise where.error(f"bundle: host '{first_name}' takes {first.path} "
                              f"({first.where}) and host '{name}' {said}: one bundle per run "
                              "(select those hosts apart, or give --bundle)")
    if not first.path.is_file():
        raise first.where.error(f"bundle: {first.path}: no such file (gpuprov bundle makes one)")
    return first.path


def with_site(inv: Inventory, hosts: list[Host],
              checked: Bundle) -> tuple[list[Host], Optional[Callable[[Job], Job]]]:
    """With the inventory's `bundle_site:`, the run's hosts (the site host first, added when
    not selected) and what wraps the run's job so that the site serves the bundle to the
    others (remote/bundle/site.py); else the hosts as they are and None. BundleError (exit 2)
    when the bundle's apt key is not the one its manifest names."""
    site = inv.bundle_site
    if site is None:
        return hosts, None
    from ..bundle.site import SiteBundle, bundle_key, run_hosts

    key = bundle_key(checked)
    ordered, selected = run_hosts(inv, hosts, site)
    return ordered, lambda job: SiteBundle(checked, site, selected, job, key)
