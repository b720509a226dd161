#!/usr/bin/env bash
# Start or stop the local S3-compatible servers the backends tests run
# against, all on 127.0.0.1:
#
#   moto 5.2.5 (behind one global lock, scripts/moto_locked.py): the
#     conformant reference, and the compare-and-swap race;
#   s3rver 3.7.1: ignores If-None-Match and If-Match;
#   localbucket 1.2.1: honours If-None-Match, ignores If-Match;
#   nanio 0.1.7: verifies SigV4 signatures;
#   Ceph RGW 16.2 (Debian bookworm's radosgw, a one-node cluster: one
#     monitor, one memstore OSD, no manager): a real S3 service that refuses
#     a quoted `If-Match` even when the ETag is right and accepts the bare
#     one, ignores `If-Match` on DELETE, and answers a conditional PUT that
#     lost a race inside it `500 UnknownError` rather than 412; and a
#     second radosgw process on the same cluster (its own port and client
#     name, the same zone, pools, user and bucket), so that contenders can
#     reach one store through two gateways.
#
# usage: scripts/test-servers.sh start|stop
#
# `start` installs what is missing (a Python venv in .venv from PyPI, s3rver
# from npm in .ci/tmp/node, Debian's ceph-mon ceph-osd radosgw ceph-common
# and chromium (for the bench plot's test, not a server) and strace (for
# the fault sweep of migrate-dir, tests/migrate_faults.rs, nor a server)
# with apt-get, which runs `apt-get update` only when the install needs it),
# starts each server on a free port (Ceph's daemons as plain processes, no
# systemd, everything under .ci/tmp/servers/ceph: configuration, keyrings,
# data, logs), waits until each answers (the cluster, about 15 s from
# cold, while the others start), creates the test bucket (on RGW for an S3
# user with fixed test keys; the second gateway starts once they exist and
# must see the bucket) and, on moto, a second bucket with versioning on
# (bucket-lease-test-versioned), and writes .ci/tmp/servers.env:
#
#   . .ci/tmp/servers.env && cargo test -p bucket-lease-backends --all-features
#
# `start` begins with a `stop` and wipes .ci/tmp/servers, so it may be run
# twice in a row, or after a run that crashed and left pid files and data.
#
# `stop` ends the servers this script started, by their recorded pids, each
# checked against the start time recorded with it (a pid reused by another
# process since is left alone): SIGTERM, then SIGKILL after 5 s; Ceph's
# monitor last, so the OSD can tell it that it is going.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
tmp="$top/.ci/tmp"
run="$tmp/servers"
venv="$top/.venv"
node_dir="$tmp/node"
env_file="$tmp/servers.env"
bucket=bucket-lease-test
versioned_bucket=bucket-lease-test-versioned
nanio_key=nanio-test-key
nanio_secret=nanio-test-secret-0123456789
rgw_key=rgw-test-key
rgw_secret=rgw-test-secret-0123456789
# prometheus_client is no server either: tests/cli_metrics.rs reads the
# metrics files of `run --metrics-file` with its parser.
# Chromium is not a server: the test that looks at a bench plot
# (tests/cli_bench_plot.rs) opens it there. Nor is strace: the fault sweep
# of migrate-dir (tests/migrate_faults.rs) fails or kills the command at
# each of its file system calls with it.
debian_packages=(ceph-mon ceph-osd radosgw ceph-common chromium strace)
requirements=("moto[s3]==5.2.5" "flask" "flask-cors" "werkzeug" "waitress==3.0.2" "botocore" "localbucket==1.2.1" "nanio==0.1.7" "prometheus_client==0.26.0")

# start_time PID: the process's start time (clock ticks after boot, field
# 22 of /proc/PID/stat), empty when there is no such process.
start_time() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  # The command name (field 2) may hold spaces: count from the last ')'.
  set -- ${stat##*) }
  echo "${20}"
}

# running PID: the process exists and is not a zombie (one whose parent,
# here whatever adopted it, has not reaped it yet).
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  set -- ${stat##*) }
  [ "$1" != Z ]
}

# ours PIDFILE: the pid recorded in it, when that process is still the one
# this script started (same start time; a pid file without one, from an
# older version of this script, when the command line names this
# checkout); nothing otherwise.
ours() {
  local pid started
  read -r pid started < "$1" 2>/dev/null || true
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  if [ -n "$started" ]; then
    [ "$(start_time "$pid")" = "$started" ] && echo "$pid"
  else
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$top/" && echo "$pid"
  fi
  return 0
}

# end PIDFILE...: SIGTERM to each, wait up to 5 s for them all, SIGKILL to
# any left; remove the pid files.
end() {
  local pids=() pidfile pid
  for pidfile in "$@"; do
    [ -e "$pidfile" ] || continue
    pid=$(ours "$pidfile")
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for _ in $(seq 50); do
    local left=()
    for pid in ${pids[@]+"${pids[@]}"}; do
      running "$pid" && left+=("$pid")
    done
    pids=(${left[@]+"${left[@]}"})
    [ ${#pids[@]} -eq 0 ] && break
    sleep 0.1
  done
  for pid in ${pids[@]+"${pids[@]}"}; do kill -9 "$pid" 2>/dev/null || true; done
  rm -f "$@"
}

stop() {
  local others=() pidfile
  for pidfile in "$run"/*.pid; do
    [ -e "$pidfile" ] || continue
    [ "$pidfile" = "$run/ceph-mon.pid" ] || others+=("$pidfile")
  done
  end ${others[@]+"${others[@]}"}
  end "$run/ceph-mon.pid"
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
  install_debian_packages
}

# Debian's packages (Ceph, Chromium, strace), when one is missing: apt-get update only if the
# install fails without it (a stale or empty package list).
install_debian_packages() {
  local missing=() package
  for package in "${debian_packages[@]}"; do
    dpkg-query -W -f='${Status}\n' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
    -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}")
  echo "test-servers: installing ${missing[*]} with apt-get" >&2
  mkdir -p "$tmp"
  if ! "${apt[@]}" >"$tmp/apt.log" 2>&1; then
    echo "test-servers: the install needs a fresh package list: apt-get update" >&2
    "${sudo[@]}" apt-get update -q >>"$tmp/apt.log" 2>&1
    "${apt[@]}" >>"$tmp/apt.log" 2>&1 || {
      echo "test-servers: apt-get failed; its log:" >&2; cat "$tmp/apt.log" >&2; return 1
    }
  fi
}

free_port() {
  "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# launch NAME COMMAND...: start a server in the background, record its pid
# and its start time.
launch() {
  local name=$1; shift
  "$@" >"$run/$name.log" 2>&1 &
  local pid=$!
  echo "$pid $(start_time "$pid")" > "$run/$name.pid"
}

# wait_http NAME PORT [TRIES]: wait until the server answers any HTTP
# status, trying every 0.2 s (150 times unless told).
wait_http() {
  local name=$1 port=$2 tries=${3:-150}
  for _ in $(seq "$tries"); do
    if "$venv/bin/python" - "$port" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=1)
except urllib.error.HTTPError:
    pass
PY
    if [ -z "$(ours "$run/$name.pid")" ]; then
      echo "test-servers: $name exited; its log:" >&2; cat "$run/$name.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "test-servers: $name did not answer on port $port; its log:" >&2
  cat "$run/$name.log" >&2
  return 1
}

# create_bucket URL ACCESS_KEY SECRET [BUCKET [versioned]]: create the test
# bucket (or BUCKET) with botocore; `versioned` turns versioning on.
create_bucket() {
  "$venv/bin/python" - "$1" "$2" "$3" "${4:-$bucket}" "${5:-}" <<'PY'
import sys
import botocore.session
from botocore.config import Config
url, key, secret, bucket, versioned = sys.argv[1:6]
client = botocore.session.get_session().create_client(
    "s3", region_name="us-east-1", endpoint_url=url,
    aws_access_key_id=key, aws_secret_access_key=secret,
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
try:
    client.create_bucket(Bucket=bucket)
except client.exceptions.BucketAlreadyOwnedByYou:
    pass
if versioned:
    client.put_bucket_versioning(
        Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
PY
}

# head_bucket URL: the test bucket is there for the RGW user, asked
# again every 0.2 s for up to 30 s.
head_bucket() {
  "$venv/bin/python" - "$1" "$rgw_key" "$rgw_secret" "$bucket" <<'PY'
import sys, time
import botocore.session
from botocore.config import Config
url, key, secret, bucket = sys.argv[1:5]
client = botocore.session.get_session().create_client(
    "s3", region_name="us-east-1", endpoint_url=url,
    aws_access_key_id=key, aws_secret_access_key=secret,
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                  connect_timeout=2, read_timeout=5),
)
give_up = time.monotonic() + 30
while True:
    try:
        client.head_bucket(Bucket=bucket)
        break
    except Exception as e:
        if time.monotonic() > give_up:
            sys.exit(f"test-servers: {url} does not see bucket {bucket}: {e}")
        time.sleep(0.2)
PY
}

# start_ceph MON_PORT RGW_PORT RGW2_PORT: a one-node Ceph cluster on
# 127.0.0.1 as plain processes (a monitor, one memstore OSD: no disk, one
# copy of each object; no manager), and radosgw on RGW_PORT, every file
# under $run/ceph. Returns once the cluster is made and its daemons
# started; wait_http tells when RGW answers. The second gateway,
# client.rgw2 on RGW2_PORT, is configured here and started by ready_rgw.
start_ceph() {
  local mon_port=$1 rgw_port=$2 rgw2_port=$3 dir="$run/ceph"
  mkdir -p "$dir/mon-a" "$dir/osd-0" "$dir/run"
  local fsid osd_uuid osd_key
  fsid=$(cat /proc/sys/kernel/random/uuid)
  cat > "$dir/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
log file = $dir/\$name.log
log to stderr = false
err to stderr = true
auth allow insecure global id reclaim = false
mon data = $dir/mon-\$id
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
mon max pg per osd = 1000
osd data = $dir/osd-\$id
osd objectstore = memstore
memstore device bytes = 1073741824
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
osd mon shutdown timeout = 1
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
# Virtual-hosted requests too, on bucket-lease-test.localhost (with
# s3.localhost here, a request with Host localhost is refused NoSuchBucket).
rgw dns name = localhost
rgw thread pool size = 32
rgw data = $dir/rgw
# The second gateway: another client of the same cluster, in the same
# (default) zone, on the same pools.
[client.rgw2]
rgw frontends = beast endpoint=127.0.0.1:$rgw2_port
rgw dns name = localhost
rgw thread pool size = 32
rgw data = $dir/rgw2
CONF
  local conf=(-c "$dir/ceph.conf")
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' \
    --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
  local client
  for client in rgw rgw2; do
    ceph-authtool "$dir/keyring" --gen-key -n "client.$client" --cap mon 'allow rw' \
      --cap osd 'allow rwx' >/dev/null
  done
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon "${conf[@]}" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring" \
    >"$dir/mkfs.log" 2>&1
  launch ceph-mon ceph-mon "${conf[@]}" -f -i a

  # The OSD: registered with the monitor (which the command waits for),
  # then its memstore made without asking the monitor for configuration.
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  osd_key=$(ceph-authtool --gen-print-key)
  printf '{"cephx_secret": "%s"}\n' "$osd_key" > "$dir/osd-0/secret.json"
  ceph "${conf[@]}" --connect-timeout 60 osd new "$osd_uuid" -i "$dir/osd-0/secret.json" \
    >>"$dir/mkfs.log" 2>&1
  ceph-authtool --create-keyring "$dir/osd-0/keyring" -n osd.0 --add-key "$osd_key" >/dev/null
  ceph-osd "${conf[@]}" -i 0 --mkfs --osd-uuid "$osd_uuid" --no-mon-config \
    --keyring "$dir/osd-0/keyring" >>"$dir/mkfs.log" 2>&1
  launch ceph-osd ceph-osd "${conf[@]}" -f -i 0 --keyring "$dir/osd-0/keyring"
  # radosgw makes its pools and zone once the OSD is up, then listens.
  launch rgw radosgw "${conf[@]}" -f -n client.rgw
}

# ready_rgw RGW_PORT RGW2_PORT: once RGW answers, its S3 user with the
# fixed test keys and the test bucket; then the second gateway (started
# only now, so that it never races the first to make the zone and its
# pools), ready once it answers and sees the bucket.
ready_rgw() {
  local port=$1 port2=$2 dir="$run/ceph"
  wait_http rgw "$port" 600 || {
    echo "test-servers: the Ceph logs are in $dir" >&2; tail -n 20 "$dir"/*.log >&2; return 1
  }
  radosgw-admin -c "$dir/ceph.conf" user create --uid=bucket-lease-test \
    --display-name="bucket-lease tests" --access-key="$rgw_key" \
    --secret-key="$rgw_secret" >"$dir/user.log" 2>&1 || {
    echo "test-servers: radosgw-admin user create failed:" >&2; cat "$dir/user.log" >&2; return 1
  }
  create_bucket "http://127.0.0.1:$port" "$rgw_key" "$rgw_secret"
  launch rgw2 radosgw -c "$dir/ceph.conf" -f -n client.rgw2
  wait_http rgw2 "$port2" 300 && head_bucket "http://127.0.0.1:$port2" || {
    echo "test-servers: the second gateway is not ready; the Ceph logs are in $dir" >&2
    tail -n 20 "$dir/client.rgw2.log" >&2; return 1
  }
}

start() {
  stop
  install
  rm -rf "$run"
  mkdir -p "$run/s3rver-data" "$run/localbucket-data" "$run/nanio-data"

  local moto_port s3rver_port localbucket_port nanio_port mon_port rgw_port rgw2_port
  # Ceph first: it takes longest to come up, and waits while the others
  # start.
  mon_port=$(free_port)
  rgw_port=$(free_port)
  rgw2_port=$(free_port)
  start_ceph "$mon_port" "$rgw_port" "$rgw2_port"
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
  create_bucket "http://127.0.0.1:$moto_port" test-key test-secret "$versioned_bucket" versioned
  create_bucket "http://127.0.0.1:$localbucket_port" test-key test-secret
  create_bucket "http://127.0.0.1:$nanio_port" "$nanio_key" "$nanio_secret"
  ready_rgw "$rgw_port" "$rgw2_port"

  cat > "$env_file" <<ENV
export BUCKET_LEASE_PYTHON='$venv/bin/python'
export BUCKET_LEASE_TEST_BUCKET='$bucket'
export BUCKET_LEASE_TEST_VERSIONED_BUCKET='$versioned_bucket'
export BUCKET_LEASE_TEST_MOTO_URL='http://127.0.0.1:$moto_port'
export BUCKET_LEASE_TEST_S3RVER_URL='http://127.0.0.1:$s3rver_port'
export BUCKET_LEASE_TEST_LOCALBUCKET_URL='http://127.0.0.1:$localbucket_port'
export BUCKET_LEASE_TEST_NANIO_URL='http://127.0.0.1:$nanio_port'
export BUCKET_LEASE_TEST_NANIO_ACCESS_KEY='$nanio_key'
export BUCKET_LEASE_TEST_NANIO_SECRET_KEY='$nanio_secret'
export BUCKET_LEASE_TEST_NANIO_DATA='$run/nanio-data'
export BUCKET_LEASE_TEST_RGW_URL='http://127.0.0.1:$rgw_port'
export BUCKET_LEASE_TEST_RGW2_URL='http://127.0.0.1:$rgw2_port'
export BUCKET_LEASE_TEST_RGW_ACCESS_KEY='$rgw_key'
export BUCKET_LEASE_TEST_RGW_SECRET_KEY='$rgw_secret'
ENV
  echo "test-servers: running; . $env_file to use them" >&2
}

case "${1:-}" in
  start)
    # A start that fails ends what it started.
    trap 'status=$?; [ "$status" -eq 0 ] || stop; exit "$status"' EXIT
    start
    ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
