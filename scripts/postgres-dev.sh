#!/usr/bin/env bash
# A throw-away PostgreSQL server for trying `milarun db ... --db postgresql+psycopg://...` and
# for the tests: Debian's server binaries, one data folder, a free port on 127.0.0.1 only,
# nothing in /etc and no service.
#
#   scripts/postgres-dev.sh up       initdb + start; prints the database URL on stdout
#   scripts/postgres-dev.sh down     stop the server, remove the folder
#   scripts/postgres-dev.sh status   the URL of the running server (exit 1: none)
#
# The folder is $MILARUN_POSTGRES_DEV (default ${TMPDIR:-/tmp}/milarun-postgres-dev). initdb
# refuses root: as root, the server runs as the user `postgres` (Debian's package makes it).
# Needs: apt-get install --no-install-recommends postgresql
set -euo pipefail

DIR="${MILARUN_POSTGRES_DEV:-${TMPDIR:-/tmp}/milarun-postgres-dev}"
ACTION="${1:-}"
DB=milarun

say() { echo "postgres-dev: $*" >&2; }
die() { say "error: $*"; exit 1; }

bindir() {  # the newest installed server's binaries
    local found
    found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [ -n "$found" ] && [ -x "$found/initdb" ] || die "no PostgreSQL server installed (apt-get install --no-install-recommends postgresql)"
    echo "$found"
}

as_owner() {  # run a server command as the folder's owner (postgres when we are root)
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

url() { echo "postgresql+psycopg://$(cat "$DIR/user")@127.0.0.1:$(cat "$DIR/port")/$DB"; }

up() {
    [ ! -e "$DIR/data/postmaster.pid" ] || die "a server already runs in $DIR ($(url)); 'down' first"
    local bin user port
    bin="$(bindir)"
    user="$([ "$(id -u)" = 0 ] && echo postgres || id -un)"
    id "$user" >/dev/null 2>&1 || die "no user $user to run the server as"
    rm -rf "$DIR"
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$DIR"
        as_owner test -w "$DIR" \
            || die "$user cannot reach $DIR: every parent folder must be searchable (chmod o+x)"
    fi
    port="$(free_port)"
    echo "$port" > "$DIR/port"
    echo "$user" > "$DIR/user"
    # trust on 127.0.0.1 and the socket only: a throw-away server, listening nowhere else
    as_owner "$bin/initdb" -D "$DIR/data" -U "$user" --auth=trust -E UTF8 >"$DIR/initdb.log" 2>&1 \
        || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
    as_owner "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >/dev/null || { cat "$DIR/server.log" >&2; die "the server did not start"; }
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$user" "$DB" \
        || die "createdb failed"
    url
}

down() {
    [ -d "$DIR" ] || { say "no server at $DIR"; return 0; }
    if [ -f "$DIR/data/postmaster.pid" ]; then
        as_owner "$(bindir)/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
}

status() {
    [ -f "$DIR/data/postmaster.pid" ] || { say "no server at $DIR"; exit 1; }
    url
}

case "$ACTION" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) die "usage: $0 up|down|status" ;;
esac
