"""Weights: a test's share of the score, from a file or a shipped name (``standard``)."""

from __future__ import annotations

from pathlib import Path

from milarun import results
from milarun.errors import InputError, WeightsError

WEIGHTS_DIR = Path(__file__).parent.parent / "weights"


def load_weights(spec: str) -> tuple[str, dict[str, float]]:
    """Weights from a file or a shipped name (``standard``); legacy and flat forms.

    Accepts ``{test: weight}`` and the legacy ``{test: {"weight": weight}}``.
    """
    path = Path(spec)
    if not path.exists() and (WEIGHTS_DIR / f"{spec}.json").exists():
        path = WEIGHTS_DIR / f"{spec}.json"
    if not path.exists():
        shipped = ", ".join(sorted(p.stem for p in WEIGHTS_DIR.glob("*.json")))
        raise WeightsError(f"--weights {spec}: no such file or shipped weights ({shipped})")
    data = results.read_json(path, WeightsError)
    if not isinstance(data, dict) or not data:
        raise WeightsError(f"{path}: expected an object of test -> weight")
    weights = {}
    for test, value in data.items():
        if isinstance(value, dict):
            value = value.get("weight")
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not 0 <= value <= results.MAX_WEIGHT
        ):
            raise WeightsError(
                f"{path}: test {test!r}: weight {value!r} is not a number "
                f"from 0 to {results.MAX_WEIGHT:g}"
            )
        weights[test] = float(value)
    return str(path), weights


def default_weights(tests: list[str]) -> tuple[str, dict[str, float]] | None:
    """The shipped weights of the suite all these tests belong to, if there are some."""
    suites = {t.split(".", 1)[0] for t in tests}
    if len(suites) == 1:
        (suite,) = suites
        # a name read from a file becomes a path here: only a safe one, as milarun names
        if _safe(suite) and (WEIGHTS_DIR / f"{suite}.json").exists():
            return load_weights(suite)
    return None


def _safe(suite: str) -> bool:
    try:
        results.safe_name(suite, "suite")
    except InputError:
        return False
    return True
