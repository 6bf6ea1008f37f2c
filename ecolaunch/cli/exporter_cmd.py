"""``ecolaunch exporter``: serve this host's metrics over HTTP for Prometheus, for labs without node_exporter.

The metrics are :mod:`ecolaunch.admin.metrics`'s one registry, read afresh at every scrape; the server is
prometheus-client's (``/metrics``, in a thread). SIGTERM or Ctrl-C stops it: exit 143 or 130.
"""

from __future__ import annotations

import signal
import socket

import click

from ecolaunch.cli.command import Command, Failed
from ecolaunch.cli.stopsignals import StopSignals
from ecolaunch.config import ENV_POLICY_FILE, ENV_SIMULATE, ENV_STATE_DIR
from ecolaunch.errors import with_hint

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
DEFAULT_ADDR = "127.0.0.1"


@click.command(cls=Command)
@click.option("--port", type=click.IntRange(0, 65535), required=True,
              help="the TCP port to serve on (0: any free port, named when it starts)")
@click.option("--addr", default=DEFAULT_ADDR, show_default=True,
              help="the address to serve on: 0.0.0.0 (or ::) for every interface, so that the lab's Prometheus "
              "reaches it")
@click.option("-v", "--verbose", is_flag=True, help="log at INFO")
@click.pass_context
def exporter(ctx: click.Context, port: int, addr: str, verbose: bool) -> None:
    # lazy: registering the subcommands loads every cli module; the exporter's load only when `ecolaunch exporter` runs
    from prometheus_client import start_http_server

    from ecolaunch.admin.metrics import registry  # lazy: as above
    from ecolaunch.cli.logs import stderr_logging  # lazy: as above
    from ecolaunch.launch.exitcodes import from_signal  # lazy: as above
    from ecolaunch.runtime import open_gpus, resolve  # lazy: as above
    from ecolaunch.state.store import StateStore  # lazy: as above

    restore_logging = stderr_logging("ecolaunch exporter", verbose)
    try:
        with StopSignals(_STOP_SIGNALS) as stop:
            environment, rules = resolve()
            backend = open_gpus(environment)
            try:
                metrics = registry(StateStore(environment.state_dir, group=rules.state_group), backend)
                try:
                    server, _ = start_http_server(port, addr, registry=metrics)
                except socket.gaierror as e:
                    raise click.BadParameter(with_hint(f"{addr!r} is no address of this host ({e.strerror})",
                                                       f"give an IP address: {DEFAULT_ADDR}, 0.0.0.0 or ::"),
                                             param_hint="'--addr'") from None
                except OSError as e:
                    raise Failed(f"cannot serve on {addr} port {port}: {e.strerror or e}",
                                 hint="choose another --port (0 picks a free one), or stop what serves there") from e
                host, bound = server.server_address[:2]
                where = f"[{host}]" if ":" in host else host
                click.echo(f"ecolaunch exporter: serving http://{where}:{bound}/metrics for {environment.state_dir} on "
                           f"{backend.kind} GPUs", err=True)
                stop.wait()
                server.shutdown()
                server.server_close()
            finally:
                backend.close()
            click.echo(f"ecolaunch exporter: stopped ({signal.Signals(stop.received[0]).name})", err=True)
            ctx.exit(from_signal(stop.received[0]))
    finally:
        restore_logging()


exporter.help = f"""Serve this host's metrics for Prometheus at http://ADDR:PORT/metrics: per-GPU power, power
limit, energy, utilization and memory, labelled with the job and user on each GPU; job counts and the queue's
length.

For labs without node_exporter (with it, use `ecolaunch agent --textfile`); docs/accounting.md has the scrape
config. Reads {ENV_STATE_DIR}, {ENV_SIMULATE} and {ENV_POLICY_FILE} like the launcher. SIGTERM or Ctrl-C stops it
(exit 143 or 130)."""
