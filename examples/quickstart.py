"""Quick start with the Python API on the demo warehouse.

python examples/quickstart.py            # builds ./demo if needed, then asks a few questions
"""

from __future__ import annotations

from pathlib import Path

import veil
from veil.demo import build_demo


def main() -> None:
    policy = Path("demo/policy.toml")
    if not policy.exists():
        build_demo("demo")
    with veil.connect(policy, analyst="alice") as db:
        print(db.explain("SELECT sex, AVG(income) FROM people GROUP BY sex"))
        df = db.sql("SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY sex")
        print(df)
        print("95% CI half-widths:", df.attrs["ci95"])
        print("ε charged:", df.attrs["epsilon_charged"], "remaining:", df.attrs["epsilon_remaining"])
        print(db.budget())


if __name__ == "__main__":
    main()
