#!/usr/bin/env bash
# make demo: gpu-exporter on a SIMULATED node (the test suite's fake NVML H100s under load,
# real AMD/Intel sysfs captures; every series carries demo="true"), a local VictoriaMetrics
# scraping it, vmalert with the alert pack of alerts/, and Alertmanager as its notifier.
# All from the Debian packages, on loopback, data in a temporary folder. Ctrl-C stops
# everything this script started.
#
# Ports (override with the environment): DEMO_EXPORTER_PORT=9445 DEMO_VM_PORT=8428
# DEMO_VMALERT_PORT=8880 DEMO_ALERTMANAGER_PORT=9093; DEMO_SCRAPE_INTERVAL=5s.
# DEMO_EBPF=1 (as root, after scripts/setup-test-host.sh; needs gcc and g++) also runs the
# eBPF tests' fake CUDA workload under real uprobes, for the CUDA kernels dashboard.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$repo/.venv/bin/python}
exporter_bin=${GPU_EXPORTER:-$repo/.venv/bin/gpu-exporter}
exporter_port=${DEMO_EXPORTER_PORT:-9445}
vm_port=${DEMO_VM_PORT:-8428}
vmalert_port=${DEMO_VMALERT_PORT:-8880}
am_port=${DEMO_ALERTMANAGER_PORT:-9093}
interval=${DEMO_SCRAPE_INTERVAL:-5s}

for tool in victoria-metrics vmalert prometheus-alertmanager; do
  command -v "$tool" >/dev/null || { echo "demo: $tool is not installed (make system-deps)" >&2; exit 1; }
done

work=$(mktemp -d -t gpu-exporter-demo-XXXXXX)
pids=() names=()
stop() {
  trap - INT TERM EXIT
  echo "demo: stopping" >&2
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do  # up to 10 s for a clean shutdown, then SIGKILL
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap stop EXIT
# Ctrl-C is the way to end the demo: a clean stop, exit 0. SIGTERM from elsewhere is not.
trap 'exit 0' INT
trap 'exit 143' TERM

# A process in the background, its output in $work/NAME.log.
start() {  # name, the file for its standard output ("": its log too), command...
  local name=$1 out=$2 log="$work/$1.log"
  shift 2
  if [ -z "$out" ]; then "$@" >"$log" 2>&1 & else "$@" >"$out" 2>"$log" & fi
  pids+=($!) names+=("$name")
}

wait_http() {  # url, name, pid
  for _ in $(seq 1 300); do
    "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || { echo "demo: $2 exited; its log:" >&2; cat "$work/$2.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "demo: $2 did not start; its log:" >&2; cat "$work/$2.log" >&2; exit 1
}

# 1. the simulated node: fake NVML scenario + sysfs tree, and a load driver
fleet_args=()
[ "${DEMO_EBPF:-0}" = 1 ] && fleet_args+=(--ebpf)
start fleet "$work/fleet.env" env -C "$repo" "$py" -m tests.e2e.fleet "$work/fleet" \
  "${fleet_args[@]}"
for _ in $(seq 1 600); do grep -q '^EXPORTER_ARGS=' "$work/fleet.env" && break; sleep 0.1; done
grep -q '^EXPORTER_ARGS=' "$work/fleet.env" || { cat "$work/fleet.log" >&2; exit 1; }
# shellcheck disable=SC1091
source "$work/fleet.env"

# 2. the exporter
# shellcheck disable=SC2086
start exporter "" "$exporter_bin" --web.listen-address="127.0.0.1:$exporter_port" $EXPORTER_ARGS
wait_http "http://127.0.0.1:$exporter_port/metrics" exporter "${pids[-1]}"

# 3. VictoriaMetrics scraping it (job "gpu-exporter", as the alert pack expects)
cat >"$work/scrape.yml" <<YAML
scrape_configs:
  - job_name: gpu-exporter
    scrape_interval: $interval
    static_configs:
      - targets: ["127.0.0.1:$exporter_port"]
YAML
start victoria-metrics "" victoria-metrics -storageDataPath="$work/vm" \
  -httpListenAddr="127.0.0.1:$vm_port" -promscrape.config="$work/scrape.yml" \
  -retentionPeriod=1d -search.latencyOffset=5s -loggerLevel=WARN
wait_http "http://127.0.0.1:$vm_port/health" victoria-metrics "${pids[-1]}"

# 4. Alertmanager (vmalert's notifier) and vmalert with the rule files of alerts/
cat >"$work/alertmanager.yml" <<YAML
route: {receiver: "null", group_wait: 5s}
receivers: [{name: "null"}]
YAML
start alertmanager "" prometheus-alertmanager --config.file="$work/alertmanager.yml" \
  --storage.path="$work/am" --web.listen-address="127.0.0.1:$am_port" \
  --cluster.listen-address= --log.level=warn
wait_http "http://127.0.0.1:$am_port/-/ready" alertmanager "${pids[-1]}"

rules=()
for f in "$repo"/alerts/*.rules.yml; do rules+=("-rule=$f"); done
start vmalert "" vmalert "${rules[@]}" -datasource.url="http://127.0.0.1:$vm_port" \
  -remoteWrite.url="http://127.0.0.1:$vm_port" -notifier.url="http://127.0.0.1:$am_port" \
  -evaluationInterval=15s -httpListenAddr="127.0.0.1:$vmalert_port" -loggerLevel=WARN
wait_http "http://127.0.0.1:$vmalert_port/health" vmalert "${pids[-1]}"

cat <<TXT

  gpu-exporter demo — SIMULATED GPUs (fake NVML + sysfs captures), every series has demo="true"

  exporter metrics     http://127.0.0.1:$exporter_port/metrics
  VictoriaMetrics UI   http://127.0.0.1:$vm_port/vmui   (try: gpu:gpu_idle_cost_dollars_per_hour)
  scrape targets       http://127.0.0.1:$vm_port/targets
  vmalert              http://127.0.0.1:$vmalert_port/   (rules: /api/v1/rules, alerts: /api/v1/alerts)
  Alertmanager         http://127.0.0.1:$am_port/
  Grafana              import dashboards/*.json, data source: Prometheus type, URL http://127.0.0.1:$vm_port

  Recording rules run every minute, each cost rule on the one before: energy series
  appear after about 1.5 minutes, cost series after 2.5 to 4 minutes.
  Logs and data: $work (removed on exit).  Ctrl-C stops everything.
TXT
echo "DEMO READY" >&2

# Run until Ctrl-C, or until one of the processes dies. The shell waits in `wait`, which
# a trapped signal interrupts at once: Ctrl-C, which the processes get too, is acted on
# before one of them is found gone.
while true; do
  for i in "${!pids[@]}"; do
    kill -0 "${pids[$i]}" 2>/dev/null || {
      echo "demo: ${names[$i]} (pid ${pids[$i]}) exited; the end of its log:" >&2
      tail -n 20 "$work/${names[$i]}.log" >&2; exit 1; }
  done
  sleep 1 &
  wait $! || true
done
