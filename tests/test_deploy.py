"""deploy/: two replicas of `streamlit run app.py` behind Debian's nginx, all on 127.0.0.1.

The replicas serve the tiny test registry (SPECVIZ_MODELS=tests/models_tiny.yaml, as the other app tests),
so no real model loads. The launcher starts its own nginx with its own prefix and config on free ports
and stops everything at the end of the module. Plain HTTP: which replica answered is nginx's X-Replica
header (the upstream's address; after a failed try, the list of those tried).

The last test kills a replica, so it stays last in this file.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import urllib.request
from pathlib import Path

import pytest

from deploy import launch

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
KEYS = [f"laptop-{i}" for i in range(12)]  # sticky keys (the cookie's value); nginx's hash of each is fixed

pytestmark = pytest.mark.skipif(not Path(NGINX).exists(), reason=f"{NGINX} is missing: apt-get install nginx")


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    # thread counts the launcher must replace with one per core of each replica
    env = dict(os.environ, SPECVIZ_MODELS=str(TINY), **{name: "7" for name in launch.THREAD_VARS})
    log = tmp_path_factory.mktemp("deploy") / "nginx.log"
    front, *replicas = launch.free_ports(3)
    with launch.serve(2, port=front, host="127.0.0.1", replica_ports=replicas, cores_per_replica=1, env=env,
                      nginx=NGINX, start_s=45, nginx_log=log) as d:
        yield d
    # every process the launcher started has exited
    assert all(p.poll() is not None for p in [d.nginx, *(r.proc for r in d.replicas)])


def get(dep, path: str = "/", key: str | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of one request through nginx, as a browser holding sticky key `key`."""
    req = urllib.request.Request(dep.url + path, headers={"Cookie": f"{launch.COOKIE}={key}"} if key else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        headers: dict[str, str] = {}
        for k, v in r.headers.items():  # a header sent twice (Set-Cookie) is kept as one, joined by ", "
            headers[k.lower()] = f"{headers[k.lower()]}, {v}" if k.lower() in headers else v
        return r.status, headers, r.read().decode(errors="replace")


def replica_of(dep, headers: dict[str, str]) -> int:
    """The index of the replica that answered: the last address nginx tried."""
    port = int(headers["x-replica"].split(",")[-1].strip().rsplit(":", 1)[1])
    return next(r.index for r in dep.replicas if r.port == port)


def test_each_browser_stays_on_its_replica_and_both_serve(dep):
    route = {}
    for key in KEYS:
        seen = {replica_of(dep, get(dep, path, key)[1]) for path in ("/", "/_stcore/health", "/", "/_stcore/health")}
        assert len(seen) == 1, f"{key} moved between replicas {seen}"
        route[key] = seen.pop()
    assert set(route.values()) == {0, 1}, route  # both replicas take browsers

    # a new browser is given its key, and keeps its replica with it
    status, headers, _ = get(dep)
    assert status == 200
    key = headers["set-cookie"].split(f"{launch.COOKIE}=", 1)[1].split(";")[0]
    assert key
    first = replica_of(dep, headers)
    assert {replica_of(dep, get(dep, "/", key)[1]) for _ in range(4)} == {first}
    assert launch.COOKIE not in get(dep, "/", key)[1].get("set-cookie", "")  # a key once given is kept


def test_each_replica_is_pinned_to_its_cores_with_as_many_threads(dep):
    cpus = [r.cpus for r in dep.replicas]
    assert cpus[0] != cpus[1] or len(os.sched_getaffinity(0)) == 1
    for r in dep.replicas:
        assert sorted(os.sched_getaffinity(r.proc.pid)) == r.cpus
        pairs = Path(f"/proc/{r.proc.pid}/environ").read_text().split("\0")
        environ = dict(kv.split("=", 1) for kv in pairs if "=" in kv)
        assert environ["OMP_NUM_THREADS"] == environ["MKL_NUM_THREADS"] == str(len(r.cpus))
        assert environ["SPECVIZ_MODELS"] == str(TINY)


def test_the_app_websocket_is_upgraded_through_nginx(dep):
    """Streamlit's page talks over a websocket on /_stcore/stream: nginx must pass the upgrade on."""
    host, port = dep.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall((f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   f"Sec-WebSocket-Version: 13\r\nCookie: {launch.COOKIE}={KEYS[0]}\r\n\r\n").encode())
        head = s.recv(4096).decode(errors="replace")
    assert head.startswith("HTTP/1.1 101"), head
    assert "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head  # the accept key of RFC 6455's example


@pytest.mark.browser
def test_a_browser_whose_replica_dies_goes_on_on_the_other_with_a_clear_message(tmp_path):
    """Chromium on the main page; its replica is killed. Streamlit's client reconnects to the other replica
    (nginx moves its key); the next widget touched reruns the page there, in a new session: the page says
    why earlier results are gone (explain.NEW_SESSION), the widget works there, and no traceback shows. A click
    while the client reconnects finds its widgets off, so it may have to be made again."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium")
    pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    from playwright.sync_api import expect, sync_playwright

    from specviz.teaching import explain

    env = dict(os.environ, SPECVIZ_MODELS=str(TINY))
    front, *replicas = launch.free_ports(3)
    with (launch.serve(2, port=front, host="127.0.0.1", replica_ports=replicas, cores_per_replica=1, env=env,
                       nginx=NGINX, start_s=45, nginx_log=tmp_path / "nginx.log") as d,
          sync_playwright() as p):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(d.url)
            recorded = page.get_by_text("Recorded runs", exact=False).first
            expect(recorded).to_be_visible(timeout=40_000)
            expect(page.get_by_text(explain.NEW_SESSION)).to_have_count(0)  # a page opened afresh: no note
            key = next(c["value"] for c in page.context.cookies() if c["name"] == launch.COOKIE)
            dead = d.replicas[replica_of(d, get(d, "/", key)[1])]
            dead.proc.send_signal(signal.SIGKILL)
            dead.proc.wait(timeout=10)

            recorded.click()  # the first rerun after the loss runs on the other replica
            expect(page.get_by_text(explain.NEW_SESSION)).to_be_visible(timeout=20_000)
            radio = page.get_by_role("radio", name="Recorded runs", exact=False)
            if not radio.is_checked():  # the click landed while the client was reconnecting (widgets are off then)
                recorded.click()
            expect(radio).to_be_checked()  # the user carries on on the other replica
            assert "Traceback" not in page.locator("body").inner_text()
            assert replica_of(d, get(d, "/", key)[1]) != dead.index
        finally:
            browser.close()


def test_killing_a_replica_leaves_the_other_serving(dep):
    route = {key: replica_of(dep, get(dep, "/", key)[1]) for key in KEYS}
    dead, alive = dep.replicas[0], dep.replicas[1]
    on_dead = [k for k, i in route.items() if i == dead.index]
    on_alive = [k for k, i in route.items() if i == alive.index]
    dead.proc.send_signal(signal.SIGKILL)  # as a crash: no goodbye to nginx or the browsers
    dead.proc.wait(timeout=10)

    # a browser whose replica died gets the app from the other one, on its first request
    for key in on_dead:
        for path in ("/", "/_stcore/health"):
            status, headers, body = get(dep, path, key)
            assert status == 200 and replica_of(dep, headers) == alive.index
            assert "Traceback" not in body
    assert "<div id=\"root\">" in get(dep, "/", on_dead[0])[2]  # Streamlit's page, not an nginx error page
    # the other replica's browsers stay where they were (their sessions live on), and new ones come too
    assert {replica_of(dep, get(dep, "/", key)[1]) for key in on_alive} == {alive.index}
    assert replica_of(dep, get(dep)[1]) == alive.index
