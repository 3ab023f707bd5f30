# Sourced by the bench scripts that put Sluice, nginx and HAProxy in front of a mock the same
# way (cpu-split.sh, stream_cpu.sh): one configuration for each, so that their figures compare.
#
# proxies_init NAME              a work dir /tmp/NAME.* readable by nginx's workers (WORK), four
#                                ports below the ephemeral range (MOCK GW NG HA), PIDS to kill
#                                and wait for at exit with nginx and HAProxy, and the dir removed
# start_proxies BIN [SERVER_LINES]
#                                Sluice on GW (its pid in GP), nginx on NG, HAProxy on HA, all in
#                                front of MOCK
# sluice_proxy WORK BIN LISTEN MOCK [SERVER_LINES]
#                                starts `BIN serve` (HTTP/1.1 upstream MOCK, access log off, the
#                                extra [server] lines); its pid in SLUICE_PID
# nginx_proxy WORK LISTEN MOCK   starts nginx (2 workers, HTTP/1.1 keep-alive pool to MOCK,
#                                proxy_buffering off, access_log off); its pid in WORK/nginx.pid
# haproxy_proxy WORK LISTEN MOCK starts HAProxy (http-reuse always); its pid in WORK/haproxy.pid
# WORK must be readable by nginx's workers (www-data): chmod 755.

proxies_init() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$WORK"   # nginx workers run as www-data
  PIDS=()
  trap proxies_cleanup EXIT
  local base=$((15000 + RANDOM % 15000))
  MOCK=127.0.0.1:$base
  GW=127.0.0.1:$((base + 1))
  NG=127.0.0.1:$((base + 2))
  HA=127.0.0.1:$((base + 3))
}

proxies_cleanup() {
  local p f
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in nginx.pid haproxy.pid; do [ -f "$WORK/$f" ] && kill "$(cat "$WORK/$f")" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

start_proxies() {
  sluice_proxy "$WORK" "$1" "$GW" "$MOCK" "${2:-}"
  GP=$SLUICE_PID
  PIDS+=("$GP")
  nginx_proxy "$WORK" "$NG" "$MOCK"
  haproxy_proxy "$WORK" "$HA" "$MOCK"
}

sluice_proxy() {
  local work=$1 bin=$2 listen=$3 mock=$4 extra=${5:-}
  cat > "$work/gw.toml" <<CONF
[server]
listen = "$listen"
admin_listen = "127.0.0.1:0"
access_log = "off"
$extra

[[upstream]]
name = "mock"
base_url = "http://$mock/v1"
protocol = "http1"

[[route]]
models = ["*"]
upstream = "mock"
CONF
  "$bin" serve --config "$work/gw.toml" >/dev/null 2>&1 &
  SLUICE_PID=$!
}

nginx_proxy() {
  local work=$1 listen=$2 mock=$3
  cat > "$work/nginx.conf" <<CONF
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  upstream mock { server $mock; keepalive 1024; }
  server {
    listen $listen;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
  nginx -c "$work/nginx.conf"
}

haproxy_proxy() {
  local work=$1 listen=$2 mock=$3
  cat > "$work/haproxy.cfg" <<CONF
global
  maxconn 4000
defaults
  mode http
  option http-no-delay
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend fe
  bind $listen
  default_backend be
backend be
  http-reuse always
  server s1 $mock
CONF
  haproxy -D -f "$work/haproxy.cfg" -p "$work/haproxy.pid"
}
