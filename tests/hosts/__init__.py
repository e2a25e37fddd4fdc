"""Test hosts: network namespaces on this machine, joined by veth links, for tests of network
partitions (net.py), the servers run on the server host (servers.py), the delay proxy
(proxy.py) and the faults (faults.py)."""
