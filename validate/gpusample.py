"""nvidia-smi read while the GPUs work: clocks, power, temperature, throttle
reasons and the PCIe link, sampled in a background loop.  Readings taken at
idle say little (the PCIe generation drops to save power, clocks idle), so
the checks that judge them sample under their own load."""

import threading
import time

from . import host
from .smi import decode_throttle, typed_gpu_rows

SAMPLE_FIELDS = [
    "index", "pci.bus_id", "clocks.sm", "clocks.max.sm", "power.draw", "power.limit",
    "temperature.gpu", "clocks_throttle_reasons.active", "pcie.link.gen.current",
    "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
]


def bus_key(text):
    """'00000000:3B:00.0' / '0000:3b:00' -> (domain, bus, device) ints, or None."""
    if not text:
        return None
    parts = text.strip().split(":")
    try:
        if len(parts) == 3:
            return (int(parts[0], 16), int(parts[1], 16), int(parts[2].split(".")[0], 16))
        if len(parts) == 2:
            return (0, int(parts[0], 16), int(parts[1].split(".")[0], 16))
    except ValueError:
        return None
    return None


def torch_bus_key(props):
    """The same key from torch.cuda.get_device_properties(i)."""
    try:
        return (int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id))
    except (AttributeError, TypeError, ValueError):
        return None


def read_once(smi):
    """One typed reading of every GPU: {bus_key: row}; {} when unreadable."""
    rows, _, err = host.query_gpus(smi, SAMPLE_FIELDS, timeout=30)
    if err or not rows:
        return {}
    out = {}
    for t in typed_gpu_rows(rows):
        t["throttle"] = decode_throttle(t.get("clocks_throttle_reasons.active"))
        out[bus_key(t.get("pci.bus_id"))] = t
    return out


def pci_ids(smi):
    """{bus_key: (pci.device_id, pci.sub_device_id)} as nvidia-smi prints them
    ('0x233010DE'): the model is identified by these (validate/expectations.py)."""
    if not smi:
        return {}
    rows, _, err = host.query_gpus(smi, ["pci.bus_id", "pci.device_id", "pci.sub_device_id"], timeout=30)
    if err or not rows:
        return {}
    return dict((bus_key(r.get("pci.bus_id")), (r.get("pci.device_id"), r.get("pci.sub_device_id")))
                for r in rows)


class Sampler(object):
    """Reads nvidia-smi every ``interval`` seconds until stopped."""

    def __init__(self, smi, interval=1.0):
        self.smi = smi
        self.interval = interval
        self.samples = []  # [(seconds since start, {bus_key: row})]
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.smi:
            self._t0 = time.monotonic()
            self._thread = threading.Thread(target=self._loop, name="nvidia-smi-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        return False

    def _loop(self):
        while not self._stop.is_set():
            reading = read_once(self.smi)
            if reading:
                self.samples.append((time.monotonic() - self._t0, reading))
            self._stop.wait(self.interval)

    def for_gpu(self, key):
        """The rows of one GPU over the samples."""
        return [r[key] for _, r in self.samples if key in r]
