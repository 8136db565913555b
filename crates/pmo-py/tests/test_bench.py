"""Bench records into pandas, and the example that redraws Fig. 6 from them."""

import os
import subprocess
import sys

import pytest

import pmo

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PMO_BIN = os.environ.get("PMO_BIN", os.path.join(ROOT, "target", "debug", "pmo"))


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory):
    if not os.path.exists(PMO_BIN):
        pytest.skip(f"no pmo binary at {PMO_BIN} (build it, or set PMO_BIN)")
    out = tmp_path_factory.mktemp("bench")
    js = out / "r.json"
    subprocess.run([PMO_BIN, "bench", "suite", "--study", "breakdown", "--workload", "2dconv",
                    "--size", "tiny", "--quick", "--json", str(js), "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    return js


def test_load_bench_one_call(bench_json):
    df = pmo.load_bench(str(bench_json))
    assert {"bench", "metric", "value", "unit", "samples", "scheme", "workload", "study"} <= set(df.columns)
    wall = df[(df.metric == "wall_s") & (df.study == "breakdown")]
    assert set(wall.scheme) >= {"none", "secure"}
    assert (wall.value > 0).all()


def test_example_redraws_fig6(bench_json, tmp_path):
    svg = tmp_path / "fig6.svg"
    example = os.path.join(ROOT, "crates", "pmo-py", "examples", "fig6_breakdown.py")
    r = subprocess.run([sys.executable, example, str(bench_json), str(svg), "2dconv"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<rect") > 10
    for scheme in ("none", "secure"):
        assert f">{scheme}</text>" in text
