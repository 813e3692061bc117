"""What a publication request may ask, refused typed in the plan (before any data is read or charged), and what
decides a synthetic table's schema: the policy and the request only (red team s27 A1, A9, A16)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.publish_support import POLICY, people

# a request per kind whose columns are named twice (after normalisation) or in two roles
REPEATED: dict[str, tuple[str, dict[str, Any]]] = {
    "sdc_spellings": ("sdc", {"method": "dp_microagg_laplace", "columns": ["age", "AGE"], "params": ["epsilon=1"]}),
    "sdc_repeated": ("sdc", {"method": "microagg_mdav", "columns": ["age", "age"], "params": ["k=5"]}),
    "sdc_target_in_columns": ("sdc", {"method": "microagg_mdav", "columns": ["hours", "age"], "target": "Age",
                                      "params": ["k=5"]}),
    "synth_repeated": ("synth", {"sensitive": "sex", "label": "income", "columns": ["job", "job"]}),
    "synth_spellings": ("synth", {"sensitive": "sex", "label": "income", "columns": ["job", " JOB"]}),
    "synth_condition_in_columns": ("synth", {"sensitive": "sex", "label": "income", "columns": ["job", "income"]}),
    "kanon_qi_repeated": ("kanon", {"qi": ["age", "Age"], "sensitive": ["income"], "k": 5}),
    "kanon_qi_sensitive": ("kanon", {"qi": ["age", "sex"], "sensitive": ["sex"], "k": 5}),
    "krr_repeated": ("krr", {"columns": ["job", "JOB"], "epsilon": 1.0}),
}  # fmt: skip

BAD_SEED: dict[str, tuple[str, dict[str, Any]]] = {
    "kanon": ("kanon", {"qi": ["age", "sex"], "sensitive": ["income"], "k": 5}),
    "synth": ("synth", {"sensitive": "sex", "label": "income", "columns": ["job"]}),
    "sdc": ("sdc", {"method": "microagg_mdav", "columns": ["age"], "params": ["k=5"]}),
}


def _policy(tmp_path: Path, text: str = POLICY) -> Any:
    from veil.policy import load_policy

    path = tmp_path / "policy.toml"
    path.write_text(text.format(table_budget=""), encoding="utf-8")
    return load_policy(path)


def _plan(policy: Any, kind: str, request: dict[str, Any]) -> Any:
    from veil.generators.registry import get_plugin

    return get_plugin(kind).plan(policy, {"table": "people", "output": "o", **request})


@pytest.mark.parametrize("case", sorted(REPEATED))
def test_a_column_named_twice_or_in_two_roles_is_refused_in_the_plan(tmp_path: Path, case: str) -> None:
    from veil.errors import InputError

    kind, request = REPEATED[case]
    with pytest.raises(InputError, match=r"more than once|both in|repeat"):
        _plan(_policy(tmp_path), kind, request)


def test_pate_features_named_twice_are_refused_in_the_plan(tmp_path: Path) -> None:
    from veil.errors import InputError
    from veil.generators.plugins.pate import _features

    with pytest.raises(InputError, match="more than once"):
        _features(_policy(tmp_path).table("people"), "income", ["age", "hours", "age"])


@pytest.mark.parametrize("case", sorted(BAD_SEED))
@pytest.mark.parametrize("seed", [-5, 2**32, 1.5])
def test_a_seed_numpy_refuses_is_refused_in_the_plan(tmp_path: Path, case: str, seed: Any) -> None:
    from veil.errors import InputError

    kind, request = BAD_SEED[case]
    with pytest.raises(InputError, match="--seed"):
        _plan(_policy(tmp_path), kind, {**request, "seed": seed})


@pytest.mark.parametrize("neurons", [(2, 100_000_000, 1), (100_000_000, 100_000_000, 10), (2, 9000, 1), (5, 4, 1)])
def test_som_neuron_counts_are_bounded_in_the_plan(tmp_path: Path, neurons: tuple[int, int, int]) -> None:
    from veil.errors import InputError

    request = {"qi": ["age", "sex"], "sensitive": ["income"], "k": 5, "som_columns": ["hours"], "som_neurons": neurons}
    with pytest.raises(InputError, match="SOM neuron bounds"):
        _plan(_policy(tmp_path), "kanon", request)


def test_synth_threads_are_bounded_by_the_cli(tmp_path: Path) -> None:
    from tests.publish_support import veil
    from veil.generators._threads import MAX_THREADS

    res = veil("publish", "synth", "--policy", _policy(tmp_path).path, "--table", "people", "--sensitive", "sex",
               "--threads", MAX_THREADS + 1, "--output", "o")  # fmt: skip
    assert res.exit_code == 2 and str(MAX_THREADS) in res.output, res.output


def test_synth_publishes_every_declared_column_without_columns(tmp_path: Path) -> None:
    """No ``--columns``: the implicit attributes are the declared columns with a domain (the policy's choice)."""
    plan = _plan(_policy(tmp_path), "synth", {"sensitive": "sex", "label": "income"})
    assert plan.params["columns"] == ["age", "hours", "gain", "job"]


def test_synth_with_nothing_declared_to_synthesise_is_a_policy_refusal(tmp_path: Path) -> None:
    """Only the conditions have domains: refused from the policy alone (no figure of the rows in the message)."""
    from veil.errors import PolicyError

    text = POLICY.replace(", lower = 17, upper = 90", "").replace(", lower = 1, upper = 99", "")
    text = text.replace(", lower = 0, upper = 5000", "").replace(', values = ["nurse", "smith", "clerk"]', "")
    with pytest.raises(PolicyError, match="nothing to synthesise"):
        _plan(_policy(tmp_path, text), "synth", {"sensitive": "sex", "label": "income"})


def _odd_person(change: str) -> pd.DataFrame:
    """60 people whose job betrays their sex, hours/age/gain constant; one person changed as ``change`` says."""
    frame = people(60, seed=3)
    frame["hours"], frame["age"], frame["gain"] = 40, 40, 0
    if change == "outlier_hours":
        frame.loc[7, "hours"] = 97
    elif change == "outlier_gain":
        frame.loc[7, "gain"] = 4999
    elif change == "clerk":
        frame.loc[7, "job"] = "clerk"
    elif change == "missing_job":
        frame["job"] = frame["job"].astype(object)
        frame.loc[7, "job"] = None
    elif change == "removed":
        frame = frame.drop(index=[7]).reset_index(drop=True)
    return frame


@pytest.mark.slow
@pytest.mark.parametrize("change", ["outlier_hours", "outlier_gain", "clerk", "missing_job", "removed"])
@pytest.mark.parametrize("beta", [0.5, 0.99])
def test_synth_schema_and_ending_do_not_depend_on_one_person(tmp_path: Path, change: str, beta: float) -> None:
    """D (everyone works 40 h, earns 0, …) and D′ (one person changed): the plug-in, trained on all rows, publishes
    the same columns and ends the same way, whatever β (s27 A1: detection on the rows chose the columns, and refused
    with candidates and τ of the rows when it found none)."""
    from tests.adversarial.test_redteam_s16 import _warehouse
    from veil.errors import VeilError
    from veil.generators.registry import RunEnv, get_plugin
    from veil.generators.transaction import _finalise, csprng

    request = {"table": "people", "method": "imposter", "sensitive": "sex", "label": "income", "epochs": 1,
               "batch_size": 64, "rows": 50, "beta": beta, "seed": 1, "output": "syn"}  # fmt: skip
    endings = {}
    for world in ("d", "d_prime"):
        frame = _odd_person("none" if world == "d" else change)
        policy = _warehouse(tmp_path / world, frame)
        plugin = get_plugin("synth")
        spec = policy.tables["people"]
        generator = csprng()
        env = RunEnv(policy=policy, spec=spec, generator=generator, rng=None, progress=False, seed=1,
                     source_rows=len(frame))  # fmt: skip
        try:
            pub = _finalise(plugin.sanitise(plugin.plan(policy, request), frame, env), spec, generator)
            endings[world] = sorted(map(str, pub.frame.columns))
        except VeilError as exc:
            endings[world] = type(exc).__name__
    assert endings["d"] == endings["d_prime"], endings
