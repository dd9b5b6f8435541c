################################################################################
#
# svcos
#
################################################################################

# Built from the workspace this external tree lives in (rootfs/ is one level below its root).
SVCOS_VERSION = 0.1.0
SVCOS_SITE = $(BR2_EXTERNAL_SVCOS_PATH)/..
SVCOS_SITE_METHOD = local
SVCOS_LICENSE = GPL-3.0-or-later

# The workspace's one executable lives in the `svcos` package under svcos; the cargo
# infrastructure runs `cargo build --release`/`cargo install --path ./` there (with the
# workspace's Cargo.lock, --locked, offline from the vendored sources) and installs the binary to
# $(TARGET_DIR)/usr/bin/svcos. The image build is `cargo build --release -p svcos
# --no-default-features`: without the default `sim` feature, so the simulated board, the test
# pool and its Stratum V2 upstream stay out of the image (docs/PERFORMANCE.md, "Binary size").
SVCOS_SUBDIR = svcos
# Without default features the binary links the system libsqlite3 (the `bundled-sqlite` feature
# is off): Buildroot's sqlite package, found through pkg-config.
SVCOS_DEPENDENCIES = host-pkgconf sqlite tzdata
SVCOS_CARGO_BUILD_OPTS = -p svcos --no-default-features --bin svcos
SVCOS_CARGO_INSTALL_OPTS = --no-default-features --bin svcos

# The same compiler flags as every other build of the workspace (tests/cross.sh's image build
# uses exactly these). Cargo does not add a target's rustflags to `build.rustflags`, it uses them
# instead, and on ARM Buildroot's cargo infrastructure sets CARGO_TARGET_<triple>_RUSTFLAGS (its
# compiler-builtins workaround, --allow-multiple-definition): the workspace's
# `-C symbol-mangling-version=v0` (.cargo/config.toml) would be dropped, and with it the
# hot-text layout whose patterns match v0 names (svcos/build.rs). So both are restated
# here; this assignment comes after the infrastructure's on cargo's command line and wins.
# Buildroot links against its prebuilt standard library for the target (host-rust-bin ships it
# for armv7-unknown-linux-gnueabihf, the Rust target of a Cortex-A9 with BR2_ARM_EABIHF and
# glibc); tests/cross.sh builds std from source only because no prebuilt ARM std can be
# downloaded where it runs.
SVCOS_RUSTFLAGS = -Csymbol-mangling-version=v0
ifeq ($(NORMALIZED_ARCH),arm)
SVCOS_RUSTFLAGS += -Clink-arg=-Wl,--allow-multiple-definition
endif
# PKG_CONFIG_ALLOW_CROSS: libsqlite3-sys asks pkg-config (Buildroot's sysroot-aware pkgconf) for
# the target's libsqlite3 instead of falling back to a bare -lsqlite3.
SVCOS_CARGO_ENV = \
	CARGO_TARGET_$(call UPPERCASE,$(RUSTC_TARGET_NAME))_RUSTFLAGS="$(SVCOS_RUSTFLAGS)" \
	PKG_CONFIG_ALLOW_CROSS=1

# The same users as systemd/svcos.sysusers, created at image build time (makeusers(5) syntax):
# one user per service, primary group svcos; only hw-agent reaches the UART/I2C/GPIO devices.
define SVCOS_USERS
	svcos-hw-agent -1 svcos -1 * /var/lib/svcos/hw-agent - dialout,i2c,gpio svcOS hardware agent
	svcos-stratum-agent -1 svcos -1 * /var/lib/svcos/stratum-agent - - svcOS pool client
	svcos-auth -1 svcos -1 * /var/lib/svcos/auth - - svcOS authentication
	svcos-tuner -1 svcos -1 * /var/lib/svcos/tuner - - svcOS tuner
	svcos-legacy-tcp -1 svcos -1 * /var/lib/svcos/legacy-tcp - - svcOS cgminer API
	svcos-gateway -1 svcos -1 * /var/lib/svcos/gateway - - svcOS REST gateway
	svcos-proxy -1 svcos -1 * /var/lib/svcos/proxy - - svcOS dashboard proxy
endef

$(eval $(cargo-package))
