#!/usr/bin/env bash
# The dashboard end to end: a real braid-server serving a database with one
# finished job, rendered by headless Chromium; the DOM must list the job
# (its id, phase "done") and the baseline table.
#
#   tests/dashboard_e2e_test.sh BRAID_SERVER DASHBOARD_SEED
# Without Chromium it prints a SKIP line and exits with $BRAID_SKIP_CODE
# (0 when unset; ctest sets 77 with SKIP_RETURN_CODE 77). With
# BRAID_DASHBOARD_SCREENSHOT=/path.png it also saves a screenshot there.
set -euo pipefail

SERVER_BIN=${1:?usage: $0 BRAID_SERVER DASHBOARD_SEED}
SEED_BIN=${2:?usage: $0 BRAID_SERVER DASHBOARD_SEED}

CHROMIUM=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$(command -v "$c"); break; fi
done
if [[ -z "$CHROMIUM" ]]; then
  echo "SKIP: dashboard_e2e_test needs Chromium (Debian package 'chromium'); not found on PATH"
  exit "${BRAID_SKIP_CODE:-0}"
fi

TMP=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$TMP/server.log" || true; exit 1; }

JOB_ID=$("$SEED_BIN" "$TMP/braid.db")
[[ "$JOB_ID" =~ ^job-[0-9a-f]{16}$ ]] || fail "dashboard_seed printed '$JOB_ID'"
echo "seeded $JOB_ID"

TOKEN="e2e-client-token"
"$SERVER_BIN" --db "$TMP/braid.db" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --client-token "$TOKEN" --worker-token e2e-worker-token >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
PORT=""
for _ in $(seq 1 100); do
  PORT=$(sed -n 's/.*HTTP status on http:\/\/.* (port \([0-9]*\)).*/\1/p' "$TMP/server.log" | head -1)
  [[ -n "$PORT" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "braid-server exited"
  sleep 0.1
done
[[ -n "$PORT" ]] || fail "braid-server did not report its HTTP port"
URL="http://127.0.0.1:$PORT/?token=$TOKEN"

FLAGS=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$TMP/profile" --virtual-time-budget=5000)
"$CHROMIUM" "${FLAGS[@]}" --dump-dom "$URL" >"$TMP/dom.html" 2>"$TMP/chromium.log" ||
  fail "chromium failed: $(tail -5 "$TMP/chromium.log")"

check() {  # check DESCRIPTION REGEX
  grep -Eq -- "$2" "$TMP/dom.html" || { echo "--- DOM"; cat "$TMP/dom.html"; fail "DOM lacks $1"; }
  echo "ok: $1"
}
check "the job row" "<tr class=\"job[^\"]*\" data-job-id=\"$JOB_ID\"><td>$JOB_ID</td>"
check "the job's phase 'done'" "data-job-id=\"$JOB_ID\"><td>$JOB_ID</td><td>[^<]*</td><td class=\"phase phase-done\">done</td>"
check "the job in the detail section" "<span id=\"detail-id\" class=\"\">$JOB_ID</span>"
check "the baseline table's no_fusion row" "<tbody id=\"baselines\"><tr><td>no_fusion</td><td class=\"num\">[0-9.]+</td>"
check "braid's row in the baseline table" "<tr class=\"braid\"><td>braid \([^)]*\)</td><td class=\"num\">[0-9.]+</td>"
check "the FO bound row" "<td>fully overlapped bound \(FO\)</td><td class=\"num\">[0-9.]+</td>"
check "the timeline's task bars" "<svg id=\"timeline\"[^>]*>.*<rect "
if grep -q 'id="banner" style="display: block' "$TMP/dom.html"; then fail "the page shows an error banner"; fi

if [[ -n "${BRAID_DASHBOARD_SCREENSHOT:-}" ]]; then
  "$CHROMIUM" "${FLAGS[@]}" --user-data-dir="$TMP/profile2" --window-size=1280,1100 \
    --screenshot="$BRAID_DASHBOARD_SCREENSHOT" "$URL" >/dev/null 2>&1 || fail "screenshot failed"
  echo "screenshot: $BRAID_DASHBOARD_SCREENSHOT"
fi
echo "PASS: dashboard lists $JOB_ID (done) with its baseline table"
