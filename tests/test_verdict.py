"""Verdicts are plain data: strict JSON out, the same Verdict back in."""
import json
import math

import pytest

from kernelrl.verdict import ErrorStats, Flag, Timing, Verdict


def test_infinite_errors_survive_a_json_round_trip_as_strict_json():
    v = Verdict(status="incorrect", message="NaN output",
                error=ErrorStats(math.inf, math.inf, math.inf, 1e-4, 1e-4, 2, 7),
                flags=(Flag("output", "NaN", hack="uninitialised_output"),))
    text = v.to_json()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    back = Verdict.from_json(text)
    assert back == v and math.isinf(back.error.max_abs)


def test_a_speedup_is_only_allowed_on_ok():
    with pytest.raises(ValueError, match="only set for status 'ok'"):
        Verdict(status="incorrect", speedup=2.0)


def test_unknown_statuses_are_refused():
    with pytest.raises(ValueError, match="unknown status"):
        Verdict(status="fast")


def test_timing_summarises_samples():
    t = Timing.from_samples([3.0, 1.0, 2.0], "perf_counter", wall_us=[4.0, 5.0, 6.0])
    assert (t.median_us, t.min_us, t.max_us, t.n, t.wall_median_us) == (2.0, 1.0, 3.0, 3, 5.0)
