#!/usr/bin/env bash
# promoter quickstart: one promotion from start to end, in a scratch directory.
#
#   make venv                      # once: creates .venv with promoter installed
#   scripts/quickstart.sh [DIR]    # DIR: scratch directory (default: a new one in /tmp)
#
# It creates its own git repository (DIR/project) and an executor's clone of it
# (DIR/executor), starts a daemon on a free loopback port guarding DIR/project, and then,
# as the orchestrator and the executor would: registers a grant, mints an executor
# token, builds and submits a bundle, sets the lease, runs a preflight, promotes, and
# shows the result. The daemon is stopped on exit; its log is DIR/daemon.log.
# Nothing outside DIR is written.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$ROOT/.venv/bin:$PATH"          # promoter and its python live in .venv/bin
command -v promoter >/dev/null || { echo "run 'make venv' first" >&2; exit 78; }

DIR=${1:-$(mktemp -d /tmp/promoter-quickstart.XXXXXX)}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
PROJECT=$DIR/project                          # the person's worktree promoter guards
EXECUTOR=$DIR/executor                        # the executor's own clone, where it edits
STATE=$DIR/state                              # promoter's state directory
ORCH_TOKEN_FILE=$STATE/credentials/orchestrator.token
OPERATOR_TOKEN_FILE=$STATE/credentials/operator.token
step() { printf '\n== %s\n' "$*"; }
if [ -e "$PROJECT" ] || [ -e "$STATE" ]; then
  echo "$DIR already holds a quickstart: pass a new or empty directory" >&2
  exit 64
fi

step "a scratch repository and an executor's clone of it"
git init -q -b main "$PROJECT"
mkdir -p "$PROJECT/src"
printf 'def greet(name):\n    return "hello " + name\n' > "$PROJECT/src/app.py"
git -C "$PROJECT" add -A
git -C "$PROJECT" -c user.name=quickstart -c user.email=quickstart@localhost commit -q -m initial
git clone -q "$PROJECT" "$EXECUTOR"
echo "$PROJECT at $(git -C "$PROJECT" rev-parse --short HEAD)"

step "the daemon, on a free loopback port"
promoter db upgrade --state-dir "$STATE"
# it records itself in DIR/config, never in the person's ~/.config/promoter: a daemon
# stopped when the script ends must not become the one the person's CLI reaches
exec 3< <(XDG_CONFIG_HOME=$DIR/config exec promoter serve --state-dir "$STATE" \
  --host 127.0.0.1 --port 0 --repo "quickstart=$PROJECT" --log-format text 2>&1)
DAEMON_PID=$!
trap 'kill "$DAEMON_PID" 2>/dev/null || true; wait "$DAEMON_PID" 2>/dev/null || true' EXIT
while IFS= read -r line <&3; do          # wait for the announcement, not for a timer
  echo "$line" >> "$DIR/daemon.log"
  case $line in
    "promoter: ready on "*) export PROMOTER_URL=${line#promoter: ready on }; break ;;
  esac
done
[ -n "${PROMOTER_URL:-}" ] || { cat "$DIR/daemon.log" >&2; echo "the daemon did not start" >&2; exit 70; }
cat <&3 >> "$DIR/daemon.log" &          # keep draining the daemon's log into the file
echo "daemon at $PROMOTER_URL (pid $DAEMON_PID, log $DIR/daemon.log)"

step "orchestrator: a grant for run_quick to change src/**"
promoter grant create --repo quickstart --grant-id grt_quick1 --run run_quick \
  --workflow wf_quick --stage implement --allow "src/**:create,modify,delete" \
  --token-file "$ORCH_TOKEN_FILE" --out "$DIR/grant.json"
EXECUTOR_TOKEN=$(promoter token mint run_quick --token-file "$ORCH_TOKEN_FILE")

step "executor: edit its clone, build, upload and submit the bundle"
printf 'def greet(name):\n    return f"hello, {name}!"\n' > "$EXECUTOR/src/app.py"
mkdir -p "$EXECUTOR/src/util"
printf 'GREETING = "hello"\n' > "$EXECUTOR/src/util/consts.py"
PROMOTER_TOKEN=$EXECUTOR_TOKEN promoter bundle build --worktree "$EXECUTOR" \
  --grant "$DIR/grant.json" --out "$DIR/bundle.json" --submit
BUNDLE_ID=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["bundle_id"])' \
  "$DIR/bundle.json")

step "orchestrator: the lease, a preflight, the promotion"
promoter lease set wf_quick implement --run run_quick --fence 1 --token-file "$ORCH_TOKEN_FILE"
promoter preflight "$BUNDLE_ID" --fence 1 --token-file "$ORCH_TOKEN_FILE"
promoter promote "$BUNDLE_ID" --wait --token-file "$ORCH_TOKEN_FILE" | tee "$DIR/promote.txt"
OPERATION_ID=$(sed -n 's/^operation \(op_[0-9a-f]*\) .*/\1/p' "$DIR/promote.txt")

step "the worktree now (promoter never commits: the changes wait for the person)"
git -C "$PROJECT" status --short
cat "$PROJECT/src/app.py"

step "operator: the operation, and the daemon's metrics"
promoter ops show "$OPERATION_ID" --token-file "$OPERATOR_TOKEN_FILE"
curl -s --noproxy '*' "$PROMOTER_URL/metrics" | grep '^promoter_promotions_total'
echo
echo "quickstart done: operation $OPERATION_ID completed in $PROJECT"
