"""How commands reach a host and bytes come back: SSH connections (Fabric/Paramiko) and the
local connection, host-key trust (`hostkeys`), and tarball push/pull (`transfer`).

May import: `remote.errors`, `remote.config` (hosts and timeouts). Never the engine or output.
"""
