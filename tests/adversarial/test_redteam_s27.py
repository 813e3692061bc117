"""Red team, session 27: publications (the gate, the publish transaction, synthetic tables), the ledger, and
``veil serve``.

Part A holds attacks that succeed on 2026-11-26 (main at 1e072a3): each test is a strict xfail that FAILS today
(the lead removes the mark when fixing). Part B holds probes of defences that held (they pass, and fail if the
defence breaks). Helpers come from the earlier rounds (:mod:`tests.adversarial.test_redteam_s16`,
:mod:`tests.adversarial.test_redteam_s20`, :mod:`tests.publish_support`, :mod:`tests.support.attack`). Findings
(details in each test's docstring):

* A1 (MEDIUM) ``veil publish synth`` without ``--columns`` publishes the columns that implicit-attribute detection
  picks *on the private rows*: whether a column is in the public table (its schema, free to every analyst) says
  whether one person's value differs from everyone else's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.test_redteam_s16 import _publish, _published, _warehouse
from tests.publish_support import POLICY, people

# ==================================================================================================
# Part A — attacks that succeed today
# ==================================================================================================

# --- A1. A synthetic table's columns are chosen on the private rows: the schema says what one person holds -------


def _implicit_world(drop: list[int]) -> Any:
    """60 people whose job betrays their sex; everyone works 40 hours but person 7 (97); age and gain constant."""
    frame = people(60, seed=3)
    frame["hours"], frame["age"], frame["gain"] = 40, 40, 0
    frame.loc[7, "hours"] = 97
    return frame.drop(index=drop).reset_index(drop=True)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="s27 A1: synth's published columns come from detection on the private rows")
def test_A1_synthetic_table_columns_do_not_depend_on_one_person(tmp_path: Path) -> None:
    """MEDIUM (one person decides the public table's schema, at ε = 0) — interface: ``veil publish synth --sensitive
    sex --label income --beta 0.5`` with no ``--columns`` (the documented default: "columns … or None to detect
    them"), then any analyst's catalog (``information_schema.columns``, psql ``\\d``) or ``SELECT *``.

    Mechanism: `plugins/synth.py::sanitise` runs `metrics.implicit.detect_implicit` on the training rows (the private
    source) and publishes ``[sensitive, label, *detection.implicit]``: a column is a candidate when its NMI with the
    sensitive column is at least θ, a deterministic function of the rows. The synthetic *values* come from declared
    domains (s16 A2), the row count from ``--rows`` (s24 A4), but the *set of columns* is the private data's. D: 60
    people, all working 40 hours but person 7 (97 hours); D′: D without person 7. NMI(hours, sex) is 0.017 in D
    (person 7 alone) and 0 in D′, so ``hours`` is published in D and absent in D′: measured through ``publish``
    ``[hours, income, job, sex]`` vs ``[income, job, sex]`` (whenever person 7 falls in the 80 % training part, 2 of
    3 runs; in the third they were in the holdout). The refusal "no implicit-privacy attributes … (candidates
    ['job', 'hours'], τ = 0.533)" likewise depends on the rows and prints exact statistics of them. Sound: publish
    the columns the curator names (``--columns``, or every declared column), never a set chosen on the rows; keep
    detection in ``veil audit implicit``. Run on the plug-in with the whole source as its training part (the
    transaction's 80 % split is random), so the measurement is deterministic."""
    from veil.generators.registry import RunEnv, get_plugin
    from veil.generators.transaction import _finalise, csprng

    request = {"table": "people", "method": "imposter", "sensitive": "sex", "label": "income", "epochs": 1,
               "batch_size": 64, "rows": 100, "beta": 0.5, "seed": 1, "output": "syn"}  # fmt: skip
    published = {}
    for world, drop in (("d", []), ("d_prime", [7])):
        frame = _implicit_world(drop)
        policy = _warehouse(tmp_path / world, frame)
        plugin = get_plugin("synth")
        plan = plugin.plan(policy, request)
        spec = policy.tables["people"]
        generator = csprng()
        env = RunEnv(policy=policy, spec=spec, generator=generator, rng=None, progress=False, seed=1,
                     source_rows=len(frame))  # fmt: skip
        pub = _finalise(plugin.sanitise(plan, frame, env), spec, generator)
        published[world] = sorted(map(str, pub.frame.columns))
    assert published["d"] == published["d_prime"], (
        f"the synthetic table's columns are {published['d']} with person 7 and {published['d_prime']} without"
    )
