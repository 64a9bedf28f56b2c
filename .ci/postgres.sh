#!/usr/bin/env bash
# A private PostgreSQL server for normsearch: one cluster in a temporary folder, run by the
# `postgres` system user (created if missing; as a non-root user, by you), listening on 127.0.0.1
# on a free port, with a password-protected role `normsearch` and a database `normsearch`.
# PostgreSQL itself is installed from Debian's packages when initdb/pg_ctl are not found.
#
#   eval "$(.ci/postgres.sh start)"              # prints: export NORMSEARCH_TEST_PG_URL=postgresql://...
#                                                #         export NORMSEARCH_TEST_PG_DIR=/tmp/normsearch-pg.XXXXXX
#   .ci/postgres.sh stop    [DIR]                # stop the server and delete its folder
#   .ci/postgres.sh restart [DIR]                # restart it on the same port (the tests use this)
#   .ci/postgres.sh down|up [DIR]                # stop / start it, keeping its data (the tests use this)
#
# DIR defaults to $NORMSEARCH_TEST_PG_DIR. Only `export` lines go to stdout; messages go to stderr.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # runuser, useradd

say() { echo "postgres.sh: $*" >&2; }

bindir() {  # the folder of initdb/pg_ctl/psql: on PATH, else Debian's /usr/lib/postgresql/<version>/bin
    local d
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$d" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
    return 1
}

install_postgres() {
    if [ "$(id -u)" -ne 0 ]; then
        say "PostgreSQL is not installed (no initdb/pg_ctl); install it: sudo apt-get install -y postgresql"
        exit 1
    fi
    say "installing PostgreSQL from Debian's packages"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
}

as_pg() {  # run a command as the cluster's owner: `postgres` when we are root, else ourselves
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ours() {  # refuse to touch a folder this script did not make
    local dir=${1:-${NORMSEARCH_TEST_PG_DIR:-}}
    if [ -z "$dir" ] || [ ! -f "$dir/normsearch-pg" ]; then
        say "${dir:-(no folder given)} is not a server made by postgres.sh start (give its folder, or set NORMSEARCH_TEST_PG_DIR)"
        exit 1
    fi
    echo "$dir"
}

pgctl() {  # pg_ctl on the cluster in $1, then the rest of the arguments
    local dir=$1
    shift
    as_pg "$BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 "$@" >/dev/null
}

start() {
    BIN=$(bindir) || { install_postgres; BIN=$(bindir) || { say "no initdb/pg_ctl after installing"; exit 1; }; }
    if [ "$(id -u)" -eq 0 ] && ! id -u postgres >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    fi
    local dir port password
    dir=$(mktemp -d "${TMPDIR:-/tmp}/normsearch-pg.XXXXXX")
    # on any failure from here on: stop what was started and remove the folder
    trap 'pgctl "$dir" -m immediate stop 2>/dev/null || true; rm -rf "$dir"; say "could not start PostgreSQL"' EXIT
    touch "$dir/normsearch-pg"
    [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    password=$(python3 -c 'import secrets; print(secrets.token_hex(12))')

    as_pg "$BIN/initdb" -D "$dir/data" -U postgres -E UTF8 --auth-local=trust --auth-host=scram-sha-256 \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    # local socket: trust (for this script); TCP on 127.0.0.1: passwords (scram-sha-256), as initdb wrote
    as_pg tee -a "$dir/data/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
EOF
    pgctl "$dir" start || { cat "$dir/server.log" >&2; exit 1; }
    as_pg "$BIN/psql" -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >/dev/null <<EOF
CREATE ROLE normsearch LOGIN PASSWORD '$password';
CREATE DATABASE normsearch OWNER normsearch;
EOF
    trap - EXIT
    say "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $dir"
    echo "export NORMSEARCH_TEST_PG_URL=postgresql://normsearch:$password@127.0.0.1:$port/normsearch"
    echo "export NORMSEARCH_TEST_PG_DIR=$dir"
}

stop() {
    local dir
    dir=$(ours "${1:-}")
    BIN=$(bindir) || true
    if [ -n "${BIN:-}" ] && [ -f "$dir/data/postmaster.pid" ]; then
        pgctl "$dir" -m fast stop || pgctl "$dir" -m immediate stop || say "could not stop the server in $dir"
    fi
    rm -rf "$dir"
    say "stopped; removed $dir"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    start) start ;;
    stop) stop "${1:-}" ;;
    restart) dir=$(ours "${1:-}"); BIN=$(bindir); pgctl "$dir" -m fast restart ;;
    down) dir=$(ours "${1:-}"); BIN=$(bindir); pgctl "$dir" -m fast stop ;;
    up) dir=$(ours "${1:-}"); BIN=$(bindir); pgctl "$dir" start ;;
    *) echo "usage: $0 start | stop [DIR] | restart [DIR] | down [DIR] | up [DIR]" >&2; exit 2 ;;
esac
