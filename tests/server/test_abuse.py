"""Bad input and abuse: writes without a valid key (none, unknown, revoked, expired) are 401,
with the wrong scope 403, nothing stored; oversized, empty, malformed and hostile archives
are refused with a clear message; a key past its rate is 429; a site's hostile names
(`<script>`, SQL) are escaped on every page and stored as text."""

from __future__ import annotations

import io
import os
import sqlite3
import tarfile
import threading
from urllib.parse import quote

import httpx
import pytest

import bidkit
import serverkit
from conftest import milarun, one_line_error
from serverkit import Server

HOSTILE = "<script>alert(1)</script>'; DROP TABLE uploads; --"
LIMIT = 1 << 20  # --max-upload-mb 1


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A server with a 1 MiB upload limit, 2 s an upload and 6 writes a minute per key."""
    top = tmp_path_factory.mktemp("small")
    running = Server(
        f"sqlite:///{top / 'results.sqlite'}",
        top / "root",
        extra=("--max-upload-mb", "1", "--pushes-per-minute", "6", "--upload-seconds", "2"),
    ).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    top = tmp_path_factory.mktemp("package")
    return serverkit.package(serverkit.run_folder(top / "run"), top / "run.tar.gz")


def uploads(server: Server) -> int:
    with sqlite3.connect(server.db.removeprefix("sqlite:///")) as conn:
        return int(conn.execute("SELECT count(*) FROM uploads").fetchone()[0])


def post(
    server: Server, key: str | None, body: bytes, path: str = "/api/uploads", **params: str
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return httpx.post(server.url + path, params=params, headers=headers, content=body, timeout=60)


@pytest.mark.slow
def test_writes_without_a_valid_key_are_refused_and_store_nothing(small, package, tmp_path):
    body = package.read_bytes()
    assert post(small, None, body).status_code == 401
    assert post(small, "garbage", body).json()["detail"].startswith("refused: not a milarun key")
    unknown = "mrk_abcdefghijkm_" + "x" * 43
    assert post(small, unknown, body).json()["detail"] == "refused: unknown key"
    revoked = small.key("lab-r")
    prefix = revoked.split("_")[1]
    done = milarun("serve", "keys", "revoke", prefix, "--db", small.db)
    assert done.returncode == 0 and f"key {prefix} revoked" in done.stdout
    answer = post(small, revoked, body)
    assert (
        answer.status_code == 401 and answer.json()["detail"] == f"refused: key {prefix} is revoked"
    )
    expired = small.key("lab-e", "--expires", "2099-01-01")
    with sqlite3.connect(small.db.removeprefix("sqlite:///")) as conn:  # its date has come
        conn.execute("UPDATE keys SET expires_at = 1 WHERE prefix = ?", (expired.split("_")[1],))
    assert "is expired" in post(small, expired, body).json()["detail"]
    shown = milarun("serve", "keys", "list", "--db", small.db).stdout
    assert f"{prefix}  lab-r" in shown and "revoked" in shown and "expired" in shown
    assert revoked not in shown and expired not in shown  # prefixes only, never a key
    pusher = small.key("lab-p")
    wrong = post(small, pusher, b"{}", "/api/tenders", name="t")
    assert wrong.status_code == 403 and "needs admin" in wrong.json()["detail"]
    assert uploads(small) == 0
    listed = httpx.get(f"{small.url}/api/keys", headers={"Authorization": f"Bearer {pusher}"})
    assert [k["site"] for k in listed.json()] == ["lab-p"]  # never another site's keys
    assert all("secret" not in str(k) and pusher not in str(k) for k in listed.json())
    past = one_line_error(
        milarun("serve", "keys", "add", "--site", "x", "--expires", "2000-01-01", "--db", small.db)
    )
    assert "--expires: that date is past" in past
    assert "a site name is" in one_line_error(
        milarun("serve", "keys", "add", "--site", HOSTILE, "--db", small.db)
    )


def hostile_archive(tmp_path, member: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    return out.getvalue()


def test_oversized_and_malformed_uploads_are_refused_with_a_clear_message(small, tmp_path):
    key = small.key("lab-m")
    big = os.urandom(LIMIT + 1)
    answer = post(small, key, big)
    assert answer.status_code == 413 and "the limit is 1,048,576 bytes" in answer.json()["detail"]

    def chunks():  # no Content-Length: the server counts as it reads
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    streamed = httpx.post(
        f"{small.url}/api/uploads",
        headers={"Authorization": f"Bearer {key}"},
        content=chunks(),
        timeout=60,
    )
    assert streamed.status_code == 413 and "over the limit" in streamed.json()["detail"]
    assert post(small, key, b"").json()["detail"].startswith("empty upload")
    junk = post(small, key, os.urandom(5000), name="junk.tar.gz")
    assert junk.status_code == 422 and junk.json()["detail"].startswith("junk.tar.gz")
    escaping = post(small, key, hostile_archive(tmp_path, "../evil"), name="evil.tar.gz")
    assert escaping.status_code == 422 and "../evil" in escaping.json()["detail"]
    empty = post(small, key, hostile_archive(tmp_path, "notes.txt"), name="e.tar.gz")
    assert empty.status_code == 422, empty.text
    assert uploads(small) == 0
    assert not list((small.root / "spool").iterdir())  # every spooled file removed


def test_a_key_past_its_rate_is_refused(small):
    key = small.key("lab-q")
    codes = [post(small, key, b"").status_code for _ in range(6)]
    assert codes == [422] * 6
    answer = post(small, key, b"")
    assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1


def test_hostile_names_are_escaped_on_every_page(server, tmp_path):
    admin = {"Authorization": f"Bearer {server.admin}"}
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome", "sine_wave"], repeat=1)
    made = httpx.post(
        f"{server.url}/api/tenders",
        params={"name": HOSTILE},
        headers=admin,
        content=tender.read_bytes(),
    )
    assert made.status_code == 201, made.text
    key = server.key("lab-h")
    folder = serverkit.run_folder(tmp_path / "run", seed=3)
    bid = serverkit.package(folder, tmp_path / "bid.tar.gz", tender)
    pushed = post(server, key, bid.read_bytes(), name=HOSTILE, tender=HOSTILE)
    assert pushed.status_code == 201 and pushed.json()["status"] == "accepted", pushed.text
    assert pushed.json()["name"] == HOSTILE  # stored as text, as given
    other = post(server, server.key("lab-o"), bid.read_bytes())
    assert other.status_code == 409 and "share" not in other.text  # not another site's link
    bad = post(server, key, bid.read_bytes(), visibility=HOSTILE)
    assert bad.status_code == 422 and "visibility" in bad.json()["detail"]
    upload = pushed.json()["id"]
    pages = [
        "/",
        "/runs",
        "/sites/lab-h",
        f"/uploads/{upload}",
        "/tests",
        "/tenders",
        f"/tenders/{quote(HOSTILE, safe='')}",
        "/tests/quick.polynome",
    ]
    for page in pages:
        shown = httpx.get(server.url + page, timeout=120)
        assert shown.status_code == 200, (page, shown.text[:300])
        assert "<script>" not in shown.text, page
    for page in pages[:4] + pages[5:7]:
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in httpx.get(server.url + page).text, page
    listed = httpx.get(f"{server.url}/api/sites/lab-h").json()
    assert listed[0]["name"] == HOSTILE and uploads(server) >= 1  # the table is still there
    missing = httpx.get(f"{server.url}/sites/{quote(HOSTILE, safe='')}")
    assert missing.status_code == 404 and "<script>" not in missing.text


def test_a_stalled_upload_is_cut_and_nothing_stored(small, package):
    key = small.key("lab-s")
    release = threading.Event()
    threading.Timer(4.0, release.set).start()  # the second half, after the server's 2 s
    try:
        answer = httpx.post(
            f"{small.url}/api/uploads",
            headers={"Authorization": f"Bearer {key}"},
            content=serverkit.half_then_wait(package.read_bytes(), release),
            timeout=30,
        )
        assert answer.status_code == 408 and "slower than 2 s" in answer.json()["detail"]
    except httpx.TransportError:  # cut while it still sent: the same to the server
        pass
    assert uploads(small) == 0 and not list((small.root / "spool").iterdir())


def test_push_says_a_package_is_over_the_servers_limit_before_sending_it(small, tmp_path):
    folder = serverkit.run_folder(tmp_path / "run", seed=4)
    (folder / "noise.bin").write_bytes(os.urandom(LIMIT + 4096))  # packed with the results
    bundle = serverkit.package(folder, tmp_path / "big.tar.gz")
    line = one_line_error(serverkit.push(small, bundle, small.key("lab-big")))
    assert "over the server's limit of 1,048,576 bytes; the package is kept: " in line
    assert uploads(small) == 0 and bundle.is_file()


def test_bad_command_lines_are_one_line_errors(tmp_path):
    down = one_line_error(
        milarun(
            "serve",
            "--db",
            "postgresql+psycopg://nobody@127.0.0.1:1/x",
            "--root",
            tmp_path / "root",
        )
    )
    assert "cannot open" in down and "127.0.0.1:1" in down
    assert "--port" in one_line_error(milarun("serve", "--port", "0", "--root", tmp_path))
    env = {"MILARUN_KEY": "mrk_x"}
    assert "give a URL" in one_line_error(
        milarun("push", tmp_path, "--server", "example.org", env=env)
    )
    missing = one_line_error(milarun("push", tmp_path / "nope", "--server", "http://x", env=env))
    assert "no such results folder or bid package" in missing
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    assert "empty; put the key alone in it" in one_line_error(
        milarun("push", tmp_path, "--server", "http://x", "--key-file", empty)
    )
