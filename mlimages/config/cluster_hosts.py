"""The host lists of --worker_hosts and --ps_hosts: parsed here, below both the flag
checks (flag_checks) and the cluster set-up that turns them into TF_CONFIG
(distributed/cluster_flags)."""
import re

HOST_PORT = re.compile(r'^[A-Za-z0-9_.\-]+:\d{1,5}$|^\[[0-9A-Fa-f:.]+\]:\d{1,5}$')


def hosts(text):
    """'h0:p,h1:p' -> ['h0:p', 'h1:p'] ('' -> [])."""
    return [h.strip() for h in text.split(',') if h.strip()]


def host_problem(name, value):
    """What is wrong with the host list --name=value (an address that is not host:port),
    else None."""
    for address in hosts(value):
        if not HOST_PORT.match(address) or not 0 < int(address.rsplit(':', 1)[1]) < 65536:
            return '--%s: %r is not host:port (e.g. node1:2222)' % (name, address)
    return None
