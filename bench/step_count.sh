#!/usr/bin/env bash
# Instructions per durable step of the harness on SQLite (PG=1: on a PostgreSQL database
# made for the run on the local server, dropped after), from bench/ledger_cost.py's
# callgrind parts: the decision ledger off and on, every thread of the process and the
# main thread alone, and the ledger's part (main thread). The quick count to compare two
# versions of the code with: each version's checkout in turn, on the same machine.
#
#     bash bench/step_count.sh [CHECKOUT]      (default: this script's checkout)
#
# A minute or three under valgrind. The hash seed is fixed, so two runs of the same code
# agree within about 0.3% (bench/instructions.py says why the parts are comparable).
set -euo pipefail
REPO=$(cd "${1:-$(dirname "$0")/..}" && pwd)
OUT=$(mktemp -d /tmp/stepcount.XXXX)
D=$(mktemp -d)
export DEBUG=0 SECRET_KEY=$(printf 'b%.0s' {1..64}) HARNESS_VAR_DIR=$D PYTHONHASHSEED=0 HARNESS_VERIFY_FOLD=0
if [ "${PG:-0}" = 1 ]; then
  DB=stepcount_$$; psql -q -h 127.0.0.1 -U postgres -c "CREATE DATABASE $DB" >/dev/null
  export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
  trap 'psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null; rm -rf $D $OUT' EXIT
else
  export DATABASE_URL=sqlite:///$D/harness.sqlite3
  trap 'rm -rf $D $OUT' EXIT
fi
PY=$(python3 -c 'import sys; print(sys.executable)')
cd "$REPO"
python3 bench/ledger_cost.py --prepare >/dev/null
(cd $OUT && valgrind --tool=callgrind --zero-before=_PyEval_CallTracing --dump-after=_PyEval_CallTracing "$PY" "$REPO/bench/ledger_cost.py" --once-steps 20 > $OUT/log 2>&1) || { tail -30 $OUT/log; exit 1; }
python3 - "$OUT" <<'PY'
import glob, re, subprocess, sys
out = sys.argv[1]
dumps = sorted(glob.glob(f"{out}/callgrind.out.*.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
def counts(path):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True).stdout
    total = int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", text).group(1).replace(",", ""))
    main = max(int(m.group(1).replace(",", "")) for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+\S*ceval\.c:_PyEval_CallTracing\b", text, re.M))
    return total, main
c = [counts(p) for p in dumps]
# dumps: 1-2 the short parts (dropped), 3 off N=20, 4 off 2N, 5 on N, 6 on 2N
for name, (a, b) in (("ledger off", (2, 3)), ("ledger on ", (4, 5))):
    print(f"{name}: all threads {(c[b][0]-c[a][0])/20:,.0f}  main thread {(c[b][1]-c[a][1])/20:,.0f} per step")
print(f"ledger part (main thread): {((c[5][1]-c[4][1])-(c[3][1]-c[2][1]))/20:,.0f}")
PY
