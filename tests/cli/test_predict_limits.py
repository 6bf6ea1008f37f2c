"""Issue 11, item 8: ``ecolaunch predict`` refuses deep nesting and more jobs than can share a GPU, with a clear
error, and never answers a board power below idle. Run by a real second uid (``nobody``), as a member would."""

from __future__ import annotations

import json

from ecolaunch.cli.predict_cmd import INPUT_HINT
from tests.multiuser import MALLORY, last_json, require_root, run_as

HINT = f"HINT: {INPUT_HINT}\n"

JOB = {"id": "a", "iter_time_s": 0.1, "sm_util_pct": 50, "mem_bw_util_pct": 30, "memory_mib": 100, "power_w": 150}

IMPORTS = """
import click._textwrap  # a usage error's Usage line wraps with it: loaded before the drop, as the root-only venv is
from click.testing import CliRunner
from ecolaunch.cli.predict_cmd import predict
def invoke(text):
    return CliRunner().invoke(predict, ["--json"], input=text, prog_name="ecolaunch predict")
invoke(json.dumps({"gpu": "V100-SXM2-32GB", "power_cap_w": None, "jobs": [{"id": "w", "iter_time_s": 0.1,
       "sm_util_pct": 50, "mem_bw_util_pct": 30, "memory_mib": 100, "power_w": 150}]}))  # loads the model first
"""

BODY = """
out = []
for text in args["inputs"]:
    r = invoke("[" * 200_000 + "]" * 200_000 if text == "DEEP" else text)  # the review's input, built here
    out.append([r.exit_code, r.output])
print(json.dumps(out))
"""


def _scenario(n: int) -> str:
    return json.dumps({"gpu": "V100-SXM2-32GB", "power_cap_w": None, "jobs": [{**JOB, "id": f"j{i}"} for i in range(n)]})


USAGE = "Usage: ecolaunch predict [OPTIONS]\nTry 'ecolaunch predict --help' for help.\n\n"


def test_predict_limits_as_a_member() -> None:
    require_root()
    deep = "DEEP"  # 200,000 nested arrays (too long for a command line: the member's script builds it)
    deep_in_a_field = json.dumps({"gpu": "V100-SXM2-32GB", "jobs": []})[:-3] + "[" * 50 + "]" * 50 + "}"
    out = last_json(run_as(MALLORY, BODY, {"inputs": [deep, deep_in_a_field, _scenario(65), _scenario(64)]},
                           imports=IMPORTS))
    (c1, o1), (c2, o2), (c3, o3), (c4, o4) = out
    assert (c1, o1) == (2, USAGE + "Error: input: arrays and objects nested more than 16 deep (scenarios need 6)\n" + HINT)
    assert (c2, o2) == (2, USAGE + "Error: input: arrays and objects nested more than 16 deep (scenarios need 6)\n" + HINT)
    assert (c3, o3) == (2, USAGE + "Error: jobs: 65 jobs cannot share one GPU (at most 64, the most any admin policy allows)\n" + HINT)
    assert c4 == 0 and o4.startswith("note: 64 jobs on one GPU; the model was trained with at most 4")
    result = json.loads(o4[o4.index("\n") + 1:])
    assert result["gpu_power_w"] >= 40.0  # the V100's idle power in the catalogue; the model alone said 0.0 W


def test_power_stays_between_idle_and_the_limit() -> None:
    from ecolaunch.cli.predict_cmd import _board_power_w
    from ecolaunch.devices.catalogue import lookup

    v100 = lookup("V100-SXM2-32GB")
    assert _board_power_w(v100, None, 0.0) == v100.idle_power_w
    assert _board_power_w(v100, 200.0, 205.0) == 205.0  # only a measurement exceeds the cap (the model clamps)
    assert _board_power_w(v100, None, float("nan")) == v100.power_limit_max_w
    assert _board_power_w(v100, None, 180.0) == 180.0
