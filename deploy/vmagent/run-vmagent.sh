#!/bin/sh
# vmagent for gpu-exporter: scrapes with scrape.yml (or your -promscrape.config) and
# remote-writes with the stream aggregation of stream-aggr.yml when this vmagent has it.
#
#   deploy/vmagent/run-vmagent.sh -remoteWrite.url=http://victoria:8428/api/v1/write \
#       [-promscrape.config=deploy/vmagent/scrape.yml] [any other vmagent flag]
#
# VMAGENT names the binary (default: vmagent on PATH).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
vmagent=${VMAGENT:-vmagent}

case " $* " in
  *" -promscrape.config="*) ;;
  *) set -- "-promscrape.config=$here/scrape.yml" "$@" ;;
esac

if "$vmagent" -help 2>&1 | grep -q -- '-remoteWrite.streamAggr.config'; then
  set -- "-remoteWrite.streamAggr.config=$here/stream-aggr.yml" "$@"
else
  echo "run-vmagent: this vmagent has no -remoteWrite.streamAggr.config (stream aggregation" \
    "needs v1.100+; Debian 12 ships 1.79.5): starting without it, per-process labels of the" \
    "eBPF families are kept" >&2
fi
exec "$vmagent" "$@"
