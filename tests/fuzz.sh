#!/usr/bin/env bash
# Every cargo-fuzz target of the repository, each for a bounded time, from its committed seed
# corpus. Fails when any target finds a crash (the input is kept under <crate>/fuzz/artifacts/;
# reproduce with `cargo +nightly fuzz run <target> <artifact>` from the crate's directory, then
# turn it into a regression test next to the code it broke).
#
#   FUZZ_SECONDS    run time per target (default 25)
#   FUZZ_SANITIZER  cargo-fuzz sanitizer (default none: the targets are safe Rust, what they
#                   look for is a panic, an overflow or a broken invariant; `address` works too)
#   FUZZ_ONLY       run only targets whose name contains this string
#   FUZZ_BUILD      dev (default) or release. cargo-fuzz compiles with a single codegen unit;
#                   at opt-level 3 the gateway crate alone takes minutes on 2 cores, while an
#                   unoptimised build (debug assertions and overflow checks on) compiles in a
#                   fraction of that and still runs thousands of inputs per second. Use release
#                   for long local runs.
#
# The fuzz crates are workspaces of their own (nightly and instrumentation flags stay out of the
# main build); they share one target directory, so common dependencies build once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${FUZZ_SECONDS:-25}
sanitizer=${FUZZ_SANITIZER:-none}
case ${FUZZ_BUILD:-dev} in
  dev) build=--dev ;;
  release) build=--release ;;
  *) echo "fuzz: FUZZ_BUILD is dev or release" >&2; exit 2 ;;
esac
crates=(lib/bm13xx services/stratum-agent services/legacy-tcp gateway/rest)

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --locked
fi

export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$root/target/fuzz}
export CARGO_TERM_COLOR=never
failed=()
for crate in "${crates[@]}"; do
  echo "fuzz: building $crate/fuzz"
  (cd "$crate" && nice -n 5 cargo +nightly fuzz build "$build" -s "$sanitizer")
  for target in $(cd "$crate" && cargo +nightly fuzz list); do
    [[ -n "${FUZZ_ONLY:-}" && "$target" != *"$FUZZ_ONLY"* ]] && continue
    seeds=$crate/fuzz/corpus/$target
    [ -d "$seeds" ] || { echo "fuzz: $target has no seed corpus at $seeds" >&2; exit 1; }
    scratch=$CARGO_TARGET_DIR/corpus/$target
    mkdir -p "$scratch"
    echo "fuzz: $target for ${seconds}s (seeds: $(ls "$seeds" | wc -l))"
    if ! (cd "$crate" && cargo +nightly fuzz run "$build" -s "$sanitizer" "$target" \
            "$scratch" "$root/$seeds" -- \
            -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
            2>&1 | grep -v '^#[0-9]\|^"' | tail -n 40); then
      failed+=("$target")
    fi
  done
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]} (inputs under */fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz: every target ran ${seconds}s without a finding"
