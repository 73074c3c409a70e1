"""The floors and defaults of the host checks (validate/checks/host_*.py), each with its source:
the node profile's ``host`` section (validate/profile.py) overrides a default; a floor without a
default is judged only when the profile gives one (else measured and reported: "no reference").
docs/gen_reference.py lists this table on the expectations reference page.
"""

# Verda's health check: "`/` partition has less than 90% disk usage"
# (docs.verda.com/clusters/instant-clusters/validation, read 2026-11-29)
FILL_MAX_PCT = 90.0
# fio's bounds: a file of this many MiB, each direction at most this many seconds (chosen: a
# bounded probe, not a benchmark; Crusoe's burn-in runs fio, cluster-demand.md, names no size)
FIO_SIZE_MIB = 256
FIO_SECONDS = 10
# the killer's margin over fio's own --runtime (chosen)
FIO_GRACE_S = 30
# EDAC: uncorrected errors since boot fail at more than this many (ours: any uncorrected memory
# error is a lost word; the kernel counts them in mc*/ue_count, Documentation/admin-guide/ras.rst)
EDAC_UE_MAX = 0

# (profile key, default, unit, what it judges, source): the reference page's rows
TABLE = (
    ("host.mounts", None, "paths", "each is a mount point (/proc/self/mountinfo) and takes a write",
     "AzNHC `check_fs_mount_rw` (Azure/azurehpc-health-checks); TensorWave checks mounts (cluster-demand.md)"),
    ("host.fill_max_pct", FILL_MAX_PCT, "% used", "`/`, `host.scratch` and `host.fill_paths` below it (statvfs)",
     "Verda: \"`/` partition has less than 90% disk usage\" (docs.verda.com/clusters/instant-clusters/validation)"),
    ("host.scratch_read_mbs", None, "MB/s", "fio sequential read on `host.scratch` (O_DIRECT, 1 MiB blocks)",
     "the operator's figure for the drive (no public default: measured and reported without one)"),
    ("host.scratch_write_mbs", None, "MB/s", "fio sequential write on `host.scratch`",
     "the operator's figure for the drive (as above)"),
    ("host.fio_size_mib", FIO_SIZE_MIB, "MiB", "fio's file size: the probe's bound in space", "chosen"),
    ("host.fio_seconds", FIO_SECONDS, "s", "fio's --runtime per direction: the probe's bound in time", "chosen"),
    ("host.memory_gib", None, "GiB", "MemTotal (/proc/meminfo) at least this",
     "the node's own size (proc(5) MemTotal: RAM less the kernel's reserve)"),
    ("host.edac_corrected_max", None, "errors", "corrected EDAC errors since boot at most this (none: a note)",
     "the operator's (Documentation/admin-guide/ras.rst: corrected errors are counted, not fatal)"),
    ("(uncorrected EDAC)", EDAC_UE_MAX, "errors", "uncorrected EDAC errors since boot at most this",
     "ours: Documentation/admin-guide/ras.rst mc*/ue_count"),
    ("host.cpus", None, "CPUs", "online CPUs (/sys/devices/system/cpu/online) at least this", "the node's own"),
    ("host.governor", None, "name", "every CPU's cpufreq scaling_governor",
     "Documentation/admin-guide/pm/cpufreq.rst (scaling_governor)"),
    ("host.clock", True, "bool", "chrony (`chronyc tracking` Leap status) or systemd-timesyncd "
     "(`timedatectl show` NTPSynchronized) says synchronised", "chronyc(1), timedatectl(1)"),
    ("host.services", None, "names", "each is active (systemctl is-active; without systemd: a process "
     "of that name)", "TensorWave checks daemons (cluster-demand.md); systemctl(1); NHC check_ps_service"),
)
