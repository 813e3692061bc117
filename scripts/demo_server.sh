#!/usr/bin/env bash
# Part of `make demo`: start `veil serve` on the demo warehouse and show a SQL client answering through it.
set -euo pipefail
dir=${1:-demo}
bin=.venv/bin
if ! $bin/veil serve --help >/dev/null 2>&1; then
  echo "(veil serve is not installed in this build; skipping the SQL-client part of the demo)"
  exit 0
fi
port=$($bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export VEIL_DEMO_PASSWORD=demo-password
printf '%s\n' "$VEIL_DEMO_PASSWORD" | $bin/veil analyst add --policy "$dir/policy.toml" alice --password-stdin >/dev/null
$bin/veil serve --policy "$dir/policy.toml" --host 127.0.0.1 --port "$port" >"$dir/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  $bin/python -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)))" && break
  sleep 0.2
done
echo
echo "== veil serve is listening on 127.0.0.1:$port; a SQL client connects as alice =="
url="postgresql://alice:$VEIL_DEMO_PASSWORD@127.0.0.1:$port/veil?sslmode=disable"
if command -v psql >/dev/null 2>&1; then
  set -x
  psql "$url" -c "SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY sex"   # asked before: cached, free
  psql "$url" -c "SET veil.show_ci = on" -c "SELECT occupation, COUNT(*) AS n, AVG(hours_per_week) AS hours FROM people GROUP BY occupation ORDER BY n DESC LIMIT 5"
  psql "$url" -c "EXPLAIN SELECT MEDIAN(income) FROM people"
  psql "$url" -c "SELECT * FROM veil.budget"
  psql "$url" -c '\dt'
  set +x
else
  $bin/python - "$url" <<'PY'
import sys, psycopg
with psycopg.connect(sys.argv[1]) as con:
    for q in ("SELECT sex, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY sex", "SELECT * FROM veil.budget"):
        print(q); print(con.execute(q).fetchall())
PY
fi
