"""A first launch of a job a colleague has run starts from the colleague's profile of it: a real second uid stores its
profile in the admin's shared layout, and root's first launch of the same script under a power budget is admitted at a
cap from it (where, with nothing known, it would wait), says so, profiles nothing, and keeps what its closed loop made
of it as its own; ``--fresh-profile``, ``--profile off`` and ``[profiling] colleagues = false`` read no colleague's."""

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
#: the same curve at the pace the stepper runs (10 ms an iteration, whatever its cap): a run of it confirms it
FAST = Profile(0.01, 90.0, 30.0, 1000, 330.0, (CapPoint(250.0, 0.0118, 242.0, 20, 1.0),
                                               CapPoint(300.0, 0.0106, 285.0, 20, 1.0),
                                               CapPoint(400.0, 0.01, 330.0, 20, 1.0)))
#: a forged one: the stepper claimed 30 % slower uncapped than it runs (its reference "measured inside 4 runs", so a loop
#: of the user's own would not measure it again) and low caps nearly free; within the test of a disturbed run (< 1.5x)
FORGED = Profile(0.013, 90.0, 30.0, 1000, 330.0, (CapPoint(250.0, 0.0136, 242.0, 20, 1.0),
                                                  CapPoint(300.0, 0.0133, 285.0, 20, 1.0),
                                                  CapPoint(400.0, 0.013, 330.0, 120, 1.0, 4, 120)))
#: a profile that contradicts itself (its lower cap ran faster than uncapped: measured while disturbed)
DISTURBED = Profile(0.1, 90.0, 30.0, 1000, 330.0, (CapPoint(250.0, 0.05, 242.0), CapPoint(400.0, 0.1, 330.0)))

STORE = """
identity = JobIdentity(args["script"], tuple(args["args"]), "1", account_name(os.getuid()), args["gpu"])
profile = {"curve": CURVE, "fast": FAST, "disturbed": DISTURBED, "forged": FORGED,
           "no-power": Profile(0.1)}[args["which"]]
History(Path(args["d"])).store_profile(identity.fingerprint(), profile, job_id=args["job"])
"""
IMPORTS = """
from ecolaunch.jobmodel.profile import Profile
from ecolaunch.profile.history import History, JobIdentity
from ecolaunch.state.userdirs import account_name
from tests.launch.test_colleague_curve import CURVE, DISTURBED, FAST, FORGED
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


def dry_run(d: Path, tmp_path: Path, *extra: str, policy_text: str = "") -> tuple[dict, str]:
    policy = tmp_path / "policy.toml"
    # 2 x A100 (100-400 W): an uncapped job and the idle GPU at its minimum need 500 W, more than the budget
    policy.write_text("[power]\nmax_total_w = 450\n" + policy_text)
    env = clean_env(ECOLAUNCH_SIMULATE=f"2x{A100.removeprefix('NVIDIA ')}", ECOLAUNCH_STATE_DIR=str(d),
                    ECOLAUNCH_POLICY=str(policy))
    out = subprocess.run(ecolaunch_cmd("--dry-run", "--json", "--policy", "exclusive", *extra, STEPPER, *ARGS),
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), out.stderr


def test_a_first_launch_starts_from_a_colleagues_profile_of_the_same_job(lab: Path, tmp_path: Path) -> None:
    alone, _ = dry_run(lab, tmp_path)
    assert alone["placed"] is False or alone["waiting"] is not None  # nothing known: it cannot be lowered, it waits
    store_as(ALICE, lab)
    told, said = dry_run(lab, tmp_path)
    assert told["placed"] is True and told["waiting"] is None, told
    cap = next(iter(told["power_caps_w"].values()))
    assert 285.0 <= cap <= 350.0  # within its 10 % bound by alice's curve, inside the 450 W budget
    assert (f"no profile of your own: starting from {user_dir_name(ALICE)}'s profile of the same job (job alice001); "
            "this run's closed loop corrects it and keeps it as yours") in said
    # --fresh-profile and --profile off read no stored profile, a colleague's neither; nor under the policy's switch
    for extra, policy in ((("--fresh-profile",), ""), (("--profile", "off"), ""),
                          ((), "[profiling]\ncolleagues = false\n")):
        decided, said = dry_run(lab, tmp_path, *extra, policy_text=policy)
        assert decided["waiting"] is not None and "starting from" not in said, (extra, policy)


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


def launch(d: Path, tmp_path: Path, budget: bool = True) -> subprocess.CompletedProcess:
    policy = tmp_path / "policy.toml"
    policy.write_text("[power]\nmax_total_w = 450\n" if budget else "")
    env = clean_env(ECOLAUNCH_SIMULATE="2xA100-SXM4-80GB", ECOLAUNCH_STATE_DIR=str(d), ECOLAUNCH_POLICY=str(policy))
    out = subprocess.run(ecolaunch_cmd("--policy", "exclusive", "--wait-timeout", "30", STEPPER, *ARGS), env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return out


def newest_record(d: Path) -> dict:
    env = clean_env(ECOLAUNCH_STATE_DIR=str(d))
    return json.loads(subprocess.run(ecolaunch_cmd("history", "--json", "--limit", "1"), env=env, cwd=REPO,
                                     capture_output=True, text=True, timeout=60, check=True).stdout)[0]


def test_the_run_starts_from_the_colleagues_profile_and_keeps_what_its_loop_made_of_it(lab: Path,
                                                                                        tmp_path: Path) -> None:
    store_as(ALICE, lab, "fast")
    alices = next((lab / "history" / user_dir_name(ALICE) / "profiles").glob("*.json"))
    before = alices.read_bytes()
    out = launch(lab, tmp_path)
    assert f"starting from {user_dir_name(ALICE)}'s profile of the same job (job alice001)" in out.stderr
    assert "profiled at" not in out.stderr, out.stderr  # nothing profiled: the run starts as a repeat would
    mine = History(lab).lookup(JobIdentity(STEPPER, ARGS, "1", current_user(), A100).fingerprint())
    assert mine is not None and mine.job_id not in (None, "alice001"), mine  # stored as this user's, by this run
    # alice's caps, with what this run's closed loop measured pooled in (a window more at the caps it ran)
    assert {p.power_cap_w for p in FAST.cap_points} <= {p.power_cap_w for p in mine.profile.cap_points}
    assert sum(p.windows for p in mine.profile.cap_points) > sum(p.windows for p in FAST.cap_points), mine.profile
    record = newest_record(lab)
    assert record["profile_from"] == "alice001"
    assert f"{user_dir_name(ALICE)}'s profile of the same job" in record["history_match"]
    assert alices.read_bytes() == before  # and nothing of alice's was touched
    # the next launch is the user's own repeat: it starts from the stored profile, not alice's
    again = launch(lab, tmp_path)
    assert "starting from" not in again.stderr and newest_record(lab)["profile_from"] == mine.job_id


def test_a_colleagues_profile_the_run_contradicts_is_not_kept_and_the_next_launch_profiles(lab: Path,
                                                                                           tmp_path: Path) -> None:
    store_as(ALICE, lab)  # 100 ms an iteration, where the stepper runs 10 ms: not this job as it runs here
    out = launch(lab, tmp_path)
    assert "starting from" in out.stderr and "not the job whose profile it matched" in out.stderr, out.stderr
    mine = History(lab).lookup(JobIdentity(STEPPER, ARGS, "1", current_user(), A100).fingerprint())
    assert mine is not None and mine.profile is None  # an entry of the user's own, with nothing of alice's
    again = launch(lab, tmp_path, budget=False)  # (a job that profiles cannot be lowered: it would wait the budget)
    assert "starting from" not in again.stderr and "power cap: profiled at" in again.stderr, again.stderr


def test_a_forged_uncapped_time_goes_at_the_runs_own_reference_window_and_is_not_kept(lab: Path,
                                                                                      tmp_path: Path) -> None:
    store_as(MALLORY, lab, "forged", job="mallory1")
    out = launch(lab, tmp_path, budget=False)  # (a budget's ceiling below the top cap would hold the window back)
    assert f"starting from {account_name(MALLORY)}'s profile of the same job (job mallory1)" in out.stderr
    assert "from the borrowed profile's 13 ms" in out.stderr and "following the run's own measurements" in out.stderr
    mine = History(lab).lookup(JobIdentity(STEPPER, ARGS, "1", current_user(), A100).fingerprint())
    assert mine is not None and mine.profile is not None, mine
    # what is kept is what this run measured: its own reference, none of mallory's points
    assert not {(p.power_cap_w, p.iter_time_s) for p in FORGED.cap_points} & {
        (p.power_cap_w, p.iter_time_s) for p in mine.profile.cap_points}, mine.profile
    top = max(mine.profile.cap_points, key=lambda p: p.power_cap_w)
    assert top.power_cap_w == 400.0 and top.iter_time_s < 0.012 and top.windows == 1, mine.profile
