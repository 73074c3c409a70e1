"""How commands reach a host and bytes come back.

- `base`       the command wrapper (sudo, remote timeout, ready line) and the one I/O loop.
- `ssh`        hosts over SSH (Fabric/Paramiko); `local` this machine through /bin/sh. Each
               supplies the loop's primitives (write, close stdin, read, exit status, liveness).
- `connection` `connection_for(host)`: the one entry point the engine uses.
- `hostkeys`   host-key trust; `transfer` tarball push/pull.
- `tarstream`  the one strict tar reader of every archive from outside (pulls, evidence,
               bundles): imported by remote/bundle and remote/evidence too.
- `forward`    ports on a host's loopback carried over SSH to another host (the fleet cache).
"""
