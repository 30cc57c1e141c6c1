"""The buyer's thresholds and switches of one call for tenders (``TenderRules``).

Each rule is one field, spelled once: its default, the unit its number counts, the range it
takes and its words. ``tender init``'s options and their help (milarun.cli.tender), the
file's ``about``, the check of the values asked for (``checked``) and of a file read back
(``problem``) all derive from it. Here, with the file formats, not in the tender wing: every
``milarun`` command builds tender init's options (a benchmark process's `milarun run` too), and
it imports nothing but the standard library and the errors.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

from milarun.errors import TenderError

MAX_SM_CLOCK_MHZ = 10_000
MAX_REPEAT = 10_000
MAX_LATENCY_MS = 3_600_000.0  # an hour: far above any inference limit
# The report's own limit on failed runs (milarun.report.build.FAILURE_RATE_LIMIT, which
# imports pandas: a test holds the two equal).
REPORT_FAILURE_RATE = 0.01


@dataclass(frozen=True)
class Rule:
    """What one rule means (the option's help and the file's ``about``), the unit its number
    counts and the range it takes; ``name``, ``kind`` and ``default`` come from its field."""

    help: str
    unit: str = ""  # none: a switch
    low: float = 0.0
    high: float = 1.0
    above: bool = False  # the low end itself is refused (a factor above 0)
    below: bool = False  # the high end itself is refused
    flag: str = ""  # the `tender init` option, when not --<name>
    under: str = ""  # the object of tender.json it is written in ("acceptance")
    optional: bool = False  # a tender written before it lacks it: absent reads as off
    name: str = ""
    kind: type = bool  # bool, int or float
    default: Any = None

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """Where it is in tender.json, as messages name it (``acceptance.risk``)."""
        return f"{self.under}.{self.name}" if self.under else self.name

    @property
    def metavar(self) -> str:
        return self.unit.upper() if self.unit.isalpha() else "NUM"

    @property
    def may_be_absent(self) -> bool:
        """Absent or null reads as off / no limit (a floor the buyer did not set)."""
        return self.optional or self.default is None

    def what(self) -> str:
        """The values it takes, in words: ``a number above 0, at most 10``."""
        if self.kind is bool:
            return "true/false"
        kind = "a whole number" if self.kind is int else "a number"
        if not (self.above or self.below):
            return f"{kind} from {self.low:g} to {self.high:g}"
        low = f"above {self.low:g}" if self.above else f"from {self.low:g}"
        return f"{kind} {low}, {'below' if self.below else 'at most'} {self.high:g}"

    def takes(self, value: Any) -> bool:
        """Whether ``value`` is one this rule takes (None where it may be absent)."""
        if value is None:
            return self.may_be_absent
        if self.kind is bool or isinstance(value, bool):
            return self.kind is bool and isinstance(value, bool)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.kind is int and not isinstance(value, int):
            return False
        low_ok = value > self.low if self.above else value >= self.low
        return low_ok and (value < self.high if self.below else value <= self.high)

    def help_text(self) -> str:
        """The option's help: its words, its unit and its default (argparse: ``%`` doubled)."""
        if self.kind is bool:
            return self.help[0].upper() + self.help[1:]
        given = "none by default" if self.default is None else f"default {self.default:g}"
        unit = f"{self.unit}; " if self.unit else ""
        return f"{self.help[0].upper()}{self.help[1:]} ({unit}{given})".replace("%", "%%")


def rule_field(default: Any, help: str, **described: Any) -> Any:
    """A field of TenderRules: its default, and its Rule (help, unit, range, option)."""
    return field(default=default, metadata={"rule": Rule(help, **described)})


def _latency_limit(help: str, flag: str) -> Any:
    """An inference test's latency limit (ms), off by default."""
    return rule_field(None, help, unit="ms", above=True, high=MAX_LATENCY_MS, flag=flag)


@dataclass(frozen=True)
class TenderRules:
    """The thresholds and switches a bid is verified against (tender.json's, in its order)."""

    repeat: int = rule_field(
        3,
        "runs of every test required on every device (every GPU of the machine)",
        unit="runs",
        low=1,
        high=MAX_REPEAT,
    )
    require_cgroups: bool = rule_field(
        False, "every instance must run in its own student cgroup (cpuset and memory)"
    )
    allow_overrides: bool = rule_field(
        False, "runs may carry arguments after -- (otherwise exactly the profile's)"
    )
    max_failure_rate: float = rule_field(
        REPORT_FAILURE_RATE, "failed runs / all runs at most this", unit="share"
    )
    min_steady_slices: int = rule_field(
        10, "slices in each run's steady window at least this", unit="slices", low=3, high=10_000
    )
    max_throttled_share: float = rule_field(
        0.05,
        "steady slices a thermal, hardware or power-brake slowdown slowed / all steady slices "
        "at most this (GPU runs; a GPU at its power limit is at its operating point)",
        unit="share",
        flag="--max-throttled",
    )
    min_sm_clock_mhz: float | None = rule_field(
        None,
        "a floor: every GPU run's median SM clock over its steady window at least this",
        unit="MHz",
        high=MAX_SM_CLOCK_MHZ,
        flag="--min-sm-clock",
    )
    max_power_limit_share: float | None = rule_field(
        None,
        "a limit: steady slices at the GPU's power limit / all steady slices at most this",
        unit="share",
        flag="--max-power-limit",
    )
    margin: float = rule_field(
        0.95,
        "acceptance: a declared figure passes when P(true < margin x declared) < risk",
        unit="factor",
        above=True,
        high=10,
        under="acceptance",
    )
    risk: float = rule_field(
        0.05,
        "acceptance: the buyer's risk of accepting a figure that is not met",
        unit="probability",
        above=True,
        below=True,
        high=0.5,
        under="acceptance",
    )
    require_challenge: bool = rule_field(
        False,
        "every run must carry this tender's challenge (`jobs --tender FILE`) and start after "
        "the tender was written (runs made for this tender)",
        optional=True,
    )
    require_doctor: bool = rule_field(
        False,
        "every device a result ran on needs a PASS `doctor --active` record in its run "
        "folder, made from an hour before the run started to its end",
        optional=True,
    )
    unknown_device_fails: bool = rule_field(
        False,
        "a result on a device with no row in milarun's datasheet FAILs (otherwise its rates "
        "are bounded by no peak, and verify says so)",
        optional=True,
    )
    require_node_power: bool = rule_field(
        False,
        "every scored run carries the whole node's energy from its BMC (node perf/W), and the "
        "ranking's energy cost and TCO are the node's",
        optional=True,
    )
    max_ttft_p99_ms: float | None = _latency_limit(
        "inference tests: every run's time to first token at p99 at most this (MLPerf's "
        "server limit for Llama-3.1-8B is 2000 ms)",
        "--max-ttft-p99",
    )
    max_tpot_p99_ms: float | None = _latency_limit(
        "inference tests: every run's time per output token at p99 at most this (MLPerf's: 100 ms)",
        "--max-tpot-p99",
    )
    min_goodput_percent: float | None = rule_field(
        None,
        "serving (llm-serve): every run's share of requests within its latency limits at "
        "least this",
        unit="%",
        above=True,
        high=100,
        flag="--min-goodput",
    )

    def checked(self) -> TenderRules:
        """Itself, or TenderError naming the option of the first value out of range."""
        for rule in described(type(self)):
            value = getattr(self, rule.name)
            if not rule.takes(value):
                raise TenderError(f"{rule.option} {value}: must be {rule.what()}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """Its part of tender.json: every rule under its key, in the fields' order."""
        found: dict[str, Any] = {}
        for rule in described(type(self)):
            into = found.setdefault(rule.under, {}) if rule.under else found
            into[rule.name] = getattr(self, rule.name)
        return found

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TenderRules:
        """The rules of a tender file (``problem`` found none): a rule it lacks, off."""
        values = {}
        for rule in described(cls):
            value = _lookup(data, rule)
            if value is not None:
                values[rule.name] = value if rule.kind is bool else rule.kind(value)
        return cls(**values)

    @classmethod
    def from_options(cls, given: dict[str, Any]) -> TenderRules:
        """From the parsed options of ``tender init`` (those not given keep their default)."""
        names = {rule.name for rule in described(cls)}
        return cls(**{k: v for k, v in given.items() if k in names}).checked()


_DESCRIBED: dict[type, tuple[Rule, ...]] = {}


def described(rules: type[TenderRules] = TenderRules) -> tuple[Rule, ...]:
    """Every rule, its name, kind and default filled in from its field."""
    known = _DESCRIBED.get(rules)
    return known if known is not None else _describe(rules)


def _describe(rules: type[TenderRules]) -> tuple[Rule, ...]:
    hints = typing.get_type_hints(rules)
    found = tuple(
        dataclasses.replace(
            f.metadata["rule"],
            name=f.name,
            kind=next(
                t
                for t in (bool, int, float)
                if t in (typing.get_args(hints[f.name]) or (hints[f.name],))
            ),
            default=f.default,
        )
        for f in dataclasses.fields(rules)
    )
    _DESCRIBED[rules] = found
    return found


def _lookup(data: dict[str, Any], rule: Rule) -> Any:
    block = data.get(rule.under) if rule.under else data
    return block.get(rule.name) if isinstance(block, dict) else None


def problem(data: dict[str, Any], rules: type[TenderRules] = TenderRules) -> str | None:
    """Why the rules of a parsed tender cannot be used (the field and its value), or None."""
    for rule in described(rules):
        if rule.under and not isinstance(data.get(rule.under), dict):
            members = [r.name for r in described(rules) if r.under == rule.under]
            return f"'{rule.under}' is not an object with {' and '.join(members)}"
        value = _lookup(data, rule)
        if not rule.takes(value):
            shown = "" if rule.kind is bool else f" {str(value)[:40]}"
            return f"'{rule.key}'{shown} is not {rule.what()}"
    return None


def about(rules: type[TenderRules] = TenderRules) -> dict[str, str]:
    """Each rule's words, for the file's ``about`` (the acceptance block's are its own)."""
    return {
        rule.name: rule.help + (" (null: none)" if rule.default is None else "")
        for rule in described(rules)
        if not rule.under
    }
