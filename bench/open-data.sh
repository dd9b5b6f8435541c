#!/usr/bin/env bash
# Open Mining Data API against nginx serving the same bytes as static files, side by side in
# one run (shared/TARGETS.md): wrk, keep-alive, on /v1/miners and a filtered /v1/error-codes
# page. Prints req/s and p99 for both and the ratios, then the service's RSS/PSS with every
# dataset loaded. It measures; it asserts nothing.
#
#   bench/open-data.sh                      # builds the release binary first
#   OPEN_DATA_BIN=path/to/svcos-open-data DURATION=10s CONNECTIONS=32 ROUNDS=2 bench/open-data.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
command -v nginx >/dev/null || { echo "nginx is not installed" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed" >&2; exit 1; }
if [ -z "${OPEN_DATA_BIN:-}" ]; then
  cargo build --release -p svcos-open-data >&2
  target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  OPEN_DATA_BIN="$target_dir/release/svcos-open-data"
fi

tmp=$(mktemp -d)
# nginx workers run as an unprivileged user when started as root: the files must be readable.
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { for _ in $(seq 100); do curl -fs -o /dev/null "$1" && return 0; sleep 0.1; done; echo "$1 not up" >&2; exit 1; }

svc_port=$(free_port)
"$OPEN_DATA_BIN" serve --offline --bind "127.0.0.1:$svc_port" --db "$tmp/open-data.sqlite" 2>"$tmp/svc.log" &
svc_pid=$!
pids+=("$svc_pid")
wait_up "http://127.0.0.1:$svc_port/v1/catalog"

# The same bytes for nginx, as files.
mkdir -p "$tmp/www/v1"
curl -fs "http://127.0.0.1:$svc_port/v1/miners" -o "$tmp/www/v1/miners.json"
curl -fs "http://127.0.0.1:$svc_port/v1/error-codes?manufacturer=svcos&per_page=20&page=2" -o "$tmp/www/v1/error-codes-page.json"

ngx_port=$(free_port)
mkdir -p "$tmp/nginx/logs"
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes auto;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  server {
    listen 127.0.0.1:$ngx_port;
    root $tmp/www;
    default_type application/json;
  }
}
EOF
nginx -e "$tmp/nginx/logs/error.log" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' 2>"$tmp/nginx/stderr" &
pids+=("$!")
wait_up "http://127.0.0.1:$ngx_port/v1/miners.json" || { cat "$tmp/nginx/stderr" "$tmp/nginx/logs/error.log" >&2; exit 1; }

ngx_workers=$(pgrep -P "$(cat "$tmp/nginx/nginx.pid")" | tr '\n' ' ')
cmp <(curl -fs "http://127.0.0.1:$svc_port/v1/miners") <(curl -fs "http://127.0.0.1:$ngx_port/v1/miners.json")

# CPU ticks (user + system, 1/CLK_TCK s) of the given processes, all their threads.
cpu_ticks() {
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  echo "$t"
}

# wrk's summary plus the server's CPU per request → "req_per_s p99_ms non2xx cpu_us_per_req".
# The CPU per request is the figure a busy machine does not distort: req/s of both servers
# swings with whatever else runs, the CPU each one spends on a request hardly does.
run_wrk() {
  local url=$1 out before after
  shift
  before=$(cpu_ticks "$@")
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url")
  after=$(cpu_ticks "$@")
  python3 - "$out" "$((after - before))" "$(getconf CLK_TCK)" <<'PY'
import re, sys
out, ticks, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
total = int(re.search(r"(\d+) requests in", out).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
p99 = float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{rps:.0f} {p99:.3f} {errs.group(1) if errs else 0} {ticks / hz * 1e6 / max(total, 1):.1f}")
PY
}

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); wrk -t$THREADS -c$CONNECTIONS -d$DURATION, keep-alive"
printf '%-34s %-8s %10s %9s %6s %10s\n' route server req/s p99_ms non2xx cpu_us/req
for round in $(seq "$ROUNDS"); do
  for pair in "/v1/miners|/v1/miners.json" \
              "/v1/error-codes?manufacturer=svcos&per_page=20&page=2|/v1/error-codes-page.json"; do
    svc_path=${pair%%|*}
    ngx_path=${pair#*|}
    read -r n_rps n_p99 n_err n_cpu < <(run_wrk "http://127.0.0.1:$ngx_port$ngx_path" $ngx_workers)
    read -r s_rps s_p99 s_err s_cpu < <(run_wrk "http://127.0.0.1:$svc_port$svc_path" "$svc_pid")
    printf '%-34s %-8s %10s %9s %6s %10s\n' "$svc_path" nginx "$n_rps" "$n_p99" "$n_err" "$n_cpu" "$svc_path" open-data "$s_rps" "$s_p99" "$s_err" "$s_cpu"
    python3 -c "print(f'round $round: req/s ratio {$s_rps/$n_rps:.2f} x nginx (target >= 0.7), p99 ratio {$s_p99/$n_p99:.2f} x nginx (target <= 2), CPU per request {$s_cpu/$n_cpu:.2f} x nginx')"
  done
done

rss=$(awk '/^VmRSS/ {print $2}' "/proc/$svc_pid/status")
pss=$(awk '/^Pss:/ {print $2}' "/proc/$svc_pid/smaps_rollup")
echo "svcos-open-data memory after the runs (all datasets loaded, answers cached): RSS ${rss} kB, PSS ${pss} kB"
