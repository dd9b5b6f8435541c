#!/usr/bin/env bash
# Supervisor benchmark against a release build: restart latency (SIGKILL -> SERVING, p50/p99
# over KILLS kills per service), re-adoption after a supervisor SIGKILL, idle memory (PSS/RSS
# per process, stack sum without hw-sim/test-pool), binary size.
#   KILLS=100 READOPT_ROUNDS=10 IDLE_S=10 bench/supervisor/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -p svcos --bin svcos
cargo build --release -p svcos-e2e --example supervisor_bench
SVCOS_BIN="${SVCOS_BIN:-$target/release/svcos}" "$target/release/examples/supervisor_bench"
