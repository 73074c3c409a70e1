"""A host flooding the fleet cache's SSH forward (issue 21, point 5), over real OpenSSH.

h2 reaches the cache (stand-in HTTP servers on h1's loopback, as in test_fleet_cache.py) only
through the remote forward gpuprov opens over h2's SSH connection. A step on h2 then opens
hundreds of connections at once to the forwarded ports, as the attacking host did, holding
them open: before, each one became a control-side thread (about 260 seen) and Python
tracebacks reached the terminal. Now at most `forward.PER_HOST_CHANNELS` are carried at once, the rest
are closed with one warning line for the burst, and the run completes. The second case runs
with every file descriptor below 1024 taken first, so the I/O loop's and the forward's fds are
above what select(2) can watch.
"""
from __future__ import annotations

import json
import os
import resource
import threading

import pytest

from remote.commands import provision as provision_cmd
from remote.transport import forward
from tests.conftest import write_yaml
from tests.test_fleet_cache import NOTHING_LISTENS, cache_ports  # noqa: F401 - a fixture

pytestmark = [pytest.mark.slow, pytest.mark.root,  # real sshd, started as root
              # a traceback in a forward thread is what a user would see on the terminal
              pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")]

CONNECTIONS = 400  # at once, per round; the attack opened 290 to 750
ROUNDS = 3

# Run on the host: find the ports sshd listens on for the login user (the forwards), open CONNECTIONS at once
# to them, send a request on each, hold them, then count who got an answer. Last, one more
# connection must still be answered: the forward keeps serving after the flood.
HAMMER = r"""
import os, socket, sys, time

def forwarded_ports():
    # The sshd that listens for our forwards runs as us (its fds are not readable even so):
    # the login user's listening sockets on 127.0.0.1 are the forwards.
    ports = []
    for line in open("/proc/net/tcp").readlines()[1:]:
        f = line.split()
        local, state, uid = f[1], f[3], int(f[7])
        if state == "0A" and local.startswith("0100007F:") and uid == os.getuid():
            ports.append(int(local.split(":")[1], 16))
    return sorted(ports)

ports = forwarded_ports()
print("forwarded ports", ports)
answered = closed = 0
for round in range(ROUNDS):
    socks = []
    for n in range(CONNECTIONS):
        s = socket.socket()
        s.settimeout(15)
        try:
            s.connect(("127.0.0.1", ports[n % len(ports)]))
            s.sendall(b"GET /root HTTP/1.0\r\n\r\n")
        except OSError:
            closed += 1
            s.close()
            continue
        socks.append(s)
    time.sleep(1)
    for s in socks:
        try:
            data = s.recv(64)
        except OSError:
            data = b""
        if data.startswith(b"HTTP/"):
            answered += 1
        else:
            closed += 1
        s.close()
print(f"flood: {answered} answered, {closed} closed")
s = socket.create_connection(("127.0.0.1", ports[0]), timeout=15)
s.sendall(b"GET /root HTTP/1.0\r\n\r\n")
print("after the flood:", s.recv(64).split(b"\r\n")[0].decode())
""".replace("ROUNDS", str(ROUNDS)).replace("CONNECTIONS", str(CONNECTIONS))


@pytest.fixture
def low_fds_taken(request):
    """With `True`: RLIMIT_NOFILE raised and every fd below 1100 taken, so whatever the run
    opens lands at 1100 and above."""
    if not request.param:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    taken = []
    while True:
        fd = os.open("/dev/null", os.O_RDONLY)
        taken.append(fd)
        if fd >= 1100:
            break
    yield
    for fd in taken:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("low_fds_taken", [False, True], ids=["fds", "fds-above-1024"],
                         indirect=True)
def test_a_host_flooding_the_cache_forward_is_refused_past_the_cap(
        farm, work, cache_ports, capfd, low_fds_taken):  # noqa: F811 - the fixture
    apt_port, pypi_port, _ = cache_ports
    hammer = work / "hammer.py"
    hammer.write_text(HAMMER)
    recipe = write_yaml(work / "flood.yaml", {"name": "flood", "steps": [
        # planned through the cache (so the forward opens), satisfied by `creates`: runs nothing
        {"name": "a wheel", "pip": {"venv": f"{work}/venv", "packages": ["six==1.16.0"]},
         "creates": "/"},
        {"name": "flood the forward", "shell": f"python3 {hammer}"},
    ]})
    inventory = write_yaml(work / "inventory.yaml", {
        "known_hosts": [str(farm.known_hosts)],
        "cache": {"host": "h1", "address": NOTHING_LISTENS, "apt_port": apt_port,
                  "pypi_port": pypi_port},
        "hosts": {"h1": farm.host_entry(farm.addresses[0]),
                  "h2": farm.host_entry(farm.addresses[1])}})
    most = [0]
    done = threading.Event()

    def count_forward_threads():
        while not done.wait(0.05):
            most[0] = max(most[0], sum(t.name.startswith("forward-")
                                       for t in threading.enumerate()))
    sampler = threading.Thread(target=count_forward_threads, daemon=True)
    sampler.start()
    try:
        rc = provision_cmd.run(host="h2", recipe=str(recipe), inventory=str(inventory),
                           json_path=str(work / "result.json"), logs_dir=str(work / "logs"),
                           validate=False)
    finally:
        done.set()
        sampler.join()
    out, err = capfd.readouterr()
    print(f"forward threads at most: {most[0]}")
    assert rc == 0, out + err
    assert "Traceback" not in out + err
    [log] = (work / "logs" / "h2").glob("*/provision.log")
    text = log.read_text()
    print([line for line in text.splitlines() if "flood:" in line or "refused" in line])
    assert "after the flood: HTTP/1.0 200 OK" in text
    # the cap, plus threads that gave their place back and are just returning
    cap = getattr(forward, "PER_HOST_CHANNELS", 16)  # (the code before the caps has none)
    assert 0 < most[0] <= 2 * cap < CONNECTIONS
    refusals = [line for line in out.splitlines() if "refusing the host's connections" in line]
    assert len(refusals) == 1 and refusals[0].startswith("h2"), out
    data = json.loads((work / "result.json").read_text())
    assert data["hosts"]["h2"]["failed"] == 0


def test_the_cap_over_all_hosts_is_shared_by_their_forwards(farm, inventory):
    """Two hosts' forwards share one budget: with room for 6 over both (4 per host), 10
    connections held open to each host's forward are carried 6 at most in all, the rest are
    closed, and each host's burst is told once. (The hosts' loopback is this machine's, so the
    test connects to the forwarded ports itself.)"""
    import socket
    import time

    from remote.config.inventory import load_inventory
    from remote.transport.connection import connection_for
    from remote.transport.hostkeys import KnownHosts
    from tests.http_stub import serve

    server = serve(lambda path, headers: (200, "text/plain", b"ok"))
    inv = load_inventory(inventory())
    known = KnownHosts(inv.known_hosts)
    conns = [connection_for(inv.hosts[name], inv.hosts, inv.timeouts, known).open()
             for name in ("h1", "h2", "h3")]
    told: list[tuple[str, str]] = []
    budget = forward.ChannelBudget(6)
    forwards = [forward.RemoteForwards(conn, conns[0], per_host=4, budget=budget,
                                       on_refused=lambda why, n=n: told.append((n, why)))
                for n, conn in zip(("h2", "h3"), conns[1:])]
    sockets = []
    try:
        ports = [f.add(server.server_address[1]) for f in forwards]
        for port in ports:
            for _ in range(10):
                sockets.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        deadline = time.monotonic() + 20
        while sum(f.active + f.refused for f in forwards) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(f.active for f in forwards) == 6 == budget.used
        assert all(f.active <= 4 for f in forwards)
        assert sum(f.refused for f in forwards) == 14
        assert sorted(n for n, _ in told) == ["h2", "h3"], told
        assert "past 4 at once (6 over all hosts)" in told[0][1]
    finally:
        for sock in sockets:
            sock.close()
        for f in forwards:
            f.close()
        for conn in conns:
            conn.close()
        server.shutdown()
        server.server_close()
    deadline = time.monotonic() + 10
    while budget.used and time.monotonic() < deadline:
        time.sleep(0.05)
    assert budget.used == 0, "every carried connection gave its place back"
