"""Results from many nodes: per-node device keys, per-node scores, the node x device matrix,
flags on a node or device significantly slower than its siblings, and their rendering."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pandas as pd
import pytest

from conftest import milarun, one_line_error
from milarun.report import significance, summary, tables
from milarun.report.build import build_report
from milarun.report.nodes import NodeReport, NodeRow, compare_nodes
from milarun.report.nodes import section as node_section
from milarun.report.render import html
from milarun.report.render.nodes import labels, text_section
from milarun.results import read
from milarun.results.folder import Loaded, load_dir
from pages import TableReader
from resultfactory import rate_series, result, write

TESTS = (("suite.alpha", 100.0), ("suite.beta", 10.0))
HOSTILE = "<i>n9</i>"


def fleet(
    speeds: dict[str, float],
    *,
    noise: float = 0.05,
    jitter: float = 0.01,
    tests=TESTS,
    devices=("cpu:0", "cpu:1"),
    runs: int = 2,
    seed: int = 0,
) -> list[dict]:
    """Results of every test on every device of every node: a node's steady rates are
    base x speed, each run off by up to ``jitter``, its slices by up to ``noise``."""
    rng = random.Random(seed)
    return [
        result(
            test,
            f"{i}.{d}",
            None,
            device=device,
            node=node,
            rates=rate_series(
                base * speed * (1 + rng.uniform(-jitter, jitter)), noise=noise, rng=rng
            ),
        )
        for node, speed in speeds.items()
        for test, base in tests
        for d, device in enumerate(devices)
        for i in range(runs)
    ]


def rows(nodes: NodeReport) -> dict[str, NodeRow]:
    return {row.node: row for row in nodes.nodes}


def test_two_nodes_keep_their_devices_apart():
    results = fleet({"node1": 1.0, "node2": 0.5}, runs=1)
    pergpu = summary.summarize(results)["suite.alpha"]["pergpu"]
    assert sorted(pergpu) == ["node1/cpu:0", "node1/cpu:1", "node2/cpu:0", "node2/cpu:1"]
    assert pergpu["node2/cpu:1"]["mean"] == pytest.approx(50.0, rel=0.02)
    # One node: the keys stay the devices, as before (baselines and tests stay valid).
    one = summary.summarize([r for r in results if r["node"] == "node1"])
    assert sorted(one["suite.alpha"]["pergpu"]) == ["cpu:0", "cpu:1"]
    # Older results name their node in the Slurm block, or only by host name.
    old = result("t", "0", 1.0, slurm={"node": "gpu7", "job_id": "1"})
    del old["node"]  # written before results named their node
    assert read.ResultView.from_dict(old).node == "gpu7"
    assert read.ResultView.from_dict(result("t", "0", 1.0)).node == "node1"
    # --compare-gpus orders node2 before node10, then the devices by index.
    more = fleet({"node10": 1.0, "node2": 0.9}, devices=("cpu:10", "cpu:2"), runs=1)
    table = tables.gpu_tables(summary.summarize(more))["mean"]
    assert list(table.columns) == ["node2/cpu:2", "node2/cpu:10", "node10/cpu:2", "node10/cpu:10"]


def test_a_slow_node_is_flagged_and_an_equal_one_is_not():
    nodes = compare_nodes(fleet({"node1": 1.0, "node2": 1.0, "node3": 0.8}), test=True)
    by = rows(nodes)
    assert by["node3"].flagged and by["node3"].p_value < significance.ALPHA
    assert by["node3"].ratio == pytest.approx(0.8, rel=0.02)  # to the median node
    assert not by["node1"].flagged and not by["node2"].flagged
    units = {f.unit: f for f in nodes.flags}
    assert set(units) == {"node3", "node3/cpu:0", "node3/cpu:1"}
    assert units["node3"].ratio == pytest.approx(0.8, rel=0.02)  # to the siblings' median
    assert "node3" in units["node3"].reason and "Fisher" in units["node3"].reason
    cell = nodes.cell("node3", "cpu:1")
    assert cell.flagged and cell.value == pytest.approx(0.8, rel=0.03)
    assert nodes.cell("node1", "cpu:0").value == pytest.approx(1.0, rel=0.03)
    # The same fleet with every node equally fast (and as noisy): nothing is flagged.
    equal = compare_nodes(fleet({"node1": 1.0, "node2": 1.0, "node3": 1.0}), test=True)
    assert equal.flags == () and not any(r.flagged for r in equal.nodes)
    assert all(r.ratio == pytest.approx(1.0, rel=0.02) for r in equal.nodes)


def test_a_flag_needs_both_the_margin_and_the_test():
    # 0.9x but so noisy that one run says little: below the margin, not significant.
    noisy = compare_nodes(
        fleet(
            {"node1": 1.0, "node2": 1.0, "node3": 0.9},
            noise=0.6,
            jitter=0,
            runs=1,
            tests=TESTS[:1],
            devices=("cpu:0",),
        ),
        test=True,
    )
    slow = rows(noisy)["node3"]
    assert slow.ratio == pytest.approx(0.9) and slow.p_value > significance.ALPHA
    assert not slow.flagged and noisy.flags == ()
    # 0.98x measured without noise: significant, but within the margin.
    close = compare_nodes(
        fleet({"node1": 1.0, "node2": 1.0, "node3": 0.98}, noise=0, jitter=0), test=True
    )
    slow = rows(close)["node3"]
    assert slow.p_value < significance.ALPHA and slow.ratio > significance.MARGIN
    assert not slow.flagged and close.flags == ()


def test_a_node_whose_runs_all_failed_is_listed_without_a_score():
    dead = [
        result(
            test,
            "0.0",
            None,
            device="cpu:0",
            node="node3",
            failure={"kind": "crash", "message": "node down"},
        )
        for test, _ in TESTS
    ]
    nodes = compare_nodes(fleet({"node1": 1.0, "node2": 1.0}) + dead, test=True)
    row = rows(nodes)["node3"]
    assert (row.runs, row.failures, row.score, row.ratio) == (2, 2, None, None)
    assert row.coverage == 0.0 and not row.flagged
    assert "node node3: all 2 run(s) failed (no score)" in nodes.warnings()
    # Weights: a node's coverage is the weight of the tests it has a rate for.
    half = compare_nodes(
        fleet({"node1": 1.0}) + fleet({"node2": 1.0}, tests=TESTS[:1]),
        {"suite.alpha": 1.0, "suite.beta": 3.0},
    )
    assert rows(half)["node2"].coverage == pytest.approx(0.25)
    assert rows(half)["node1"].score == pytest.approx(100**0.25 * 10**0.75, rel=0.02)


def test_a_node_missing_a_high_rate_test_is_compared_on_the_tests_it_has():
    """The ratio (and the flag's margin) come from per-test relative rates: a node that
    failed every run of the 1e6 ex/s test is not 'slower' for lacking it."""
    tests = TESTS + (("suite.polynome", 1e6),)
    down = [
        result(
            "suite.polynome",
            f"{i}.{d}",
            None,
            device=device,
            node="node3",
            failure={"kind": "crash", "message": "out of memory"},
        )
        for d, device in enumerate(("cpu:0", "cpu:1"))
        for i in range(2)
    ]
    speeds = {"node1": 1.0, "node2": 1.0}
    nodes = compare_nodes(
        fleet(speeds, tests=tests) + fleet({"node3": 1.0}, tests=TESTS, seed=1) + down, test=True
    )
    by = rows(nodes)
    assert by["node3"].ratio == pytest.approx(1.0, rel=0.02)
    assert not by["node3"].flagged and nodes.flags == ()
    assert (by["node3"].runs, by["node3"].failures) == (12, 4)
    assert by["node3"].coverage == pytest.approx(2 / 3) and by["node1"].coverage == 1.0
    # 3% slower, measured without noise: significant but within the margin, so not
    # flagged (a raw-rate score, ~0.03x the median without polynome, would flag it).
    close = compare_nodes(
        fleet(speeds, tests=tests, noise=0, jitter=0)
        + fleet({"node3": 0.97}, tests=TESTS, noise=0, jitter=0)
        + down,
        test=True,
    )
    slow = rows(close)["node3"]
    assert slow.ratio == pytest.approx(0.97) and slow.p_value < significance.ALPHA
    assert not slow.flagged and close.flags == ()
    assert "node node3" not in " ".join(close.warnings())


def test_long_node_names_keep_their_own_rows():
    names = ("compute-node-001.lab.example.org", "compute-node-002.lab.example.org")
    loaded = fleet(dict.fromkeys(names, 1.0), runs=1)
    rep = build_report(summary.summarize(loaded))
    rep.nodes = compare_nodes(loaded, test=True)
    text = "\n".join(text_section(rep))
    per_node = text[text.index("Per node") : text.index("Node x device")]
    matrix = text[text.index("Node x device") :]
    for block in (per_node, matrix):
        assert all(sum(name in line for line in block.splitlines()) == 1 for name in names)
    assert max(len(line) for line in text.splitlines()) <= 100
    # Short labels that do not clash stay short; names of any length stay whole when
    # their short labels clash.
    shown = labels(["node1", "a" * 40, *names])
    assert shown["node1"] == "node1" and len(shown["a" * 40]) < 40
    assert [shown[n] for n in names] == list(names)


def test_distributed_results_are_left_out_of_the_comparison():
    scaling = result(
        "suite.scaling.2", "0", None, ranks=[40.0, 41.0], device="cpu:0,cpu:1", node="node3"
    )
    nodes = compare_nodes(fleet({"node1": 1.0, "node2": 1.0}) + [scaling])
    assert rows(nodes)["node3"].runs == 0 and nodes.cell("node3", "cpu:0,cpu:1") is None


def test_a_rerun_is_no_node_of_the_fleet():
    # `milarun rerun` of node1's result on the login host: not a phantom third node
    again = result("suite.alpha", "0.0", 100.0, node="login", rerun_of="/x/nodes/node1/a.json")
    loaded = Loaded(Path("x"), results=read.views(fleet({"node1": 1.0, "node2": 1.0}) + [again]))
    section = node_section(None, loaded, test=True)
    assert section is not None and set(rows(section)) == {"node1", "node2"}
    assert "1 rerun result(s) left out of the node comparison" in " ".join(section.warnings())


def test_compare_nodes_needs_the_results_folder(tmp_path):
    res = tmp_path / "res"
    for data in fleet({"node1": 1.0, "node2": 1.0}, runs=1):
        write(res / data["node"], data)
    summary_file = tmp_path / "summary.json"
    assert milarun("summary", res, "-o", summary_file).returncode == 0
    done = milarun("report", summary_file, "--compare-nodes")
    line = one_line_error(done)
    assert done.returncode == 1
    assert str(summary_file) in line and "pass the results folder" in line


class _Cells(TableReader):
    """The table reader, with each cell's class kept beside its text."""

    def __init__(self, table_id: str):
        super().__init__(table_id)
        self.classes: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        if self.inside and tag == "tr":
            self.classes.append([])
        elif self.inside and tag in ("td", "th"):
            self.classes[-1].append(dict(attrs).get("class") or "")


def cells(page: str, table_id: str) -> dict[str, dict[str, tuple[str, str]]]:
    """{first cell: {header: (text, class)}} of the table with that id."""
    parser = _Cells(table_id)
    parser.feed(page)
    header, *body = [
        list(zip(texts, classes)) for texts, classes in zip(parser.rows, parser.classes)
    ]
    return {row[0][0]: {h[0]: c for h, c in zip(header, row)} for row in body}


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    res = tmp_path_factory.mktemp("fleet") / "results"
    speeds = {"node1": 1.0, "node2": 1.0, "node3": 0.8, HOSTILE: 1.0}
    for data in fleet(speeds):
        write(res / ("n9" if data["node"] == HOSTILE else data["node"]), data)
    write(
        res / "node4",
        result(
            "suite.alpha",
            "0.0",
            None,
            device="cpu:0",
            node="node4",
            failure={"kind": "crash", "message": "node down"},
        ),
    )
    return res


def test_text_and_html_show_the_nodes_and_the_heat_map(fleet_dir, tmp_path):
    page = tmp_path / "report.html"
    done = milarun("report", fleet_dir, "--compare-nodes", "--html", page)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert max(len(line) for line in text.splitlines()) <= 100
    block = text[text.index("Per node") : text.index("Node x device")]
    for node in ("node1", "node2", "node3", "node4", HOSTILE):
        assert node in block
    assert block.count("SLOWER") == 1 and "node3" in block.split("SLOWER")[0].splitlines()[-1]
    matrix = text[text.index("Node x device") : text.index("Warnings")]
    assert "0.8" in matrix and "*" in matrix  # node3's cells, flagged
    warnings = text[text.index("Warnings") :]
    assert "node node3 is significantly slower" in warnings
    assert "device node3/cpu:0 is significantly slower" in warnings
    assert "node node4: all 1 run(s) failed" in warnings
    source = page.read_text()
    assert "&lt;i&gt;n9&lt;/i&gt;" in source and HOSTILE not in source  # escaped
    per_node = cells(source, "nodes")
    assert per_node["node3"]["flag"][0].startswith("SLOWER")
    assert per_node["node1"]["flag"][0].startswith("ok")
    assert per_node["node4"]["score"][0] == "-" and per_node["node4"]["fail"][0] == "1"
    heat = cells(source, "node-devices")
    assert heat["node3"]["cpu:0"][0].startswith("0.8")
    assert heat["node3"]["cpu:0"][1] == "warn flagged"  # coloured as a 0.75-0.9 ratio
    assert heat["node1"]["cpu:1"][1] == "ok" and heat[HOSTILE]["cpu:0"][1] == "ok"
    assert heat["node4"]["cpu:1"] == ("-", "")


def test_a_fleet_report_shows_each_node_without_flags(fleet_dir):
    text = milarun("report", fleet_dir).stdout
    block = text[text.index("Per node") :]
    assert "node3" in block and "flag" not in block.splitlines()[3]
    assert "SLOWER" not in text and "significantly slower" not in text
    data = json.loads(milarun("report", fleet_dir, "--format", "json").stdout)
    assert data["nodes"]["tested"] is False
    assert data["nodes"]["nodes"]["node3"]["ratio"] == pytest.approx(0.8, rel=0.03)
    # The page `milarun jobs` writes gets it from the results alone.
    loaded = load_dir(fleet_dir)
    page = html.to_html(build_report(summary.summarize(loaded.results), loaded=loaded))
    assert "node3" in cells(page, "nodes") and "node3" in cells(page, "node-devices")
    one = Loaded(fleet_dir, [view for view in loaded.results if view.node == "node1"])
    assert 'id="nodes"' not in html.to_html(
        build_report(summary.summarize(one.results), loaded=one)
    )


def test_json_and_csv_carry_the_node_section(fleet_dir):
    data = json.loads(milarun("report", fleet_dir, "--compare-nodes", "--format", "json").stdout)
    nodes = data["nodes"]
    assert nodes["tested"] is True and nodes["nodes"]["node3"]["flagged"] is True
    assert nodes["matrix"]["node3"]["cpu:0"]["flagged"] is True
    assert {f["unit"] for f in nodes["flags"]} == {"node3", "node3/cpu:0", "node3/cpu:1"}
    text = milarun("report", fleet_dir, "--compare-nodes", "--format", "csv").stdout
    # the per-test table, the two node blocks, then the runs' blocks (failed runs, isolation)
    tests, per_node, matrix, *runs = text.split("\n\n")
    assert [block.split(",", 1)[0] for block in runs] == ["test", "device"]
    assert "suite.alpha" in pd.read_csv(io.StringIO(tests), index_col="test").index
    per_node = pd.read_csv(io.StringIO(per_node), index_col="node")
    assert bool(per_node.loc["node3", "flagged"]) and pd.isna(per_node.loc["node4", "score"])
    matrix = pd.read_csv(io.StringIO(matrix), index_col="node")
    assert matrix.loc["node3", "cpu:1"] == pytest.approx(0.8, rel=0.03)


def test_scaling_efficiency_against_the_smallest_k(tmp_path):
    """1x8 and 2x8 ranks named by world size: efficiency = total_16 / (2 x total_8)."""
    res = tmp_path / "res"
    for k, rate in ((8, 100.0), (16, 90.0)):
        data = result(f"suite.scaling.{k}", "0", None, ranks=[rate] * k, device="cpu:0,cpu:1")
        data["ranks"] = [
            {
                "rank": r,
                "node": f"node{1 + r // 8}",
                "host": f"node{1 + r // 8}",
                "device": f"cuda:{r % 8}",
            }
            for r in range(k)
        ]
        write(res, data)
    done = milarun("report", res, "--format", "json", "--html", tmp_path / "r.html")
    scaling = json.loads(done.stdout)["scaling"]
    assert scaling["suite.scaling.8"]["efficiency"] == pytest.approx(1.0)
    assert scaling["suite.scaling.16"]["total"] == pytest.approx(1440.0)
    assert scaling["suite.scaling.16"]["efficiency"] == pytest.approx(1440.0 / (2 * 800.0))
    assert (scaling["suite.scaling.8"]["nodes"], scaling["suite.scaling.16"]["nodes"]) == (1, 2)
    text = milarun("report", res).stdout
    section = text[text.index("Scaling") :]
    assert "nodes" in section and "90.0%" in section
    table = cells((tmp_path / "r.html").read_text(), "scaling")
    assert table["suite.scaling.16"]["nodes"][0] == "2"
    assert table["suite.scaling.16"]["efficiency"][0] == "90.0%"
