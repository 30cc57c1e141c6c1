"""The server's pages and their JSON and CSV: one URL each, stable (``/api/...`` is the same
data as the page of the same path; ``?format=csv`` gives it as CSV)."""

from __future__ import annotations

import re
import tempfile
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from sqlalchemy import Engine, select

from milarun.history import store
from milarun.server import pages, queries
from milarun.server.models import ACCEPTED, BID, Site, Tender, Upload
from milarun.server.pages import Section, Table, link

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_BIDS = 50  # bids ranked on one page
HTML = HTMLResponse


def as_data(rows: list[dict[str, Any]] | dict[str, Any], format: str | None, key: str = "") -> Any:
    if format == "csv":
        table = rows if isinstance(rows, list) else rows.get(key, [])
        return PlainTextResponse(pages.to_csv(table), media_type="text/csv")
    if format not in (None, "json"):
        raise HTTPException(422, "format: json or csv")
    return rows


def alternates(api: str, csv: bool = True) -> list[tuple[str, str]]:
    return [("JSON", api)] + ([("CSV", f"{api}?format=csv")] if csv else [])


def _tier(tier: str | None) -> str | None:
    if tier is not None and tier not in queries.TIERS:
        raise HTTPException(422, f"tier: {' or '.join(queries.TIERS)}")
    return tier


def add_routes(app: FastAPI, engine: Engine, root: Path) -> None:  # noqa: C901 (one route each)
    rankings: dict[tuple[Any, ...], Any] = {}
    ranking_lock = threading.Lock()

    def one_upload(content_hash: str | None = None, token: str | None = None) -> dict[str, Any]:
        query = (
            select(Upload, Site.name, Tender.name)
            .join(Site, Upload.site_id == Site.id)
            .outerjoin(Tender, Upload.tender_id == Tender.id)
        )
        if token is not None:
            query = query.where(Upload.share_token == token)
        else:
            query = query.where(Upload.content_hash == content_hash, queries.visible())
        with store.session(engine) as session:
            found = session.execute(query).first()
            if found is None:
                raise HTTPException(404, "no such upload (or not public)")
            upload, site, tender = found
            return {
                **queries.upload_row(upload, site, tender),
                "visibility": upload.visibility,
                "like_key": upload.like_key,
                "report": upload.report,
            }

    @app.get("/", response_class=HTML)
    def home(tier: str | None = None) -> str:
        with store.session(engine) as session:
            sites = queries.sites(session)
            recent = queries.uploads(session, tier=_tier(tier))[:50]
        for s in sites:
            s["url"] = link("sites", s["site"])
        return pages.page(
            "milarun results",
            [
                Section(
                    "Sites",
                    None,
                    Table(
                        "sites",
                        [("site", "site"), ("uploads", "uploads"), ("accepted", "accepted")],
                        sites,
                        {"site": "url"},
                    ),
                ),
                Section(
                    "Latest uploads",
                    "official: pushed with a key an admin marked official; community: every other",
                    pages.uploads_table(recent),
                ),
            ],
            alternates=alternates("/api/sites"),
        )

    @app.get("/api/sites")
    def sites_data(format: str | None = None) -> Any:
        with store.session(engine) as session:
            return as_data(queries.sites(session), format)

    @app.get("/sites/{name:path}", response_class=HTML)
    def site_page(name: str, tier: str | None = None) -> str:
        rows = site_data(name, tier)
        return pages.page(
            f"site {name}",
            [Section(None, None, pages.uploads_table(rows))],
            alternates=alternates(link("api", "sites", name)),
        )

    @app.get("/api/sites/{name:path}")
    def site_data(name: str, tier: str | None = None, format: str | None = None) -> Any:
        with store.session(engine) as session:
            rows = queries.uploads(session, site=name, tier=_tier(tier))
        if not rows:
            raise HTTPException(404, "no such site (or nothing public)")
        return as_data(rows, format)

    @app.get("/runs", response_class=HTML)
    def runs_page(tier: str | None = None) -> str:
        rows = runs_data(tier)
        return pages.page(
            "runs",
            [
                Section(
                    None,
                    "each accepted run: its site, devices and suite",
                    pages.uploads_table(rows, "runs"),
                )
            ],
            alternates=alternates("/api/runs"),
        )

    @app.get("/api/runs")
    def runs_data(tier: str | None = None, format: str | None = None) -> Any:
        with store.session(engine) as session:
            return as_data(queries.runs(session, _tier(tier)), format)

    def upload_page(found: dict[str, Any], report_url: str, api: str) -> str:
        report = found.get("report") or {}
        about = [
            f"{k}: {pages.cell(found[k])}"
            for k in (
                "site",
                "kind",
                "status",
                "tier",
                "suite",
                "devices",
                "tender",
                "score",
                "pushed_at",
            )
        ]
        sections = [Section("Verdict", found["reason"] or "every deciding rule passes")]
        if found["status"] == ACCEPTED:
            here = [{"page": "the run's report (milarun report)", "url": report_url}]
            sections.append(
                Section(None, None, Table("pages", [("page", "page")], here, {"page": "url"}))
            )
        checks = report.get("checks") or []
        sections.append(
            Section(
                "Verify report",
                None,
                Table(
                    "checks", [("rule", "rule"), ("ok", "passed"), ("evidence", "evidence")], checks
                ),
                pre=report.get("text") or report.get("error"),
            )
        )
        return pages.page(
            f"{found['kind']} {found['name']}", sections, intro=about, alternates=alternates(api)
        )

    @app.get("/uploads/{content_hash}", response_class=HTML)
    def upload_view(content_hash: str) -> str:
        found = one_upload(content_hash)
        return upload_page(
            found, link("uploads", content_hash, "report"), link("api", "uploads", content_hash)
        )

    @app.get("/api/uploads/{content_hash}")
    def upload_data(content_hash: str, format: str | None = None) -> Any:
        return _with_checks(one_upload(content_hash), format)  # CSV: its verify rules

    @app.get("/uploads/{content_hash}/report")
    def report_view(content_hash: str) -> Response:
        found = one_upload(content_hash)
        return _report_file(root, found["id"])

    @app.get("/share/{token}", response_class=HTML)
    def shared(token: str) -> str:
        found = one_upload(token=token)
        return upload_page(found, link("share", token, "report"), link("api", "share", token))

    @app.get("/api/share/{token}")
    def shared_data(token: str, format: str | None = None) -> Any:
        return _with_checks(one_upload(token=token), format)

    @app.get("/share/{token}/report")
    def shared_report(token: str) -> Response:
        return _report_file(root, one_upload(token=token)["id"])

    @app.get("/api/tests")
    def tests_data(format: str | None = None) -> Any:
        with store.session(engine) as session:
            rows = [{"test": t, "url": link("tests", t)} for t in queries.tests(session)]
        return as_data(rows, format)

    @app.get("/tests", response_class=HTML)
    def tests_page() -> str:
        rows = tests_data()
        table = Table("tests", [("test", "test")], rows, {"test": "url"})
        return pages.page(
            "tests",
            [Section(None, "each test's runs across sites", table)],
            alternates=alternates("/api/tests"),
        )

    @app.get("/tests/{test:path}", response_class=HTML)
    def test_page(test: str) -> str:
        data = test_data(test)
        return pages.page(
            f"{test} across sites",
            [
                Section(
                    "Site-to-site spread per GPU model",
                    "the slowest site's mean rate below the fastest's, as a share of the fastest",
                    Table(
                        "spread",
                        [("gpu", "GPU model"), ("sites", "sites"), ("spread", "spread")],
                        data["spread"],
                    ),
                ),
                Section(
                    "Per site",
                    None,
                    Table(
                        "per-site",
                        [
                            ("gpu", "GPU model"),
                            ("site", "site"),
                            ("n", "runs"),
                            ("mean", "mean examples/s"),
                            ("min", "min"),
                            ("max", "max"),
                            ("latest", "latest run (UTC)"),
                        ],
                        data["sites"],
                    ),
                    chart=pages.spread_chart(data["sites"]),
                ),
            ],
            alternates=alternates(link("api", "tests", test)),
        )

    @app.get("/api/tests/{test:path}")
    def test_data(test: str, format: str | None = None) -> Any:
        with store.session(engine) as session:
            data = queries.test_across_sites(session, test)
        if not data["sites"]:
            raise HTTPException(404, "no accepted public run of that test")
        return as_data(data, format, "sites")

    @app.get("/api/tenders")
    def tenders_data(format: str | None = None) -> Any:
        with store.session(engine) as session:
            names = list(session.scalars(select(Tender.name).order_by(Tender.name)))
        return as_data([{"tender": n, "url": link("tenders", n)} for n in names], format)

    @app.get("/tenders", response_class=HTML)
    def tenders_page() -> str:
        rows = tenders_data()
        return pages.page(
            "tenders",
            [
                Section(
                    None,
                    "each tender's live ranking of its verified bids",
                    Table("tenders", [("tender", "tender")], rows, {"tender": "url"}),
                )
            ],
            alternates=alternates("/api/tenders"),
        )

    def ranked(name: str, power_cost: float | None) -> tuple[Any, list[dict[str, Any]]]:
        if power_cost is not None and not 0 < power_cost < 100:
            raise HTTPException(422, "power_cost: $/kWh, above 0 and below 100")
        with store.session(engine) as session:
            tender = session.scalar(select(Tender).where(Tender.name == name))
            if tender is None:
                raise HTTPException(404, "no such tender")
            rows = queries.uploads(session, tender_id=tender.id)
        accepted = [r for r in rows if r["status"] == ACCEPTED and r["kind"] == BID][:MAX_BIDS]
        if not accepted:
            return None, rows
        cache = (tender.id, tuple(r["id"] for r in accepted), power_cost)
        with ranking_lock:
            if cache not in rankings:  # a new bid: the tender's older rankings dropped
                for old in [k for k in rankings if k[0] == tender.id]:
                    del rankings[old]
                rankings[cache] = _rank(root, accepted, power_cost)
            return rankings[cache], rows

    @app.get("/tenders/{name:path}", response_class=HTML)
    def tender_page(name: str, power_cost: float | None = None) -> str:
        from milarun.tender import render

        found, rows = ranked(name, power_cost)
        rejected = [r for r in rows if r["status"] != ACCEPTED]
        if found is None:
            return pages.page(
                f"tender {name}",
                [
                    Section("Bids", "no verified bid yet"),
                    Section("Rejected", None, pages.uploads_table(rejected, "rejected")),
                ],
            )
        text = render.to_html(found, f"tender {name}: ranking of verified bids")
        extra = pages.page(
            "",
            [
                Section(
                    "Bids refused by verify (never ranked)",
                    None,
                    pages.uploads_table(rejected, "rejected"),
                )
            ],
        )
        body = extra.split("<body>", 1)[1].split("</body>", 1)[0].split("</nav>", 1)[1]
        return text.replace("</body>", body + "</body>", 1)

    @app.get("/api/tenders/{name:path}")
    def tender_data(name: str, power_cost: float | None = None, format: str | None = None) -> Any:
        from milarun.tender import render

        found, rows = ranked(name, power_cost)
        data = render.to_records(found) if found is not None else {"bids": []}
        data["uploads"] = rows
        return as_data(data, format, "bids")


def _with_checks(found: dict[str, Any], format: str | None) -> Any:
    return as_data(
        {**found, "checks": (found["report"] or {}).get("checks") or []}, format, "checks"
    )


def _report_file(root: Path, content_hash: str) -> Response:
    path = root / "pages" / f"{content_hash}.html"
    if not path.is_file():
        raise HTTPException(
            404, "no report page for this upload (rejected, or no result to report)"
        )
    return FileResponse(path, media_type="text/html")


def _rank(root: Path, accepted: list[dict[str, Any]], power_cost: float | None) -> Any:
    """The ranking of the accepted bids' packages, each shown by its site and name."""
    from milarun.tender import bids, ranking

    with tempfile.TemporaryDirectory(dir=root / "work") as tmp:
        paths = []
        for r in accepted:
            name = _SAFE.sub("_", f"{r['site']}-{r['name']}")[:80]
            shown = Path(tmp) / f"{name}-{r['id'][:8]}.tar.gz"
            shown.symlink_to(root / "packages" / f"{r['id']}.tar.gz")
            paths.append(shown)
        prices = [r["price"] for r in accepted]
        known = prices if all(p is not None for p in prices) else None
        return bids.rank(paths, known, ranking.Costs(power_cost))
