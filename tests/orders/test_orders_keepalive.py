"""HTTP/1.1 keep-alive in the bundled server (``orders.server``), with faults still reaching the
client's socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from orders.server import ThreadingWSGIServer, make_server

pytestmark = pytest.mark.order_system


def _local_port(response: httpx.Response) -> int:
    """The client-side port of the TCP connection that carried ``response`` (read while the
    connection is open)."""
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


def _sent(client: httpx.Client, method: str, path: str, **kwargs) -> tuple[httpx.Response, int]:
    response = client.request(method, path, **kwargs)
    return response, _local_port(response)


def _app(environ, start_response):
    body = b'{"ok": true}'
    if environ["PATH_INFO"] == "/no-length":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body, b""]  # two blocks: the server cannot know the length up front
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


@pytest.fixture
def server() -> Iterator[ThreadingWSGIServer]:
    server = make_server("127.0.0.1", 0, _app)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_requests_over_one_client_share_one_accepted_connection(server):
    host, port = server.server_address[:2]
    with httpx.Client(base_url=f"http://{host}:{port}") as client:
        sent = [
            _sent(client, "GET", "/a"),
            _sent(client, "POST", "/b", content=b"x" * 1000),
            _sent(client, "GET", "/c"),
        ]

    assert [answer.http_version for answer, _ in sent] == ["HTTP/1.1"] * 3
    assert len({port for _, port in sent}) == 1
    assert server.accepted == 1


def test_an_answer_without_a_length_closes_its_connection(server):
    host, port = server.server_address[:2]
    with httpx.Client(base_url=f"http://{host}:{port}") as client:
        unknown = client.get("/no-length")
        client.get("/a")

    assert unknown.headers["Connection"] == "close"
    assert unknown.json() == {"ok": True}
    assert server.accepted == 2


def test_every_order_system_answer_carries_its_length_and_keeps_the_connection(order_system):
    with httpx.Client(base_url=order_system.base_url, headers=order_system.auth_headers) as client:
        sent = [
            _sent(client, "GET", "/healthz"),
            _sent(client, "GET", "/capabilities"),
            _sent(client, "GET", "/orders/NOPE"),  # 404 refusal
            _sent(client, "GET", "/nowhere"),  # no such endpoint
            _sent(client, "POST", "/orders/NOPE/operations", content=b"not json"),  # 4xx
        ]
    anonymous = httpx.get(f"{order_system.base_url}/capabilities")  # 401

    for answer in [*(answer for answer, _ in sent), anonymous]:
        assert int(answer.headers["Content-Length"]) == len(answer.content)
        assert answer.headers.get("Connection") != "close"
    assert anonymous.status_code == 401
    assert len({port for _, port in sent}) == 1


def test_a_dropped_answer_ends_its_kept_alive_connection_and_the_next_request_gets_a_new_one(
    order_system,
):
    order_system.set_fault("drop_after_commit", path_prefix="/orders/NOPE/operations")
    with httpx.Client(base_url=order_system.base_url, headers=order_system.auth_headers) as client:
        _, before = _sent(client, "GET", "/capabilities")
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/orders/NOPE/operations", json={})
        after, after_port = _sent(client, "GET", "/capabilities")
        _, again_port = _sent(client, "GET", "/capabilities")

    assert after.status_code == 200
    assert before != after_port == again_port


def test_a_kept_alive_connection_survives_a_delay_after_commit_that_the_caller_waits_out(
    order_system,
):
    order_system.set_fault("delay_after_commit", path_prefix="/orders/NOPE/operations", seconds=0.3)
    with httpx.Client(base_url=order_system.base_url, headers=order_system.auth_headers) as client:
        first, first_port = _sent(client, "POST", "/orders/NOPE/operations", json={})
        _, second_port = _sent(client, "GET", "/capabilities")

    assert first.status_code == 422  # refused (no operation in the body), and still delayed
    assert first.elapsed.total_seconds() >= 0.3
    assert first_port == second_port


def test_a_burst_of_new_connections_waits_in_the_listen_queue_not_in_a_retried_handshake():
    """Connections the server has not accepted yet (its accepting thread busy or not scheduled)
    wait in the listen queue. With socketserver's own backlog of 5 the sixth handshake was
    dropped and retried by the client a second later: a write's read timeout counted that."""
    server = make_server("127.0.0.1", 0, _app)  # nothing accepts while the burst comes
    host, port = server.server_address[:2]
    opened, refused = [], 0
    try:
        for _ in range(40):
            try:
                opened.append(socket.create_connection((host, port), timeout=0.5))
            except TimeoutError:
                refused += 1
    finally:
        for sock in opened:
            sock.close()
        server.server_close()
    assert refused == 0, f"{refused} of 40 handshakes were not answered within 0.5 s"
