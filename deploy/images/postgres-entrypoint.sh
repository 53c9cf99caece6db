#!/bin/sh
# Entry point of the locally built PostgreSQL image (deploy/images/build.sh). It
# honours the part of the official image's contract docker-compose.yml uses:
# POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB create the cluster in $PGDATA
# on first start; afterwards they are ignored.
set -eu

if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set to create the database}"
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    # Inside the container (the socket) no password; over the network, always one.
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        printf 'CREATE DATABASE "%s" OWNER "%s";\n' "$db" "$user" | postgres --single -j -D "$PGDATA" postgres >/dev/null
    fi
    echo "created database $db for $user in $PGDATA" >&2
fi

if [ "${1:-}" = postgres ]; then
    shift
    exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
