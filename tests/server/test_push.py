"""Done when: a run pushed is on the server's pages, a re-push is a no-op that says so, a bid
pushed against a tender is verified and ranked, a forged bid is rejected with its reason."""

from __future__ import annotations

import time

import httpx
import pytest

import bidkit
import forgery
import serverkit
from conftest import ROOT, one_line_error
from pages import needs_chromium, number_problems, show


@pytest.fixture(scope="module")
def lab(server):
    return server.key("lab-a", "--official")


def test_a_run_pushed_is_on_the_pages_and_a_repush_is_a_no_op(server, lab, tmp_path):
    folder = serverkit.run_folder(tmp_path / "run")
    done = serverkit.push(server, folder, lab, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("run accepted: "), done.stdout
    assert "pushing run: 100%" in done.stderr
    upload = done.stdout.split("/uploads/")[1].strip()
    runs = httpx.get(f"{server.url}/api/runs").json()
    mine = [r for r in runs if r["id"] == upload]
    assert mine and mine[0]["site"] == "lab-a" and mine[0]["tier"] == "official"
    assert mine[0]["suite"] == "quick" and mine[0]["devices"] == "cpu:0, cpu:1"
    community = httpx.get(f"{server.url}/api/runs", params={"tier": "community"}).json()
    assert upload not in [r["id"] for r in community]  # lab-a's key is official
    for page in (
        "/",
        "/runs",
        "/sites/lab-a",
        f"/uploads/{upload}",
        f"/uploads/{upload}/report",
        "/tests",
        "/tests/quick.polynome",
        "/tenders",
    ):
        shown = httpx.get(server.url + page)
        assert shown.status_code == 200 and "<html" in shown.text, page
    spread = httpx.get(f"{server.url}/api/tests/quick.polynome").json()
    assert [r["site"] for r in spread["sites"]] == ["lab-a"] and spread["sites"][0]["n"] == 2
    assert "quick.polynome" in [t["test"] for t in httpx.get(f"{server.url}/api/tests").json()]
    rules = httpx.get(f"{server.url}/api/uploads/{upload}?format=csv").text.splitlines()
    assert rules[0] == "rule,ok,evidence" and any(r.startswith("evidence,True,") for r in rules)
    csv = httpx.get(f"{server.url}/api/runs?format=csv").text.splitlines()
    assert csv[0].startswith("id,site,name") and any(upload in line for line in csv)
    again = serverkit.push(server, folder, lab, cache=tmp_path / "cache")
    assert again.returncode == 0 and again.stdout.startswith("already there (accepted)")
    assert "packed before" in again.stderr
    assert len([r for r in httpx.get(f"{server.url}/api/runs").json() if r["id"] == upload]) == 1


def faster(result: dict) -> None:
    """The forgery of benchmarks/faults_forgery.py: rates and count x 1.2, the log left."""
    train = result["timings"]["train"]
    train["count"] *= 1.2
    train["rates"] = [r * 1.2 for r in train["rates"]]


@pytest.mark.slow
def test_bids_are_verified_ranked_and_a_forgery_rejected_with_its_reason(server, lab, tmp_path):
    tender = bidkit.tender(tmp_path / "tender.json", ["polynome", "sine_wave"], repeat=1)
    admin = {"Authorization": f"Bearer {server.admin}"}
    made = httpx.post(
        f"{server.url}/api/tenders",
        params={"name": "call-2027"},
        headers=admin,
        content=tender.read_bytes(),
    )
    assert made.status_code == 201, made.text
    vendor = server.key("vendor-b")
    packages = []
    for i, (key, rates) in enumerate([(lab, 1.0), (vendor, 1.3)]):
        folder = serverkit.run_folder(
            tmp_path / f"bid{i}", seed=i, rates={t: r * rates for t, r in serverkit.RATES.items()}
        )
        packages.append(serverkit.package(folder, tmp_path / f"bid{i}.tar.gz", tender))
        done = serverkit.push(server, packages[-1], key, "--tender", "call-2027", "--price", "1000")
        assert done.returncode == 0 and done.stdout.startswith("bid accepted"), (
            done.stdout + done.stderr
        )
    forged = bidkit.edited(packages[1], tmp_path, lambda f: bidkit.edit_results(f, faster))
    done = serverkit.push(server, forged, vendor, "--tender", "call-2027")
    assert done.returncode == 1 and "bid rejected" in done.stdout
    why = done.stdout.splitlines()[-1]
    assert why.startswith("why: evidence: ") and "quick.polynome" in why and "log" in why
    ranking = httpx.get(f"{server.url}/api/tenders/call-2027").json()
    assert len(ranking["bids"]) == 2  # the forgery is never ranked
    assert {b["name"].split("-")[0] for b in ranking["bids"]} == {"lab", "vendor"}
    best = max(ranking["bids"], key=lambda b: b["p_best"] or 0)
    assert best["name"].startswith("vendor-b") and best["rank"] == 1
    rejected = [u for u in ranking["uploads"] if u["status"] == "rejected"]
    assert len(rejected) == 1 and "evidence" in rejected[0]["reason"]
    assert "call-2027" in [t["tender"] for t in httpx.get(f"{server.url}/api/tenders").json()]
    page = httpx.get(f"{server.url}/tenders/call-2027").text
    assert "P(best)" in page and "never ranked" in page


def test_private_and_embargoed_runs_are_not_listed(server, lab, tmp_path):
    private = serverkit.run_folder(tmp_path / "private", seed=5)
    done = serverkit.push(server, private, lab, "--visibility", "private", cache=tmp_path / "c")
    assert done.returncode == 0, done.stderr
    share = done.stdout.split(": ", 1)[1].strip()
    assert "/share/" in share
    listed = httpx.get(f"{server.url}/api/runs").text
    token = share.rsplit("/", 1)[1]
    shown = httpx.get(share)
    assert shown.status_code == 200 and "accepted" in shown.text
    assert httpx.get(f"{share}/report").status_code == 200
    assert httpx.get(share.replace("/share/", "/api/share/")).json()["visibility"] == "private"
    later = serverkit.run_folder(tmp_path / "later", seed=6)
    done = serverkit.push(
        server,
        later,
        lab,
        "--visibility",
        "embargoed",
        "--embargo",
        "2099-01-01",
        cache=tmp_path / "c",
    )
    assert done.returncode == 0, done.stderr
    embargoed = done.stdout.split("/share/")[1].strip()
    listed = httpx.get(f"{server.url}/api/runs").text
    assert token not in listed and embargoed not in listed
    assert "private" not in listed and "later" not in listed
    hidden = httpx.get(f"{server.url}/api/uploads/" + "0" * 64)
    assert hidden.status_code == 404


def test_push_without_a_key_is_one_line_and_keeps_nothing(server, tmp_path):
    folder = serverkit.run_folder(tmp_path / "run", seed=9)
    line = one_line_error(serverkit.push(server, folder, ""))
    assert "no key: set MILARUN_KEY or give --key-file" in line


@needs_chromium
def test_the_pages_fit_1400_px_in_chromium(server, lab, tmp_path):
    folder = serverkit.run_folder(tmp_path / "shown", seed=21)
    done = serverkit.push(server, folder, lab, cache=tmp_path / "cache")
    upload = done.stdout.split("/uploads/")[1].strip()
    for i, page in enumerate(["/", f"/uploads/{upload}", "/tests/quick.polynome", "/runs"]):
        saved = tmp_path / f"page{i}.html"
        saved.write_text(httpx.get(server.url + page).text, encoding="utf-8")
        shown = show(saved, tmp_path / "chromium", height=700)
        assert not shown.too_wide(), (page, shown.too_wide())
        assert number_problems(saved.read_text()) == [], page
        if page.startswith("/tests/"):  # its chart drawn (the other pages are mostly text)
            assert shown.blank() is None, (page, shown.blank())


def test_a_real_jobs_quick_run_is_on_the_pages_within_seconds(quick_run, server, lab, tmp_path):
    """The issue's done-when: `milarun jobs quick` then `milarun push`, and the run is there."""
    done, folder = quick_run
    assert done.returncode == 0, done.stderr[-2000:]
    start = time.monotonic()
    pushed = serverkit.push(server, folder, lab, cache=tmp_path / "cache")
    assert pushed.returncode == 0 and pushed.stdout.startswith("run accepted"), pushed.stdout
    upload = pushed.stdout.split("/uploads/")[1].strip()
    report = httpx.get(f"{server.url}/api/uploads/{upload}").json()["report"]
    assert {c["rule"]: c["ok"] for c in report["checks"]}["evidence"] is True
    assert httpx.get(f"{server.url}/uploads/{upload}/report").status_code == 200
    assert time.monotonic() - start < 60


H100 = ROOT / "tests" / "data" / "gpu-runs" / "h100-2026-11-28" / "modern"


@pytest.mark.slow
def test_the_h100_bid_is_accepted_and_its_forgeries_rejected(server, tmp_path):
    """The real H100 run as a bid, and the forgeries of benchmarks/faults_forgery.py: the
    rates and count scaled (the log says the true ones), gemm above the datasheet with every
    file the forger can reach edited to match."""
    from milarun.results.tender_rules import TenderRules
    from milarun.tender import rules

    tender = rules.write_tender(
        tmp_path / "tender.json",
        rules.make_tender("modern", None, TenderRules(repeat=1, allow_overrides=True)),
    )  # the run's --min-slices 22 is an argument of its own
    made = httpx.post(f"{server.url}/api/tenders", params={"name": "h100-call"},
                      headers={"Authorization": f"Bearer {server.admin}"},
                      content=tender.read_bytes())  # fmt: skip
    assert made.status_code == 201, made.text
    key = server.key("vendor-h")
    honest = serverkit.package(H100, tmp_path / "h100.tar.gz", tender)
    done = serverkit.push(server, honest, key, "--tender", "h100-call")
    assert done.stdout.startswith("bid accepted"), done.stdout + done.stderr
    forgeries = {
        "rates": (lambda run: forgery.scale(run, "modern.llm", 1.2), "logs/modern.llm.J0.0.log"),
        "gemm": (
            lambda run: forgery.scale(run, "modern.gemm", 1.6, log=True, derived=True, energy=True),
            "datasheet's dense peak",
        ),
    }
    for name, (edit, said) in forgeries.items():
        work = tmp_path / name
        work.mkdir()
        forged = bidkit.edited(honest, work, lambda folder, edit=edit: edit(folder / "run"))
        done = serverkit.push(server, forged, key, "--tender", "h100-call")
        why = done.stdout.splitlines()[-1]
        assert done.returncode == 1 and why.startswith("why: evidence: ") and said in why, why
    ranking = httpx.get(f"{server.url}/api/tenders/h100-call").json()
    assert [b["name"].split("-")[:2] for b in ranking["bids"]] == [["vendor", "h"]]
