#!/usr/bin/env bash
# Start or stop the local S3-compatible servers the backends tests run
# against, all on 127.0.0.1:
#
#   moto 5.2.5 (behind one global lock, scripts/moto_locked.py): the
#     conformant reference, and the compare-and-swap race;
#   s3rver 3.7.1: ignores If-None-Match and If-Match;
#   localbucket 1.2.1: honours If-None-Match, ignores If-Match;
#   nanio 0.1.7: verifies SigV4 signatures.
#
# usage: scripts/test-servers.sh start|stop
#
# `start` installs what is missing (a Python venv in .venv from PyPI, s3rver
# from npm in .ci/tmp/node), starts each server on a free port, waits until
# each answers, creates the test bucket, and writes .ci/tmp/servers.env:
#
#   . .ci/tmp/servers.env && cargo test -p bucket-lease-backends --all-features
#
# `stop` ends the servers this script started (by their recorded pids).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
tmp="$top/.ci/tmp"
run="$tmp/servers"
venv="$top/.venv"
node_dir="$tmp/node"
env_file="$tmp/servers.env"
bucket=bucket-lease-test
nanio_key=nanio-test-key
nanio_secret=nanio-test-secret-0123456789
requirements=("moto[s3]==5.2.5" "flask" "flask-cors" "werkzeug" "waitress==3.0.2" "botocore" "localbucket==1.2.1" "nanio==0.1.7")

stop() {
  for pidfile in "$run"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
  rm -f "$env_file"
}

install() {
  local stamp="$venv/.bucket-lease-requirements"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${requirements[*]}" ]; then
    echo "test-servers: installing ${requirements[*]} into .venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${requirements[@]}"
    echo "${requirements[*]}" > "$stamp"
  fi
  if [ ! -f "$node_dir/node_modules/s3rver/package.json" ]; then
    echo "test-servers: installing s3rver@3.7.1 into .ci/tmp/node" >&2
    mkdir -p "$node_dir"
    (cd "$node_dir" && npm install --silent --no-audit --no-fund --no-save s3rver@3.7.1 >/dev/null)
  fi
}

free_port() {
  "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# launch NAME COMMAND...: start a server in the background, record its pid.
launch() {
  local name=$1; shift
  "$@" >"$run/$name.log" 2>&1 &
  echo $! > "$run/$name.pid"
}

# wait_http NAME PORT: wait until the server answers any HTTP status.
wait_http() {
  local name=$1 port=$2
  for _ in $(seq 150); do
    if "$venv/bin/python" - "$port" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1)
except urllib.error.HTTPError:
    pass
PY
    if ! kill -0 "$(cat "$run/$name.pid")" 2>/dev/null; then
      echo "test-servers: $name exited; its log:" >&2; cat "$run/$name.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "test-servers: $name did not answer on port $port; its log:" >&2
  cat "$run/$name.log" >&2
  return 1
}

# create_bucket URL ACCESS_KEY SECRET: create the test bucket with botocore.
create_bucket() {
  "$venv/bin/python" - "$1" "$2" "$3" "$bucket" <<'PY'
import sys
import botocore.session
from botocore.config import Config
url, key, secret, bucket = sys.argv[1:5]
client = botocore.session.get_session().create_client(
    "s3", region_name="us-east-1", endpoint_url=url,
    aws_access_key_id=key, aws_secret_access_key=secret,
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
try:
    client.create_bucket(Bucket=bucket)
except client.exceptions.BucketAlreadyOwnedByYou:
    pass
PY
}

start() {
  stop
  install
  rm -rf "$run"
  mkdir -p "$run/s3rver-data" "$run/localbucket-data" "$run/nanio-data"

  local moto_port s3rver_port localbucket_port nanio_port
  moto_port=$(free_port)
  launch moto "$venv/bin/python" "$top/scripts/moto_locked.py" 127.0.0.1 "$moto_port"
  s3rver_port=$(free_port)
  launch s3rver node "$node_dir/node_modules/s3rver/bin/s3rver.js" \
    -d "$run/s3rver-data" -a 127.0.0.1 -p "$s3rver_port" --silent \
    --configure-bucket "$bucket"
  localbucket_port=$(free_port)
  launch localbucket "$venv/bin/localbucket" --host 127.0.0.1 --port "$localbucket_port" \
    "$run/localbucket-data"
  nanio_port=$(free_port)
  launch nanio env NANIO_ACCESS_KEY="$nanio_key" NANIO_SECRET_KEY="$nanio_secret" \
    "$venv/bin/nanio" serve --host 127.0.0.1 --port "$nanio_port" \
    --data-dir "$run/nanio-data" --no-access-log --log-level warning

  wait_http moto "$moto_port"
  wait_http s3rver "$s3rver_port"
  wait_http localbucket "$localbucket_port"
  wait_http nanio "$nanio_port"

  create_bucket "http://127.0.0.1:$moto_port" test-key test-secret
  create_bucket "http://127.0.0.1:$localbucket_port" test-key test-secret
  create_bucket "http://127.0.0.1:$nanio_port" "$nanio_key" "$nanio_secret"

  cat > "$env_file" <<ENV
export BUCKET_LEASE_PYTHON='$venv/bin/python'
export BUCKET_LEASE_TEST_BUCKET='$bucket'
export BUCKET_LEASE_TEST_MOTO_URL='http://127.0.0.1:$moto_port'
export BUCKET_LEASE_TEST_S3RVER_URL='http://127.0.0.1:$s3rver_port'
export BUCKET_LEASE_TEST_LOCALBUCKET_URL='http://127.0.0.1:$localbucket_port'
export BUCKET_LEASE_TEST_NANIO_URL='http://127.0.0.1:$nanio_port'
export BUCKET_LEASE_TEST_NANIO_ACCESS_KEY='$nanio_key'
export BUCKET_LEASE_TEST_NANIO_SECRET_KEY='$nanio_secret'
export BUCKET_LEASE_TEST_NANIO_DATA='$run/nanio-data'
ENV
  echo "test-servers: running; . $env_file to use them" >&2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
