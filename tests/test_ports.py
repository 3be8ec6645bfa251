"""Tests of mlimages/distributed/ports.py: free ports for a cluster's tasks on this machine."""
import itertools
import random
import socket

from mlimages.distributed import ports


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    low = ports.ephemeral_ports()[0]
    got = ports.free_ports(4)
    # below the range outgoing connections take their ports from
    assert len(set(got)) == 4 and all(ports.LOWEST_PORT <= p < low for p in got)
    assert all(ports.bindable(p, '127.0.0.1') for p in got)


def test_free_ports_skip_a_port_in_use_and_fall_back_to_the_kernels_choice(monkeypatch):
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(('127.0.0.1', 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        assert not ports.bindable(port, '127.0.0.1')

        class Draws(random.Random):
            def randrange(self, start, stop):
                return next(draws)
        monkeypatch.setattr(ports, 'ephemeral_ports', lambda: (port + 1000, 60999))
        monkeypatch.setattr(ports, 'LOWEST_PORT', port)
        draws = itertools.chain([port, port], itertools.count(port + 1))
        got = ports.free_ports(2, rng=Draws())
        assert len(set(got)) == 2 and all(port < p < port + 1000 for p in got)
        monkeypatch.setattr(ports, 'ephemeral_ports', lambda: (1024, 60999))
        assert len(set(ports.free_ports(3))) == 3   # no room below: the kernel's ports
    finally:
        taken.close()
