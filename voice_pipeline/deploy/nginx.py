"""nginx in front of several ``voice-pipeline serve`` workers: the configuration text.

Pure: :func:`render_site` returns the ``http``-level part (the Upgrade map, the
upstream, the server) to drop into ``/etc/nginx/conf.d/``; :func:`render_standalone`
wraps it into a complete ``nginx.conf`` whose every path (pid, logs, temp folders) is
relative to nginx's prefix, so it runs anywhere, as root or not::

    python -m voice_pipeline.deploy.nginx --worker 127.0.0.1:8801 --worker 127.0.0.1:8802 \\
        --listen 8080 > DIR/nginx.conf
    nginx -p DIR -c nginx.conf -g 'daemon off;'

The choices, explained in docs/deployment.md: ``least_conn`` (a session is one
long-lived WebSocket, so open connections are the load; round robin would pile long
calls onto one worker), a shared ``zone`` (nginx's worker processes count the same
connections), the WebSocket upgrade headers, long read/send timeouts on /ws and
/twilio, no buffering, and the client's address in ``X-Forwarded-For``/``X-Real-IP``.
No sticky sessions: one WebSocket is one whole session, and a new connection may go
to any worker. ``/metrics`` is not proxied (each worker's counters are its own; scrape
the workers directly).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass

from voice_pipeline.errors import ConfigError

_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9.*_~-]+(?: [A-Za-z0-9.*_~-]+)*$")
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*(?: [A-Za-z_][A-Za-z0-9_.-]*)?$")

DEFAULT_SESSION_TIMEOUT_S = 3600

#: paths of the complete config, relative to nginx's prefix (``nginx -p DIR``)
PID_FILE = "nginx.pid"
ERROR_LOG = "error.log"
ACCESS_LOG = "access.log"
TEMP_DIRS = {
    "client_body_temp_path": "client_body_temp",
    "proxy_temp_path": "proxy_temp",
    "fastcgi_temp_path": "fastcgi_temp",
    "uwsgi_temp_path": "uwsgi_temp",
    "scgi_temp_path": "scgi_temp",
}


@dataclass(frozen=True, slots=True)
class NginxSite:
    """One balanced voice service: where nginx listens and the workers behind it."""

    #: ``host:port`` of each ``voice-pipeline serve`` worker (IPv6 in brackets)
    workers: tuple[str, ...]
    #: ``port`` or ``address:port`` nginx listens on
    listen: str = "8080"
    #: nginx ``server_name`` ("_" = any Host)
    server_name: str = "_"
    #: name of the upstream (also prefixes the Upgrade map's variable and the log format)
    upstream: str = "voice_pipeline"
    #: a /ws or /twilio connection with no byte either way for this long is closed by nginx
    #: (the workers ping every 20 s and the client streams audio, so only a dead peer hits it)
    session_timeout_s: int = DEFAULT_SESSION_TIMEOUT_S
    #: a worker that does not accept within this long is skipped for the next one
    connect_timeout_s: int = 5
    #: the access log (relative paths are relative to nginx's prefix)
    access_log: str = "/var/log/nginx/voice-pipeline.access.log"


def split_address(text: str, what: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); :class:`ConfigError` naming ``what`` if malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not _HOST.match(host):
        raise ConfigError(f"{what}: expected host:port (IPv6 as [addr]:port), got {text!r}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{what}: port must be 1-65535, got {text!r}")
    return host, int(port)


def validate(site: NginxSite) -> None:
    """Raise :class:`ConfigError` unless every field renders to a valid, unambiguous config."""
    if not site.workers:
        raise ConfigError("nginx: at least one worker is needed")
    seen: set[tuple[str, int]] = set()
    for worker in site.workers:
        address = split_address(worker, "nginx worker")
        if address in seen:
            raise ConfigError(f"nginx worker: {worker!r} is listed twice")
        seen.add(address)
    if site.listen.isdigit():
        if not 1 <= int(site.listen) <= 65535:
            raise ConfigError(f"nginx listen: port must be 1-65535, got {site.listen!r}")
    else:
        split_address(site.listen, "nginx listen")
    if not _SERVER_NAME.match(site.server_name):
        raise ConfigError(f"nginx server_name: invalid {site.server_name!r}")
    if not _NAME.match(site.upstream):
        raise ConfigError(f"nginx upstream: must be an identifier, got {site.upstream!r}")
    if site.session_timeout_s < 1 or site.connect_timeout_s < 1:
        raise ConfigError("nginx: timeouts must be >= 1 s")
    if not site.access_log or any(c in site.access_log for c in " ;{}'\"\n\\$"):
        raise ConfigError(f"nginx access_log: invalid path {site.access_log!r}")


def render_site(site: NginxSite) -> str:
    """The ``http``-level configuration: Upgrade map, upstream and server (for conf.d/)."""
    validate(site)
    up = site.upstream
    servers = "\n".join(f"    server {w} max_fails=1 fail_timeout=10s;" for w in site.workers)
    long = site.session_timeout_s
    return f"""\
# voice-pipeline: {len(site.workers)} worker(s) behind nginx (docs/deployment.md)

# WebSocket upgrade: pass the client's Upgrade header on, and "Connection: upgrade"
# only when there is one (plain requests get "close").
map $http_upgrade ${up}_connection {{
    default upgrade;
    ''      close;
}}

log_format {up} '$remote_addr [$time_local] "$request" $status $body_bytes_sent '
                'upstream=$upstream_addr time=$request_time';

upstream {up} {{
    # one WebSocket = one whole session: balance on open connections, not requests
    least_conn;
    # shared by nginx's worker processes, so they all count the same connections
    zone {up} 64k;
{servers}
}}

server {{
    listen {site.listen};
    server_name {site.server_name};
    access_log {site.access_log} {up};

    # for every proxied location (a location that set its own proxy_set_header would
    # lose all of these)
    proxy_http_version 1.1;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection ${up}_connection;
    # with the port: the workers compare a browser's Origin with it
    proxy_set_header Host $http_host;
    proxy_set_header X-Real-IP $remote_addr;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    proxy_set_header X-Forwarded-Proto $scheme;
    # audio is streamed: never hold it back in a buffer
    proxy_buffering off;
    proxy_connect_timeout {site.connect_timeout_s}s;

    # voice sessions (docs/protocol.md) and Twilio Media Streams: long-lived WebSockets
    location = /ws {{
        proxy_pass http://{up};
        proxy_read_timeout {long}s;
        proxy_send_timeout {long}s;
    }}
    location = /twilio {{
        proxy_pass http://{up};
        proxy_read_timeout {long}s;
        proxy_send_timeout {long}s;
    }}

    # answered by whichever worker is picked; a worker that refuses connections is
    # skipped (and rested for fail_timeout)
    location = /healthz {{
        proxy_pass http://{up};
        proxy_read_timeout 10s;
        access_log off;
    }}

    # per-worker counters: scrape each worker directly, not through the balancer
    location = /metrics {{
        return 404;
    }}

    # the demo page and its files
    location / {{
        proxy_pass http://{up};
        proxy_read_timeout 60s;
    }}
}}
"""


def render_standalone(
    site: NginxSite, *, user: str | None = None, worker_processes: int | None = None
) -> str:
    """A complete ``nginx.conf`` for ``nginx -p DIR -c nginx.conf``: the pid file, the logs
    and the temp folders are relative to DIR, so no system path is written. ``user`` only
    matters when nginx starts as root (its workers then switch to that user)."""
    if user is not None and not _USER.match(user):
        raise ConfigError(f"nginx user: invalid {user!r}")
    if worker_processes is not None and worker_processes < 1:
        raise ConfigError("nginx worker_processes: must be >= 1")
    body = render_site(site)
    procs = "auto" if worker_processes is None else str(worker_processes)
    user_line = f"user {user};\n" if user is not None else ""
    temps = "\n".join(f"    {key} {path};" for key, path in TEMP_DIRS.items())
    indented = "\n".join(f"    {line}" if line else "" for line in body.splitlines())
    return f"""\
# Complete nginx.conf; every relative path is under nginx's prefix:
#   nginx -p DIR -c nginx.conf -g 'daemon off;'
{user_line}worker_processes {procs};
pid {PID_FILE};
error_log {ERROR_LOG} warn;

events {{
    worker_connections 1024;
}}

http {{
{temps}

{indented}
}}
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m voice_pipeline.deploy.nginx",
        description="Print an nginx configuration that balances voice-pipeline serve workers "
        "(WebSocket upgrade, least_conn, long session timeouts). By default a complete "
        "nginx.conf whose paths are relative to nginx's prefix (nginx -p DIR -c nginx.conf); "
        "with --site only the http-level part, for /etc/nginx/conf.d/.",
    )
    p.add_argument(
        "--worker",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a voice-pipeline serve worker; repeat for each",
    )
    p.add_argument("--listen", default="8080", metavar="[ADDR:]PORT", help="default: %(default)s")
    p.add_argument("--server-name", default="_", metavar="NAME", help="default: %(default)s (any)")
    p.add_argument(
        "--session-timeout-s",
        type=int,
        default=DEFAULT_SESSION_TIMEOUT_S,
        metavar="S",
        help="close a /ws or /twilio connection silent this long (default: %(default)s)",
    )
    p.add_argument(
        "--site",
        action="store_true",
        help="print only the http-level part (map, upstream, server) for /etc/nginx/conf.d/",
    )
    p.add_argument(
        "--user", metavar="USER", help="complete config: the user nginx's workers run as if started as root"
    )
    p.add_argument(
        "--worker-processes", type=int, metavar="N", help="complete config: default auto (one per core)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.site and (args.user is not None or args.worker_processes is not None):
        parser.error("--user and --worker-processes belong to the complete config, not to --site")
    site = NginxSite(
        workers=tuple(args.worker),
        listen=args.listen,
        server_name=args.server_name,
        session_timeout_s=args.session_timeout_s,
    )
    try:
        if args.site:
            text = render_site(site)
        else:
            site = dataclasses.replace(site, access_log=ACCESS_LOG)
            text = render_standalone(site, user=args.user, worker_processes=args.worker_processes)
    except ConfigError as exc:
        parser.error(str(exc))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
