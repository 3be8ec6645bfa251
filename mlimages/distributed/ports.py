"""Free TCP ports for the tasks of a cluster on this machine (local_cluster, tools/benchmark.py,
the process tests): drawn at random below the kernel's ephemeral range, so that no outgoing
connection can take one between the check and the task's bind."""
import random
import socket

LOWEST_PORT = 10000


def ephemeral_ports(path='/proc/sys/net/ipv4/ip_local_port_range'):
    """(low, high) of the ports the kernel gives outgoing connections."""
    try:
        with open(path) as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def bindable(port, host):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_ports(count, host='127.0.0.1', rng=None):
    """`count` distinct ports that were free a moment ago, drawn at random below the
    kernel's ephemeral range: no outgoing connection (of the tasks themselves or any other
    process) can take one between this check and a task's bind, or while a killed task is
    being restarted on it. Where that range leaves no room, ports the kernel picks (bound
    to port 0, then closed)."""
    rng = rng or random.SystemRandom()
    low = ephemeral_ports()[0]
    ports = []
    if low - LOWEST_PORT >= 100 * count:
        for _ in range(100 * count):
            port = rng.randrange(LOWEST_PORT, low)
            if port not in ports and bindable(port, host):
                ports.append(port)
                if len(ports) == count:
                    return ports
    sockets = []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
            if s.getsockname()[1] not in ports:
                ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports
