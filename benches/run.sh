#!/usr/bin/env bash
# The load benchmark, as documented in docs/performance.md: builds release binaries,
# then runs the three variants (1 KiB / 10 % duplicates, 64 KiB, 50 % duplicates) and
# a memory check at 256 connections with 64 KiB bodies. Loopback only; each run is
# bounded by --duration. Pass --duration 5s for a quicker look.
set -euo pipefail
cd "$(dirname "$0")/.."
bench() { cargo bench --locked --quiet --bench load -- "$@"; }
bench --connections 32 --body 1024 --dup 0.1 "$@"
bench --connections 32 --body 65536 --dup 0.1 "$@"
bench --connections 32 --body 1024 --dup 0.5 "$@"
bench --connections 256 --body 65536 --dup 0.1 "$@"
