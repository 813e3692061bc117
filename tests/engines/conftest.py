"""Fixtures for the engine tests: the same warehouse on DuckDB, on Spark ``local[2]`` (one Spark per run), on a
Spark Connect server and on Sail (a Rust engine speaking Spark Connect)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_proxy_fixtures import REGIONS, visits_frame
from veil.policy import Policy, load_policy

POLICY = """\
[database]
path = "wh.duckdb"
[ledger]
path = "ledger.sqlite"
[defaults]
epsilon_per_query = 0.5
[tables.people]
privacy_unit = "row"
[tables.people.columns]
age = { type = "int", lower = 17, upper = 90 }
income = { type = "float", lower = 0, upper = 200000 }
sex = { type = "category", values = ["Female", "Male", "Other"] }
state = { type = "category", max_length = 64 }  # read across a join: at most 504 (MAX_JOIN_ROW_BYTES)
zip = { type = "int" }
age_offset = { type = "int", lower = -5, upper = 5 }
married = { type = "bool" }
born = { type = "date" }
hours = { type = "int", lower = 1, upper = 99 }
[tables.visits]
privacy_unit = "user_id"
max_rows_per_unit = 5
[tables.visits.columns]
user_id = { type = "int" }
amount = { type = "float", lower = 0, upper = 100 }
kind = { type = "category", values = ["a", "b", "c"] }
[tables.regions]
public = true
[analysts.alice]
epsilon = 100000.0
"""

SPARK = '\n[engine]\nkind = "spark"\nmaster = "local[2]"\nwarehouse = "spark-warehouse"\n'


def people(n: int = 4000, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(17, 91, n)
    df = pd.DataFrame(
        {
            "age": age,
            "income": np.round((rng.gamma(2.0, 20000.0, n) + age * 100.0).clip(0, 250000), 2),
            "sex": rng.choice(["Female", "Male"], n),
            "state": rng.choice(["CA", "NY", "TX", "WA", "OR", "ZZ"], n, p=[0.3, 0.25, 0.2, 0.12, 0.08, 0.05]),
            "zip": rng.integers(10000, 99999, n),
            "age_offset": rng.integers(-5, 6, n),
            "married": rng.random(n) < 0.4,
            "born": (pd.Timestamp("1940-01-01") + pd.to_timedelta(rng.integers(0, 25000, n), unit="D")).date,
            "hours": rng.integers(1, 100, n),
        }
    )
    df.loc[rng.random(n) < 0.05, "income"] = np.nan
    return df


def outside_spark_env() -> dict[str, str]:
    """The environment of a child process that starts a short-lived local Spark of its own (the red-team tests'
    writer "from another process"): its JVM compiles with C1 only (``-XX:TieredStopAtLevel=1``, prepended to Veil's
    own driver options), which cuts the CPU of a start-up and a small write by about a third (34 → 22 s of JVM CPU,
    measured 2026-11-27 on the 2-core host); what the process does is the same."""
    import os

    opts = "--conf spark.driver.defaultJavaOptions=-XX:TieredStopAtLevel=1 pyspark-shell"
    return {**os.environ, "PYSPARK_SUBMIT_ARGS": opts}


#: The loop of :class:`OutsideSpark`'s process: one JSON request a line on stdin (a script and its ``sys.argv``), run
#: with the script's stdout captured; one JSON reply a line on the file descriptor named by its argument.
_OUTSIDE_LOOP = """\
import contextlib, io, json, os, sys, traceback
replies = os.fdopen(int(sys.argv[1]), "w")
for line in sys.stdin:
    request = json.loads(line)
    sys.argv = ["-c", *request["argv"]]
    out, error = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(out):
            exec(request["script"], {"__name__": "__main__"})
    except BaseException:
        error = traceback.format_exc()
    replies.write(json.dumps({"id": request["id"], "stdout": out.getvalue(), "error": error}) + "\\n")
    replies.flush()
"""


class OutsideSpark:
    """Another process with a local Spark of its own — the red-team tests' writer "from another process" (a
    curator's CLI or tool beside a serving process) — kept for the test run, so its JVM starts once (about 20 s of
    CPU each time), not once per test. :meth:`run` runs a script there as ``python -c script *argv`` would (its own
    module state, Spark session and catalog; nothing shared with this process but the files) and returns its
    stdout. Its environment is ``outside_spark_env``'s."""

    def __init__(self, log: Path) -> None:
        import os
        import subprocess
        import sys

        self._log_path = log
        self._log = log.open("wb")
        read, write = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _OUTSIDE_LOOP, str(write)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # the JVM's own output; the scripts' stdout comes back in the replies
            stderr=self._log,
            env=outside_spark_env(),
            pass_fds=(write,),
            text=True,
        )
        os.close(write)
        self._replies = os.fdopen(read)
        self._asked = 0

    def run(self, script: str, *argv: str) -> str:
        """``script``'s stdout; an AssertionError with its traceback (and the process's stderr) if it raised."""
        import json

        assert self._proc.stdin is not None
        self._asked += 1
        self._proc.stdin.write(json.dumps({"id": self._asked, "script": script, "argv": list(argv)}) + "\n")
        self._proc.stdin.flush()
        while True:  # a reply to an earlier request, whose test pytest's timeout ended while it waited, is skipped
            line = self._replies.readline()  # a hang is caught by pytest's per-test timeout
            if not line:
                raise AssertionError(f"the outside process ended ({self._proc.wait()}): {self._stderr()}")
            reply = json.loads(line)
            if reply["id"] == self._asked:
                break
        assert reply["error"] is None, (reply["stdout"][-2000:], reply["error"][-3000:], self._stderr())
        return str(reply["stdout"])

    def _stderr(self) -> str:
        self._log.flush()
        return self._log_path.read_text(errors="replace")[-2000:]

    def close(self) -> None:
        import subprocess

        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._replies.close()
        self._log.close()


def spark_cli_dir(tmp_path_factory: pytest.TempPathFactory, name: str, rows: int) -> Path:
    """A directory holding the Spark policy and ``rows`` people as people.csv (skips without Spark)."""
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark test skipped: {reason}")
    d = tmp_path_factory.mktemp(name)
    (d / "policy.toml").write_text(POLICY + SPARK, encoding="utf-8")
    people(rows).to_csv(d / "people.csv", index=False)
    return d


def build(directory: Path, extra: str = "", write: Callable[[Policy, str, pd.DataFrame], None] | None = None) -> Policy:
    """The policy ``POLICY + extra`` in ``directory``, its three tables written by ``write`` (Veil's ``write_table``)."""
    from veil.store.warehouse import write_table

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.toml").write_text(POLICY + extra, encoding="utf-8")
    policy = load_policy(directory / "policy.toml")
    for name, df in (("people", people()), ("visits", visits_frame()), ("regions", REGIONS)):
        if write is None:
            write_table(policy, name, df, replace=True)
        else:
            write(policy, name, df)
    return policy


@pytest.fixture(scope="session")
def same_salt() -> Iterator[None]:
    """Both engines rank a unit's rows with one fixed salt, so they keep the same rows (test-only)."""
    import veil.proxy.bounding as bounding

    saved = bounding.secrets
    bounding.secrets = types.SimpleNamespace(token_hex=lambda n: "5a" * n)  # type: ignore[assignment]
    yield
    bounding.secrets = saved


@pytest.fixture(scope="session")
def duckdb_policy(tmp_path_factory: pytest.TempPathFactory, same_salt: None) -> Policy:
    return build(tmp_path_factory.mktemp("conformance") / "duckdb")


@pytest.fixture(scope="session")
def spark_policy(tmp_path_factory: pytest.TempPathFactory, same_salt: None) -> Policy:
    from veil.engines.spark import spark_available

    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark conformance skipped: {reason}")
    return build(tmp_path_factory.mktemp("conformance") / "spark", SPARK)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server for the test run: ``$VEIL_SPARK_CONNECT`` if set, else one started here.

    The server is the one pyspark ships (``jars/spark-connect_*.jar``, ``bin/spark-submit``) on ``local[2]``,
    on a free port, stopped at the end of the run. Skipped, with the reason, when pyspark, Java or the jar
    is missing or the server does not come up within three minutes. Its JVM compiles with C1 only
    (``-XX:TieredStopAtLevel=1``, as ``outside_spark_env``): the test run's start-up and few small queries cost
    about half the server's CPU (65 → 34 s for a start, a 4,000-row write and 18 queries, measured 2026-11-27 on
    the 2-core host); the JIT tier changes how fast the server runs, never what it computes.
    """
    import os

    from veil.engines.spark import spark_available
    from veil.store.spark import connect_available

    reason = connect_available()
    if reason is not None:
        pytest.skip(f"Spark Connect skipped: {reason}")
    given = os.environ.get("VEIL_SPARK_CONNECT")
    if given:
        yield given
        return
    reason = spark_available()
    if reason is not None:
        pytest.skip(f"Spark Connect skipped: {reason}")
    import pyspark

    home = Path(pyspark.__file__).parent
    jars = sorted((home / "jars").glob("spark-connect_*.jar"))
    if not jars or not (home / "bin" / "spark-submit").exists():
        pytest.skip(f"Spark Connect skipped: pyspark at {home} ships no Connect server (jars/spark-connect_*.jar)")
    d = tmp_path_factory.mktemp("spark_connect")
    port = _free_port()
    cmd = [str(home / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--master", "local[2]", "--conf", "spark.ui.enabled=false", "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", f"spark.sql.warehouse.dir={d / 'warehouse'}", "--conf", "spark.sql.shuffle.partitions=2",
           "--driver-java-options", f"-Dderby.system.home={d} -XX:TieredStopAtLevel=1", "spark-internal"]  # fmt: skip
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_NO_DAEMONIZE="1", SPARK_LOG_DIR=str(d))
    with _connect_server(cmd, d, port, env=env, seconds=180, poll=0.5, skip="Spark Connect skipped: the local server") as url:
        yield url


@contextlib.contextmanager
def _connect_server(
    cmd: list[str], directory: Path, port: int, *, env: dict[str, str] | None, seconds: float, poll: float, skip: str
) -> Iterator[str]:
    """Run ``cmd`` (a Spark Connect server on ``port``) in its own process group, logging to ``directory``; yield
    its URL once the port opens (skip with ``skip`` and the log's tail if it does not within ``seconds``); stop it."""
    import os
    import signal
    import subprocess
    import time

    from veil.store.spark import forget_remote

    log = (directory / "server.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"sc://127.0.0.1:{port}"
    try:
        polls = int(seconds / poll)  # counted, not a clock read: a start-up wait is no timing assertion
        while not _port_open(port):
            polls -= 1
            if proc.poll() is not None or polls < 0:
                tail = (directory / "server.log").read_text(errors="replace")[-600:]
                pytest.skip(f"{skip} did not start (exit {proc.poll()}): {tail}")
            time.sleep(poll)
        yield url
    finally:
        forget_remote(url)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group (started above)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def connect_engine(url: str, database: str) -> str:
    """The ``[engine]`` section of a policy on the Connect server ``url``."""
    return f'\n[engine]\nkind = "spark"\nremote = "{url}"\ndatabase = "{database}"\n'


@pytest.fixture(scope="session")
def connect_policy(tmp_path_factory: pytest.TempPathFactory, connect_url: str, same_salt: None) -> Policy:
    import uuid

    return build(tmp_path_factory.mktemp("conformance") / "connect", connect_engine(connect_url, f"veil_{uuid.uuid4().hex[:8]}"))


#: The Sail server's process. Sail 0.7.2 picks its table of Spark settings by the version of the ``pyspark`` module
#: in its own process and refuses PySpark 4.3 (``unsupported PySpark version``: every session fails to start); it
#: knows 3.x to 4.2. A deployment runs Sail in an environment of its own (``pysail[spark]``, PySpark <= 4.2) beside
#: Veil's 4.3 client; here the server's process is told it has PySpark 4.2.0, whose settings include those the 4.3
#: client reads (``spark.sql.session.localRelation*``). Sail imports more of PySpark only for Python UDFs and
#: Python data sources, which Veil never sends (they would fail here with an import error, not a wrong answer).
_SAIL_SERVER = (
    "import sys, types\n"
    "pyspark = types.ModuleType('pyspark')\n"
    "pyspark.__version__ = '4.2.0'\n"
    "sys.modules['pyspark'] = pyspark\n"
    "from pysail.cli import main\n"
    "main()\n"
)


@contextlib.contextmanager
def sail_server(directory: Path) -> Iterator[str]:
    """A Sail Spark Connect server (``pysail``) on a free port, its warehouse in ``directory``; stopped on exit.

    Started as a process of its own (``sail spark server``; see ``_SAIL_SERVER``). Skips the calling test, with the
    reason, when pysail or pyspark's Connect client is missing or the server does not come up within a minute.
    """
    import importlib.util
    import sys

    from veil.store.spark import connect_available

    reason = connect_available()
    if reason is not None:
        pytest.skip(f"Sail run skipped: {reason}")
    if importlib.util.find_spec("pysail") is None:
        pytest.skip("Sail run skipped: pysail is not installed (pip install 'veil[test]' installs pysail==0.7.2)")
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cmd = [sys.executable, "-c", _SAIL_SERVER, "spark", "server", "--ip", "127.0.0.1", "--port", str(port)]
    with _connect_server(cmd, directory, port, env=None, seconds=60, poll=0.2, skip="Sail run skipped: the Sail server") as url:
        yield url


@pytest.fixture(scope="session")
def sail_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Sail server for the whole test run (``sail_server``)."""
    with sail_server(tmp_path_factory.mktemp("sail")) as url:
        yield url


def save_as_table(policy: Policy, name: str, df: pd.DataFrame) -> None:
    """``df`` written as the Parquet table ``name`` of the policy's database by the Connect client's own writer.

    Sail 0.7.2 has no ``ALTER TABLE … RENAME TO``, the last step of Veil's ``write_table`` on a Connect server
    (it writes aside, then renames), so the Sail run loads its tables this way (docs/engines.md, "Sail").
    """
    from veil.store.spark import spark_session, spec_of

    spec = spec_of(policy)
    spark_session(spec).createDataFrame(df).write.format("parquet").saveAsTable(f"{spec.database}.{name}")


@pytest.fixture(scope="session")
def sail_policy(tmp_path_factory: pytest.TempPathFactory, sail_url: str, same_salt: None) -> Policy:
    import uuid

    directory = tmp_path_factory.mktemp("conformance") / "sail"
    return build(directory, connect_engine(sail_url, f"veil_sail_{uuid.uuid4().hex[:8]}"), write=save_as_table)
