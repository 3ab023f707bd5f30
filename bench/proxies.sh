# Sourced by the bench scripts that put nginx and HAProxy in front of a mock the same way
# (cpu-split.sh, stream_cpu.sh): one configuration for each, so that their figures compare.
#
# sluice_proxy WORK BIN LISTEN MOCK [SERVER_LINES]
#                                starts `BIN serve` (HTTP/1.1 upstream MOCK, access log off, the
#                                extra [server] lines); its pid in SLUICE_PID
# nginx_proxy WORK LISTEN MOCK   starts nginx (2 workers, HTTP/1.1 keep-alive pool to MOCK,
#                                proxy_buffering off, access_log off); its pid in WORK/nginx.pid
# haproxy_proxy WORK LISTEN MOCK starts HAProxy (http-reuse always); its pid in WORK/haproxy.pid
# WORK must be readable by nginx's workers (www-data): chmod 755.

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
