"""A first launch decided with a colleague's profile of the same job: a real second uid stores its profile in the
admin's shared layout, and root's first launch of the same script under a power budget is admitted at a cap from it
(where, with nothing known, it would wait), says so, and still measures its own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ecolaunch.jobmodel.profile import CapPoint, Profile
from ecolaunch.profile.history import History, JobIdentity
from ecolaunch.runtime import current_user
from ecolaunch.state.userdirs import account_name, user_dir_name
from tests.conftest import BIN, REPO, clean_env, ecolaunch_cmd
from tests.multiuser import ALICE, MALLORY, remove, require_root, run_as, shared_dir

A100 = "NVIDIA A100-SXM4-80GB"
STEPPER = str(BIN / "stepper.py")
ARGS = ("400", "0.01")
#: what alice measured of the job: 6 % slower at 300 W, 18 % at 250 W (floor 285 W under a 10 % bound)
CURVE = Profile(0.1, 90.0, 30.0, 1000, 330.0, (CapPoint(250.0, 0.118, 242.0), CapPoint(300.0, 0.106, 285.0),
                                                CapPoint(400.0, 0.1, 330.0)))
#: a profile that contradicts itself (its lower cap ran faster than uncapped: measured while disturbed)
DISTURBED = Profile(0.1, 90.0, 30.0, 1000, 330.0, (CapPoint(250.0, 0.05, 242.0), CapPoint(400.0, 0.1, 330.0)))

STORE = """
identity = JobIdentity(args["script"], tuple(args["args"]), "1", account_name(os.getuid()), args["gpu"])
profile = {"curve": CURVE, "disturbed": DISTURBED, "no-power": Profile(0.1)}[args["which"]]
History(Path(args["d"])).store_profile(identity.fingerprint(), profile, job_id=args["job"])
"""
IMPORTS = """
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.history import History, JobIdentity
from ecolaunch.state.userdirs import account_name
from tests.launch.test_colleague_curve import CURVE, DISTURBED
"""


@pytest.fixture
def lab():
    require_root()
    d = shared_dir()
    yield d
    remove(d)


def store_as(uid: int, d: Path, which: str = "curve", job: str = "alice001", args=ARGS) -> None:
    run_as(uid, STORE, {"d": str(d), "script": STEPPER, "args": list(args), "gpu": A100, "which": which, "job": job},
           imports=IMPORTS)


def dry_run(d: Path, tmp_path: Path, *extra: str) -> dict:
    policy = tmp_path / "policy.toml"
    # 2 x A100 (100-400 W): an uncapped job and the idle GPU at its minimum need 500 W, more than the budget
    policy.write_text("[power]\nmax_total_w = 450\n")
    env = clean_env(ECOLAUNCH_SIMULATE=f"2x{A100.removeprefix('NVIDIA ')}", ECOLAUNCH_STATE_DIR=str(d),
                    ECOLAUNCH_POLICY=str(policy))
    out = subprocess.run(ecolaunch_cmd("--dry-run", "--json", "--policy", "exclusive", *extra, STEPPER, *ARGS),
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_first_launch_is_admitted_at_a_cap_from_a_colleagues_profile_of_the_same_job(lab: Path,
                                                                                      tmp_path: Path) -> None:
    alone = dry_run(lab, tmp_path)
    assert alone["placed"] is False or alone["waiting"] is not None  # nothing known: it cannot be lowered, it waits
    store_as(ALICE, lab)
    told = dry_run(lab, tmp_path)
    assert told["placed"] is True and told["waiting"] is None, told
    cap = next(iter(told["power_caps_w"].values()))
    assert 285.0 <= cap <= 350.0  # within its 10 % bound by alice's curve, inside the 450 W budget
    assert told["reasons"][0] == (f"first launch: decided with {user_dir_name(ALICE)}'s profile of the same job "
                                  "(job alice001); its own is measured as it runs")
    # --fresh-profile reads no stored profile, a colleague's neither
    assert dry_run(lab, tmp_path, "--fresh-profile")["waiting"] is not None


def test_only_a_usable_profile_of_the_same_job_by_another_user_is_told(lab: Path) -> None:
    me = JobIdentity(STEPPER, ARGS, "1", current_user(), A100)
    history = History(lab)
    assert history.colleague_profile(me) is None
    store_as(ALICE, lab, "disturbed")  # measured while disturbed: not used
    store_as(MALLORY, lab, "no-power", job="mallory1")  # no power: nothing to cap from
    store_as(ALICE, lab, "curve", job="alice002", args=("400", "0.02"))  # another job (its arguments differ)
    assert history.colleague_profile(me) is None
    history.store_profile(me.fingerprint(), CURVE, job_id="mine0001")  # my own is mine, not a colleague's
    assert history.colleague_profile(me) is None
    store_as(ALICE, lab, "curve", job="alice003")
    who, entry = history.colleague_profile(me)
    assert (who, entry.job_id, entry.profile) == (user_dir_name(ALICE), "alice003", CURVE)
    store_as(MALLORY, lab, "curve", job="mallory2")  # the newest of them
    assert history.colleague_profile(me)[0] == account_name(MALLORY)


def test_the_told_run_measures_and_keeps_its_own_profile(lab: Path, tmp_path: Path) -> None:
    store_as(ALICE, lab)
    alices = next((lab / "history" / user_dir_name(ALICE) / "profiles").glob("*.json"))
    before = alices.read_bytes()
    policy = tmp_path / "policy.toml"
    policy.write_text("[power]\nmax_total_w = 450\n")
    env = clean_env(ECOLAUNCH_SIMULATE="2xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(lab), ECOLAUNCH_POLICY=str(policy))
    out = subprocess.run(ecolaunch_cmd("--policy", "exclusive", "--wait-timeout", "30", STEPPER, *ARGS), env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert f"decided with {user_dir_name(ALICE)}'s profile of the same job (job alice001)" in out.stderr
    mine = History(lab).lookup(JobIdentity(STEPPER, ARGS, "1", current_user(), A100).fingerprint())
    assert mine is not None and mine.job_id != "alice001" and mine.profile != CURVE  # what this run measured
    assert alices.read_bytes() == before  # and nothing of alice's was touched
