"""Several worker hosts on one machine: network namespaces on a bridge, each its own address.

A test or a benchmark that needs django-q2 clusters on separate hosts (the Redis broker shared
between them) runs each cluster in its own Linux network namespace:

- a hub namespace holds a bridge (``10.231.0.1/24``) and, per host, one end of a veth pair
  whose other end is in the host's namespace (``10.231.0.11``, ``.12``, ...), loopback up;
- nothing is created in this machine's own network namespace: no link, no address, no route.
  A program there that watches the network (Chromium aborts its loads with
  ``ERR_NETWORK_CHANGED`` when a link or address appears) sees nothing change;
- PostgreSQL, Redis and the order system listen on 127.0.0.1 only, which a namespace cannot
  reach, so small TCP forwarders (asyncio, one thread of this process) listen on the bridge's
  address inside the hub (their sockets are made there, ``setns(2)`` in a short-lived thread)
  and relay to them from this process's own namespace; each counts the connections and bytes
  per peer address, so a test can show which host's traffic crossed the network;
- each host's ``qcluster`` runs inside its namespace (``ip netns exec``) and in a UTS namespace
  of its own with its own hostname (``unshare --uts``), so ``Worker.current`` labels
  (``apply:<hostname>:<pid>``, stored on every attempt) name the host; it has its own
  ``HOLDFAST_STATE_DIR`` (restore detection keeps a per-host epoch file) and ``PGAPPNAME``
  (``pg_stat_activity.application_name`` names the host of each connection).

Needs root, ``ip`` (iproute2), ``unshare`` and ``hostname`` (util-linux), and a kernel with
network namespaces, veth and bridges: ``unavailable_reason()`` says what is missing. Namespace
names carry the prefix ``hfq`` and the owner's process id, so a run that was killed leaves
nothing another run trips over: every run first removes the ``hfq`` namespaces whose owner is
gone (their links go with them), under a lock. Everything a run made is removed when its
context exits, on failure too.

Measurement only: nothing here changes how Holdfast works.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PREFIX = "hfq"
SUBNET = "10.231.0"  # every run has its own hub, so every run may use the same subnet
_LOCK_PATH = Path(tempfile.gettempdir()) / "holdfast-netns.lock"
_NETNS_NAME = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+-(\d+|hub)$")
_CLONE_NEWNET = 0x40000000
ROOT = Path(__file__).resolve().parents[2]


class HostsUnavailable(RuntimeError):
    """Worker hosts cannot be set up here (the message says why)."""


# --- capability -----------------------------------------------------------------------------

_unavailable: str | None | bool = False  # False: not asked yet


def unavailable_reason() -> str | None:
    """Why network-namespace worker hosts cannot run here, or ``None`` when they can.

    Asked once per process: it adds and removes a scratch namespace, the one sure test."""
    global _unavailable
    if _unavailable is False:
        _unavailable = _find_unavailable_reason()
    return _unavailable if isinstance(_unavailable, str) else None


def _find_unavailable_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("hostname", "hostname")):
        if shutil.which(tool) is None:
            return f"no `{tool}` command (install {package})"
    if not Path("/proc/self/ns/net").exists() or not Path("/proc/self/ns/uts").exists():
        return "this kernel has no network or UTS namespaces"
    probe = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(2)}-0"
    try:
        result = _ip("netns", "add", probe, check=False)
        if result.returncode != 0:
            return f"`ip netns add` failed: {result.stderr.strip() or result.returncode}"
        argv = ["ip", "netns", "exec", probe, "unshare", "--uts", "hostname", f"{PREFIX}-probe"]
        inside = subprocess.run(  # noqa: S603 - fixed argv
            argv,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if inside.returncode != 0:
            return f"`ip netns exec … unshare --uts` failed: {inside.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


# --- ip(8) ----------------------------------------------------------------------------------


def _ip(*args: str, check: bool = True, netns: str | None = None) -> subprocess.CompletedProcess:
    argv = ["ip", *(("-n", netns) if netns else ()), *args]  # iproute2 from PATH
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
    if check and result.returncode != 0:
        raise HostsUnavailable(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
    return result


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_pids(name: str) -> list[int]:
    result = _ip("netns", "pids", name, check=False)
    return [int(word) for word in result.stdout.split() if word.isdigit()]


def _kill_netns(name: str) -> None:
    """SIGKILL every process still inside the namespace, then remove it."""
    for _ in range(3):
        pids = _netns_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    _ip("netns", "del", name, check=False)


def remove_stale() -> list[str]:
    """Remove the ``hfq`` namespaces whose owning process is gone; what was removed (a
    namespace's links go with it).

    Call with the lock held (``_locked``): a live run creates its namespaces under it."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if (match := _NETNS_NAME.match(name)) and not _pid_alive(int(match.group(1))):
            _kill_netns(name)
            removed.append(name)
    return removed


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with _LOCK_PATH.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def listening_sockets(netns: str, host: str, count: int) -> list[socket.socket]:
    """``count`` TCP sockets listening on ``host`` (an ephemeral port each) inside the named
    network namespace, made by a short-lived thread that enters it: ``setns(2)`` changes the
    calling thread only, and a socket stays in the namespace it was made in."""
    made: list[socket.socket] = []
    failure: list[BaseException] = []

    def enter_and_listen() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open(f"/run/netns/{netns}") as target:  # noqa: PTH123 - fd for setns(2)
                if libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns into {netns}: {os.strerror(error)}")
            for _ in range(count):
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((host, 0))
                listener.listen(128)
                listener.setblocking(False)
                made.append(listener)
        except OSError as exc:  # raised again in the caller's thread
            failure.append(exc)
        # The thread ends here, in the namespace it entered: nothing else runs on it.

    worker = threading.Thread(target=enter_and_listen, name="holdfast-netns-listen")
    worker.start()
    worker.join(timeout=10)
    if failure or worker.is_alive() or len(made) != count:
        for listener in made:
            listener.close()
        reason = failure[0] if failure else "timed out"
        raise HostsUnavailable(f"could not listen on {host} inside {netns}: {reason}")
    return made


# --- forwarders -----------------------------------------------------------------------------


class _Pipe(asyncio.Protocol):
    """One side of a relayed TCP connection: what it receives, the other side sends."""

    def __init__(self, forwarder: Forwarder, peer: str | None) -> None:
        self.forwarder = forwarder
        self.peer = peer  # the client's address (client side only)
        self.transport: asyncio.Transport | None = None
        self.other: _Pipe | None = None
        self.early: list[bytes] = []
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.peer is None:
            return
        self.peer = str(transport.get_extra_info("peername")[0])
        self.forwarder.opened(self.peer)
        self.forwarder.pipes.add(self)
        transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._connect_upstream())
        self.forwarder.tasks.add(task)
        task.add_done_callback(self.forwarder.tasks.discard)

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        upstream = _Pipe(self.forwarder, None)
        upstream.other, self.other = self, upstream
        self.forwarder.pipes.add(upstream)
        try:
            await loop.create_connection(
                lambda: upstream, self.forwarder.target_host, self.forwarder.target_port
            )
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.forwarder.received(self.peer, len(data))
        other = self.other
        if other is None or other.transport is None:
            self.early.append(data)
            return
        if self.early:
            other.transport.write(b"".join(self.early))
            self.early.clear()
        other.transport.write(data)

    def eof_received(self) -> bool:
        self.eof = True
        other = self.other
        if other is None or other.transport is None or other.eof:
            self._close_both()
            return False
        if other.transport.can_write_eof():
            other.transport.write_eof()
        return True  # the other direction may still carry data

    def connection_lost(self, exc: Exception | None) -> None:
        self.forwarder.pipes.discard(self)
        self._close_both()

    def _close_both(self) -> None:
        for pipe in (self, self.other):
            if pipe is not None and pipe.transport is not None:
                pipe.transport.close()

    # Flow control: a side whose output backs up stops reading the other side.
    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()


@dataclass
class Forwarder:
    """Listens on ``listen_host:port`` and relays each connection to ``target_host:target_port``;
    counts the connections and the bytes sent per client address."""

    name: str
    listen_host: str
    target_host: str
    target_port: int
    port: int = 0
    connections: Counter[str] = field(default_factory=Counter)
    bytes_from: Counter[str] = field(default_factory=Counter)
    pipes: set[_Pipe] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _server: asyncio.Server | None = None

    def opened(self, peer: str) -> None:
        self.connections[peer] += 1

    def received(self, peer: str, size: int) -> None:
        self.bytes_from[peer] += size

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"


class Relay:
    """The forwarders of one run, on one asyncio loop in a daemon thread of this process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.forwarders: list[Forwarder] = []
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="holdfast-netns-relay", daemon=True
        )
        self._thread.start()

    def forward(
        self,
        name: str,
        listener: socket.socket,
        target_host: str,
        target_port: int,
    ) -> Forwarder:
        """Relay the connections ``listener`` accepts (a listening socket, in whichever network
        namespace it was made) to ``target_host:target_port`` as this process reaches it."""
        listen_host = str(listener.getsockname()[0])
        forwarder = Forwarder(name, listen_host, target_host, target_port)

        async def start() -> asyncio.Server:
            return await self.loop.create_server(lambda: _Pipe(forwarder, peer=""), sock=listener)

        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout=10)
        forwarder._server = server
        forwarder.port = int(server.sockets[0].getsockname()[1])
        self.forwarders.append(forwarder)
        return forwarder

    def close(self) -> None:
        async def stop() -> None:
            for forwarder in self.forwarders:
                if forwarder._server is not None:
                    forwarder._server.close()
                for task in list(forwarder.tasks):
                    task.cancel()
                for pipe in list(forwarder.pipes):
                    if pipe.transport is not None:
                        pipe.transport.abort()
            await asyncio.sleep(0)  # let the aborted transports close their sockets

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


def _rehost(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (credentials, path and query kept)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@{host}:{port}" if auth else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _target(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


# --- hosts ----------------------------------------------------------------------------------


@dataclass
class Host:
    """One worker host: a network namespace with its own address and hostname."""

    index: int
    netns: str
    address: str
    hostname: str
    state_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    _terminated: bool = False

    @property
    def name(self) -> str:
        return self.hostname

    def argv(self, *command: str) -> list[str]:
        """``command`` run inside this host: its network namespace, its own hostname."""
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.hostname,
            *command,
        ]

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the host's whole process group at once (a host that dies)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM once: django-q2 mishandles a second signal."""
        if self.process is not None and self.process.poll() is None and not self._terminated:
            self._terminated = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM once, wait up to ``timeout``, then SIGKILL whatever is left."""
        if self.process is None:
            return
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout)
        self.kill()


@dataclass
class Network:
    """The hosts of one run, the hub namespace whose bridge they share, and the forwarders
    listening there."""

    run: str
    hub: str
    gateway: str
    bridge: str
    hosts: list[Host]
    relay: Relay
    forwarders: dict[str, Forwarder]
    urls: dict[str, str]  # "database", "redis", "orders": as the hosts reach them

    def peers(self, forwarder: str) -> dict[str, int]:
        """Connections made through one forwarder (``postgres``, ``redis``, ``orders``), per
        client address."""
        return dict(self.forwarders[forwarder].connections)

    def host_env(self, host: Host, env: Mapping[str, str]) -> dict[str, str]:
        """The environment of a process on ``host``: ``env`` with the services at the
        addresses the host reaches, its own state directory and application name."""
        return {
            **env,
            "DATABASE_URL": self.urls["database"],
            "REDIS_URL": self.urls["redis"],
            "ORDER_SYSTEM_URL": self.urls["orders"],
            "HOLDFAST_STATE_DIR": str(host.state_dir),
            "PGAPPNAME": host.hostname,
            "PYTHONUNBUFFERED": "1",
        }


@contextlib.contextmanager
def worker_network(
    count: int,
    *,
    database_url: str,
    redis_url: str,
    orders_url: str,
    log_dir: Path,
) -> Iterator[Network]:
    """``count`` hosts on one bridge with forwarders to PostgreSQL, Redis and the order system
    (the URLs as this process reaches them); all of it removed on exit."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if reason := unavailable_reason():
        raise HostsUnavailable(reason)
    owner = os.getpid()
    nonce = secrets.token_hex(2)
    run = f"{PREFIX}{nonce}"
    hub = f"{PREFIX}-{owner}-{nonce}-hub"
    bridge = f"{run}b"
    gateway = f"{SUBNET}.1"
    namespaces: list[str] = []
    relay: Relay | None = None
    try:
        with _locked():
            remove_stale()
            _ip("netns", "add", hub)
            namespaces.append(hub)
            _ip("link", "set", "lo", "up", netns=hub)
            _ip("link", "add", bridge, "type", "bridge", netns=hub)
            _ip("addr", "add", f"{gateway}/24", "dev", bridge, netns=hub)
            _ip("link", "set", bridge, "up", netns=hub)
            hosts = []
            for index in range(count):
                netns = f"{PREFIX}-{owner}-{nonce}-{index}"
                outside, inside = f"{run}h{index}", f"{run}n{index}"
                _ip("netns", "add", netns)
                namespaces.append(netns)
                # Both ends made where they live: the hub's end in the hub, the host's in the host.
                _ip("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", netns,
                    netns=hub)  # fmt: skip
                _ip("link", "set", outside, "master", bridge, netns=hub)
                _ip("link", "set", outside, "up", netns=hub)
                address = f"{SUBNET}.{11 + index}"
                _ip("addr", "add", f"{address}/24", "dev", inside, netns=netns)
                _ip("link", "set", inside, "up", netns=netns)
                _ip("link", "set", "lo", "up", netns=netns)
                host_dir = log_dir / f"{run}-host{index}"
                host_dir.mkdir(parents=True, exist_ok=True)
                hosts.append(
                    Host(
                        index=index,
                        netns=netns,
                        address=address,
                        hostname=f"{run}-host{index}",
                        state_dir=host_dir / "state",
                        log_path=host_dir / "qcluster.log",
                    )
                )
        services = (
            ("database", database_url, 5432),
            ("redis", redis_url, 6379),
            ("orders", orders_url, 80),
        )
        listeners = listening_sockets(hub, gateway, len(services))
        relay = Relay()
        forwarders = {}
        urls = {}
        for (name, url, default_port), listener in zip(services, listeners, strict=True):
            target_host, target_port = _target(url, default_port)
            forwarder = relay.forward(name, listener, target_host, target_port)
            forwarders[name] = forwarder
            urls[name] = _rehost(url, gateway, forwarder.port)
        forwarders["postgres"] = forwarders["database"]
        yield Network(
            run=run,
            hub=hub,
            gateway=gateway,
            bridge=bridge,
            hosts=hosts,
            relay=relay,
            forwarders=forwarders,
            urls=urls,
        )
    finally:
        for netns in namespaces:
            for pid in _netns_pids(netns):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if relay is not None:
            relay.close()
        for netns in reversed(namespaces):  # a namespace's links go with it
            _kill_netns(netns)


@contextlib.contextmanager
def qclusters(
    network: Network,
    *,
    env: Mapping[str, str],
    hosts: list[Host] | None = None,
    startup_timeout: float = 90.0,
) -> Iterator[list[Host]]:
    """Start ``manage.py qcluster`` on every host (or on ``hosts``), with ``env`` plus each
    host's own settings (``Network.host_env``); wait until each says it is running; stop them
    all on exit (and any process left in their namespaces)."""
    started: list[Host] = []
    try:
        for host in hosts if hosts is not None else network.hosts:
            host.state_dir.mkdir(parents=True, exist_ok=True)
            with host.log_path.open("ab") as log:
                host.process = subprocess.Popen(  # noqa: S603 - ip netns exec, our interpreter
                    host.argv(sys.executable, "manage.py", "qcluster"),
                    cwd=ROOT,
                    env=network.host_env(host, env),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # the cluster's processes share its group
                )
            started.append(host)
        deadline = time.monotonic() + startup_timeout
        waiting = list(started)
        while waiting:
            for host in list(waiting):
                if " running." in host.output():
                    waiting.remove(host)
                elif not host.alive:
                    raise HostsUnavailable(
                        f"the qcluster on {host.hostname} exited while starting:\n"
                        f"{host.output()[-2000:]}"
                    )
            if waiting and time.monotonic() > deadline:
                raise HostsUnavailable(
                    f"qcluster not running after {startup_timeout:.0f}s on "
                    f"{', '.join(h.hostname for h in waiting)}:\n{waiting[0].output()[-2000:]}"
                )
            time.sleep(0.1)
        yield started
    finally:
        for host in started:  # all at once: each may take a few seconds
            host.terminate()
        for host in started:
            host.stop()
        for host in started:
            for pid in _netns_pids(host.netns):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def worker_hosts(
    count: int,
    *,
    env: Mapping[str, str],
    log_dir: Path,
    database_url: str,
    redis_url: str,
    orders_url: str,
) -> Iterator[Network]:
    """``count`` hosts, each running a ``qcluster``: ``worker_network`` and ``qclusters``."""
    with (
        worker_network(
            count,
            database_url=database_url,
            redis_url=redis_url,
            orders_url=orders_url,
            log_dir=log_dir,
        ) as network,
        qclusters(network, env=env),
    ):
        yield network
