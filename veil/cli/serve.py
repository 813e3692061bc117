"""``veil serve`` (the PostgreSQL wire endpoint) and ``veil analyst add`` (analyst logins)."""

from __future__ import annotations

import ipaddress
import logging
import math
import socket
import sys
from pathlib import Path

import click

from veil.cli._common import cli, policy_option, run_guarded
from veil.errors import InputError
from veil.policy import load_policy

__all__ = ["analyst", "serve_command"]

_SECONDS = click.FloatRange(min=0)


def _finite(_ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number of seconds, got {value}", param=param)
    return value


def _is_loopback_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except OSError:
            return False


@cli.command("serve")
@policy_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=6432, show_default=True, type=click.IntRange(0, 65535), help="TCP port (0: any free).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="PEM certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="PEM private key.")
@click.option(
    "--allow-plaintext",
    is_flag=True,
    help="Accept unencrypted connections from non-loopback addresses (trusted networks only).",
)
@click.option(
    "--auth-timeout",
    type=_SECONDS,
    default=60,
    show_default=True,
    callback=_finite,
    help="Seconds a client has to log in (0: no limit).",
)
@click.option("--max-connections", type=click.IntRange(1), default=100, show_default=True, help="Open connections, in all.")
@click.option(
    "--max-connections-per-analyst",
    type=click.IntRange(1),
    default=None,
    help="Logged-in connections per analyst [default: half of --max-connections, at least 1, so one analyst "
    "never holds every slot].",
)
@click.option(
    "--statement-timeout", type=_SECONDS, default=0, show_default=True, callback=_finite, help="Seconds per statement (0: none)."
)
@click.option(
    "--public-query-timeout",
    type=_SECONDS,
    default=120,
    show_default=True,
    callback=_finite,
    help="Seconds of work on public data per statement, whatever --statement-timeout (0: none; never cuts a charged query).",
)
@click.option("--max-query-bytes", type=click.IntRange(1), default=1 << 20, show_default=True, help="Longest statement.")
@click.option("--max-query-tokens", type=click.IntRange(1), default=4000, show_default=True, help="Most tokens in a statement.")
@click.option("--max-query-depth", type=click.IntRange(1), default=64, show_default=True, help="Deepest bracket nesting.")
@click.option(
    "--max-planning-seconds",
    type=_SECONDS,
    default=10,
    show_default=True,
    callback=_finite,
    help="Planning time (Describe, EXPLAIN).",
)
@click.option(
    "--catalog-timeout", type=_SECONDS, default=5, show_default=True, callback=_finite, help="Seconds per catalog query."
)
@click.option("--workers", type=click.IntRange(1, 256), default=8, show_default=True, help="Threads for analyst queries.")
@click.option(
    "--busy-workers",
    type=click.IntRange(0, 256),
    default=0,
    show_default=True,
    help="Analyst jobs started at once, one running past 50 ms not counted (0: the cores per process).",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes accepting on the port (more than one: answers use more than one core; DuckDB only).",
)
@click.option(
    "--engine-threads",
    type=click.IntRange(0, 1024),
    default=None,
    help="DuckDB threads per process (0: one per core, at least 2; 1 is refused) [default: 0 with one process; "
    "with N processes, the cores divided by N, at least 2].",
)
@click.option(
    "--engine-memory",
    type=click.IntRange(0, 1 << 30),
    default=None,
    metavar="MIB",
    help="DuckDB memory limit of each warehouse connection, in MiB (0: DuckDB's default, 80% of memory each) "
    "[default: 80% of memory shared by the 2 connections each of the processes holds at most].",
)
@run_guarded
def serve_command(
    policy_path: Path,
    host: str,
    port: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    allow_plaintext: bool,
    auth_timeout: float,
    max_connections: int,
    max_connections_per_analyst: int | None,
    statement_timeout: float,
    public_query_timeout: float,
    max_query_bytes: int,
    max_query_tokens: int,
    max_query_depth: int,
    max_planning_seconds: float,
    catalog_timeout: float,
    workers: int,
    busy_workers: int,
    processes: int,
    engine_threads: int | None,
    engine_memory: int | None,
) -> None:
    """Serve analysts' SQL clients (psql, psycopg, JDBC, DBeaver) over the PostgreSQL protocol.

    Analysts log in with the password set by `veil analyst add`; each query is answered with
    differential privacy and charged to the analyst's budget.
    """
    from veil.server.app import make_ssl_context, serve
    from veil.server.limits import ServerLimits
    from veil.store.credentials import CredentialStore

    limits = ServerLimits(
        auth_timeout=auth_timeout,
        max_connections=max_connections,
        max_connections_per_analyst=max_connections_per_analyst,
        statement_timeout=statement_timeout,
        public_query_timeout=public_query_timeout,
        max_query_bytes=max_query_bytes,
        max_query_tokens=max_query_tokens,
        max_query_depth=max_query_depth,
        max_planning_seconds=max_planning_seconds,
        catalog_timeout=catalog_timeout,
        workers=workers,
        busy_workers=busy_workers,
        engine_threads=ServerLimits.default_engine_threads(processes) if engine_threads is None else engine_threads,
        engine_memory_mib=ServerLimits.default_engine_memory(processes) if engine_memory is None else engine_memory,
    )

    policy = load_policy(policy_path)
    if (tls_cert is None) != (tls_key is None):
        raise InputError("--tls-cert and --tls-key go together", hint="Pass both PEM files, or neither")
    ssl_context = make_ssl_context(tls_cert, tls_key) if tls_cert and tls_key else None
    logins = [a for a in CredentialStore.for_policy(policy).analysts() if a in policy.analysts]
    if not logins:
        click.echo("warning: no analyst can log in yet; run `veil analyst add --policy ... <name>`", err=True)
    if ssl_context is None and not allow_plaintext and not _is_loopback_host(host):
        click.echo(
            "warning: no TLS certificate, so connections from other machines will be refused "
            "(pass --tls-cert/--tls-key, or --allow-plaintext on a trusted network)",
            err=True,
        )

    def ready(bound: int) -> None:
        tls = "TLS available" if ssl_context else "no TLS"
        click.echo(f"veil serve: listening on {host}:{bound} ({tls}); analysts: {', '.join(logins) or 'none'}", err=True)
        click.echo(f'  psql "postgresql://{logins[0] if logins else "<analyst>"}@{host}:{bound}/veil"', err=True)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if processes > 1:
        from veil.server.workers import serve_processes

        click.echo(f"veil serve: building bounded copies, then starting {processes} worker processes", err=True)
        tls = (tls_cert, tls_key) if tls_cert and tls_key else None
        serve_processes(
            policy,
            processes=processes,
            host=host,
            port=port,
            tls=tls,
            allow_plaintext=allow_plaintext,
            limits=limits,
            ready=ready,
        )
        return
    serve(policy, host=host, port=port, ssl_context=ssl_context, allow_plaintext=allow_plaintext, limits=limits, ready=ready)


@cli.group()
def analyst() -> None:
    """Analyst logins for `veil serve`."""


@analyst.command("add")
@policy_option
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from the first line of stdin.")
@run_guarded
def analyst_add(policy_path: Path, name: str, password_stdin: bool) -> None:
    """Set NAME's password for `veil serve` (stores a SCRAM-SHA-256 verifier, never the password).

    NAME must be an analyst of the policy ([analysts.NAME]); running it again changes the password.
    """
    from veil.store.credentials import CredentialStore

    policy = load_policy(policy_path)
    policy.analyst(name)  # PolicyError with a suggestion if unknown
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt(f"Password for {name}", hide_input=True, confirmation_prompt=True)
    CredentialStore.for_policy(policy).set_password(name, password)
    click.echo(f"stored a SCRAM-SHA-256 verifier for {name} in {policy.ledger_path}", err=True)


@analyst.command("remove")
@policy_option
@click.argument("name")
@run_guarded
def analyst_remove(policy_path: Path, name: str) -> None:
    """Remove NAME's login (their budget and releases stay in the ledger)."""
    from veil.store.credentials import CredentialStore

    policy = load_policy(policy_path)
    removed = CredentialStore.for_policy(policy).remove(name)
    click.echo(f"removed the login of {name}" if removed else f"{name} had no login", err=True)
