"""Loopback-only guard for processes run against the Hub stand-in (on ``PYTHONPATH`` through ``StandIn.env()``).

Every name resolution and connection to anything but 127.0.0.0/8, ::1 or ``localhost`` fails at once, as an offline
machine's would, and is recorded (one line per host) in ``$HUBSTANDIN_GUARD_LOG``. It keeps a client's side trips,
such as ``datasets`` asking ``datasets-server.<endpoint host>`` for a Parquet export, from leaving the machine
(not even as a DNS query). A ``sitecustomize`` found later on ``sys.path`` still runs.
"""

import ipaddress
import os
import socket
import sys

_LOG = os.environ.get("HUBSTANDIN_GUARD_LOG")
_seen = set()


def _loopback(host) -> bool:
    if host is None:
        return True  # getaddrinfo(None, port): a local bind
    host = host.decode() if isinstance(host, bytes) else str(host)
    if host.lower() in ("localhost", "localhost.localdomain", ""):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse(host):
    if host not in _seen:
        _seen.add(host)
        if _LOG:
            with open(_LOG, "a") as fh:
                fh.write(f"{os.getpid()} refused {host}\n")
    raise socket.gaierror(socket.EAI_NONAME, f"hub stand-in guard: no network beyond loopback ({host})")


_getaddrinfo = socket.getaddrinfo
_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex


def getaddrinfo(host, *args, **kwargs):
    if not _loopback(host):
        _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


def _checked(address):
    if isinstance(address, tuple) and address and not _loopback(address[0]):
        _refuse(address[0])


def connect(self, address):
    _checked(address)
    return _connect(self, address)


def connect_ex(self, address):
    _checked(address)
    return _connect_ex(self, address)


socket.getaddrinfo = getaddrinfo
socket.socket.connect = connect
socket.socket.connect_ex = connect_ex


def _chain():
    """Run the next ``sitecustomize`` on ``sys.path`` (the one this module shadows), if there is one."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
