#!/usr/bin/env bash
# The whole stack on the miner's own CPU (issue 35): cross-build svcos for an ARM target, then
# run it under qemu-user and check that it mines.
#
#   tests/cross.sh TARGET
#
# TARGET is armv7-unknown-linux-gnueabihf (Zynq-7000 control boards: Cortex-A9, hard float),
# aarch64-unknown-linux-gnu (64-bit ARM control boards) or thumbv7neon-unknown-linux-gnueabihf
# (the armv7 CPU in Thumb-2 code; built for its size, docs/PERFORMANCE.md).
#
# 1. Installs what is missing: the nightly toolchain's rust-src (no prebuilt ARM std can be
#    downloaded here, so std is built from source with -Zbuild-std), Debian's cross gcc (the
#    linker, and the C compiler of the bundled SQLite), qemu-user and qemu-user-binfmt.
# 2. Builds the sim build into target/TARGET/release/svcos and the image build
#    (`-p svcos --no-default-features`, what Buildroot ships) into
#    target/image/TARGET/release/svcos. The image links the system libsqlite3; here that is
#    SQLite built from the amalgamation rusqlite ships, as a shared library for TARGET (what
#    Buildroot's sqlite package provides on the image), in target/image/TARGET/sqlite.
# 3. Registers qemu's binfmt_misc handler (root), so the supervisor's re-exec of /proc/self/exe
#    and every service it starts run as ARM processes.
# 4. tests/cross_smoke.py: the whole stack from the ARM binary, shares accepted, still accepted
#    after a SIGKILL of hw-agent, /api/status and the cgminer API answering, memory read.
#
# Exits non-zero on any failure. Times are printed per phase; times under emulation say nothing
# about the real CPU. Env: SVCOS_CROSS_SKIP_IMAGE=1 skips the image build;
# SVCOS_CROSS_PROFILE=cross-ci builds both with the CI profile (Cargo.toml: the release settings
# without fat LTO; `.ci/run` uses it) in one target directory: the sim build becomes
# target/TARGET/cross-ci/svcos-sim, the image target/TARGET/cross-ci/svcos. Sizes are the
# release profile's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() {
    echo "usage: tests/cross.sh armv7-unknown-linux-gnueabihf|aarch64-unknown-linux-gnu|thumbv7neon-unknown-linux-gnueabihf" >&2
    exit 2
}
[ $# -eq 1 ] || usage
TARGET=$1
case "$TARGET" in
    armv7-unknown-linux-gnueabihf | thumbv7neon-unknown-linux-gnueabihf)
        GNU=arm-linux-gnueabihf QEMU=arm DEBARCH=armhf ;;
    aarch64-unknown-linux-gnu)
        GNU=aarch64-linux-gnu QEMU=aarch64 DEBARCH=arm64 ;;
    *) usage ;;
esac
TRIPLE_ENV=$(echo "$TARGET" | tr 'a-z-' 'A-Z_')
TRIPLE_CC=$(echo "$TARGET" | tr '-' '_')
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

phase() { echo "== $* ($(date -u +%H:%M:%S))"; }
START=$SECONDS

phase "tools"
missing=()
command -v "$GNU-gcc" >/dev/null || missing+=("gcc-$GNU")
# The target's C headers and libraries: only a Recommends of the cross gcc, and the C parts
# (bundled SQLite, secp256k1) need them.
[ -f "/usr/$GNU/include/stdio.h" ] || missing+=("libc6-dev-$DEBARCH-cross")
command -v "qemu-$QEMU" >/dev/null || missing+=(qemu-user)
[ -f "/usr/lib/binfmt.d/qemu-$QEMU.conf" ] || missing+=(qemu-user-binfmt)
if [ ${#missing[@]} -gt 0 ]; then
    # Only the cross compiler and qemu, no multiarch (`libsqlite3-dev:armhf`): a foreign-arch
    # -dev package must match the host's linux-libc-dev version exactly, and when the mirrors
    # disagree apt resolves that by removing the host's libc6-dev and build-essential.
    $SUDO apt-get update -q || echo "apt-get update reported errors; trying the install anyway" >&2
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component list --toolchain nightly --installed | grep -q '^rust-src' ||
    rustup component add rust-src --toolchain nightly
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --disable-pip-version-check 'pytest>=8'

# The cross gcc links, and compiles the C parts (the sim build's bundled SQLite, ring, secp256k1).
export "CARGO_TARGET_${TRIPLE_ENV}_LINKER=$GNU-gcc"
export "CC_${TRIPLE_CC}=$GNU-gcc" "AR_${TRIPLE_CC}=$GNU-ar"
PROFILE=${SVCOS_CROSS_PROFILE:-release}
CARGO=(cargo +nightly build --profile "$PROFILE" --locked -Zbuild-std=std,panic_abort --target "$TARGET")
# The rustflags rootfs/package/svcos/svcos.mk gives Buildroot's build (which sets this variable
# on ARM, replacing .cargo/config.toml's build.rustflags), so the image build is that build.
IMAGE_RUSTFLAGS="-Csymbol-mangling-version=v0"
[ "$QEMU" != arm ] || IMAGE_RUSTFLAGS+=" -Clink-arg=-Wl,--allow-multiple-definition"
IMAGE_DIR=$ROOT/target/image
if [ "$PROFILE" != release ]; then
    # CI: one target directory and one set of rustflags for both builds, so the image build
    # recompiles only what its features change, not std and every crate again.
    export "CARGO_TARGET_${TRIPLE_ENV}_RUSTFLAGS=$IMAGE_RUSTFLAGS"
    IMAGE_DIR=$ROOT/target
fi

phase "sim build → target/$TARGET/$PROFILE/svcos"
t0=$SECONDS
"${CARGO[@]}" -p svcos
SIM_BUILD_S=$((SECONDS - t0))
SIM_BIN=$ROOT/target/$TARGET/$PROFILE/svcos
if [ "$IMAGE_DIR" = "$ROOT/target" ]; then
    # The image build writes the same path next.
    cp "$SIM_BIN" "$SIM_BIN-sim"
    SIM_BIN=$SIM_BIN-sim
fi

IMAGE_BIN=""
if [ "${SVCOS_CROSS_SKIP_IMAGE:-0}" != 1 ]; then
    phase "SQLite for $TARGET → target/image/$TARGET/sqlite"
    # The amalgamation of the libsqlite3-sys version in Cargo.lock (the sim build above has
    # unpacked it): the SQLite rusqlite is written against, built the way a distribution
    # builds it (shared, thread-safe).
    SQLITE_VERSION=$(awk '/^name = "libsqlite3-sys"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
    SQLITE_SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"libsqlite3-sys-$SQLITE_VERSION"/sqlite3 | head -n1)
    [ -f "$SQLITE_SRC/sqlite3.c" ] || { echo "no SQLite amalgamation for libsqlite3-sys $SQLITE_VERSION" >&2; exit 1; }
    SQLITE=$ROOT/target/image/$TARGET/sqlite
    if [ ! -f "$SQLITE/lib/libsqlite3.so.0" ] || [ "$SQLITE_SRC/sqlite3.c" -nt "$SQLITE/lib/libsqlite3.so.0" ]; then
        mkdir -p "$SQLITE/lib" "$SQLITE/include"
        cp "$SQLITE_SRC/sqlite3.h" "$SQLITE_SRC/sqlite3ext.h" "$SQLITE/include/"
        "$GNU-gcc" -O2 -fPIC -shared -DSQLITE_THREADSAFE=1 -DSQLITE_ENABLE_COLUMN_METADATA \
            -Wl,-soname,libsqlite3.so.0 -o "$SQLITE/lib/libsqlite3.so.0" "$SQLITE_SRC/sqlite3.c" \
            -lpthread -lm
        ln -sf libsqlite3.so.0 "$SQLITE/lib/libsqlite3.so"
    fi

    phase "image build → ${IMAGE_DIR#"$ROOT"/}/$TARGET/$PROFILE/svcos"
    t0=$SECONDS
    env "CARGO_TARGET_${TRIPLE_ENV}_RUSTFLAGS=$IMAGE_RUSTFLAGS" \
        SQLITE3_LIB_DIR="$SQLITE/lib" SQLITE3_INCLUDE_DIR="$SQLITE/include" \
        CARGO_TARGET_DIR="$IMAGE_DIR" "${CARGO[@]}" -p svcos --no-default-features
    IMAGE_BUILD_S=$((SECONDS - t0))
    IMAGE_BIN=$IMAGE_DIR/$TARGET/$PROFILE/svcos
fi

phase "binfmt_misc: qemu-$QEMU"
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -f "$BINFMT/register" ]; then
    $SUDO mount -t binfmt_misc binfmt_misc "$BINFMT"
fi
if [ ! -f "$BINFMT/qemu-$QEMU" ]; then
    # Debian's entry (flags OP, interpreter /usr/libexec/qemu-binfmt/$QEMU-binfmt-P): without
    # F the interpreter is looked up at each exec, which is fine outside containers.
    $SUDO sh -c "cat /usr/lib/binfmt.d/qemu-$QEMU.conf > $BINFMT/register"
fi
grep -qx enabled "$BINFMT/qemu-$QEMU" || { echo "binfmt qemu-$QEMU is disabled" >&2; exit 1; }

# qemu-user finds the ARM loader and libc here; the variable is inherited by every process the
# supervisor starts, so each one runs under the same emulation.
export QEMU_LD_PREFIX=/usr/$GNU

if [ -n "$IMAGE_BIN" ]; then
    phase "image binary loads (libsqlite3 from target/image/$TARGET/sqlite)"
    LD_LIBRARY_PATH=$SQLITE/lib "$IMAGE_BIN" --version
fi

phase "smoke under qemu-$QEMU"
t0=$SECONDS
SVCOS_BIN=$SIM_BIN python3 tests/cross_smoke.py
SMOKE_S=$((SECONDS - t0))

phase "done"
echo "sim build:   $(stat -c %s "$SIM_BIN") bytes, built in ${SIM_BUILD_S} s"
[ -z "$IMAGE_BIN" ] || echo "image build: $(stat -c %s "$IMAGE_BIN") bytes, built in ${IMAGE_BUILD_S} s"
echo "smoke: ${SMOKE_S} s (emulated); total $((SECONDS - START)) s"
