#!/usr/bin/env bash
# Takes a fresh machine to a working imc build: userspace on stable Rust, the eBPF crate on
# either rustup nightly + rust-src (the usual route where the internet is reachable) or Debian's
# rustc-web + rust-web-src with RUSTC_BOOTSTRAP (the route that works offline from Debian's
# mirrors), and bpf-linker built against the same LLVM major as that compiler.
# Idempotent: every step checks first and skips what is already there.
set -euo pipefail

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && SUDO="sudo" || die "not root and no sudo: run this script as root"
fi

BPF_LINKER_VERSION=0.13.0
STATE_DIR="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/imc-setup"
mkdir -p "$STATE_DIR"

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install ${missing[*]} by hand"
  if [ $apt_updated -eq 0 ]; then
    say "apt-get update"
    $SUDO apt-get update -qq >/dev/null
    apt_updated=1
  fi
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# 1. Base tools: a C toolchain for -sys crates, libpfm4 for the libpfm4 event syntax, bpftool
#    for checking that nothing stays loaded, perf for the benchmarks' baselines, tmux for the
#    end-to-end test of the live view, GNU time for the hostile tests' peak-memory measure.
apt_install build-essential pkg-config libpfm4-dev bpftool linux-perf tmux time

# 1b. Prometheus (server and promtool) and python3 (its workload) for the test of `imc serve`
#     scraped by a real Prometheus.
#     Debian's package enables a system service; the tests run their own server on loopback.
apt_install prometheus python3

# 1c. The tests of `imc serve --web.config.file` (openssl makes their certificates, curl is the
#     TLS client) and of the Debian package (`cargo xtask package` uses dpkg-deb, dpkg-shlibdeps
#     and strip from build-essential; lintian checks the result).
apt_install openssl curl lintian

# 1d. The other architectures imc ships to (`cargo xtask test` builds imc for ppc64le and runs it
#     on the POWER9 fixture trees under qemu-user, and checks the aarch64 build): Debian's cross
#     compilers (linker, and C for ring) with their C libraries, and qemu-user (qemu-ppc64le).
apt_install gcc-powerpc64le-linux-gnu libc6-dev-ppc64el-cross gcc-aarch64-linux-gnu \
  libc6-dev-arm64-cross qemu-user

# 2. The user crates' toolchain: the one rust-toolchain.toml names (stable), installed when
#    missing, so the build does not depend on which toolchain rustup defaults to (nightly, on a
#    new rustup where step 3 installs it first).
cd "$(dirname "$0")/.."
if command -v rustup >/dev/null 2>&1; then
  # rustup installs toolchains only where it is installed itself: a rustup shared from another
  # home (PATH holding someone else's ~/.cargo/bin) needs its CARGO_HOME named.
  if [ -z "${CARGO_HOME:-}" ] && [ ! -x "${HOME:-/root}/.cargo/bin/rustup" ]; then
    CARGO_HOME="$(dirname "$(dirname "$(command -v rustup)")")"
    export CARGO_HOME
  fi
  user_toolchain="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"
  [ -n "$user_toolchain" ] || die "rust-toolchain.toml names no channel"
  if ! rustup run "$user_toolchain" cargo --version >/dev/null 2>&1; then
    say "installing Rust $user_toolchain (rust-toolchain.toml) for the user crates"
    rustup toolchain install --no-self-update "$user_toolchain" --profile minimal --component clippy,rustfmt >/dev/null
  fi
  # The standard libraries of the cross targets (step 1d), for that same toolchain.
  cross_targets=(powerpc64le-unknown-linux-gnu aarch64-unknown-linux-gnu)
  installed_targets="$(rustup target list --installed --toolchain "$user_toolchain")"
  for t in "${cross_targets[@]}"; do
    if ! grep -qx "$t" <<<"$installed_targets"; then
      say "adding the Rust target $t to $user_toolchain"
      rustup target add --toolchain "$user_toolchain" "$t" >/dev/null \
        || die "rustup target add --toolchain $user_toolchain $t failed"
    fi
  done
fi
cargo --version >/dev/null 2>&1 || die "cargo does not run here: install Rust (rustup) first"
if ! command -v rustup >/dev/null 2>&1; then
  # Without rustup the pinned toolchain cannot be had, nor the cross targets' standard
  # libraries: say so now rather than fail in the middle of the cross build.
  sysroot="$(rustc --print sysroot 2>/dev/null || true)"
  for t in powerpc64le-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    [ -d "$sysroot/lib/rustlib/$t" ] \
      || die "rustup is not on PATH and $(command -v rustc) has no standard library for $t: install rustup (https://rustup.rs), or put its ~/.cargo/bin on PATH, and run this again"
  done
fi

# 3. The eBPF compiler. bpf-linker must be built against an LLVM at least as new as the one
#    in the compiler that emits the bitcode, so a route is only usable when Debian has the
#    matching llvm-N-dev. Prefer rustup nightly + rust-src; else Debian's rustc-web route.
llvm_of() { "$1" -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p'; }
llvm_dev_available() {
  dpkg-query -W -f='${Status}' "llvm-$1-dev" 2>/dev/null | grep -q 'install ok installed' && return 0
  [ $apt_updated -eq 1 ] || { $SUDO apt-get update -qq >/dev/null; apt_updated=1; }
  apt-cache show "llvm-$1-dev" >/dev/null 2>&1
}
ebpf_route=""
if command -v rustup >/dev/null 2>&1; then
  if ! rustup +nightly component list --installed 2>/dev/null | grep -q '^rust-src'; then
    timeout 180 rustup toolchain install --no-self-update nightly --profile minimal --component rust-src >/dev/null 2>&1 || true
  fi
  if rustup +nightly component list --installed 2>/dev/null | grep -q '^rust-src'; then
    nightly_rustc="$(rustup +nightly which rustc)"
    nightly_llvm="$(llvm_of "$nightly_rustc")"
    if [ -n "$nightly_llvm" ] && llvm_dev_available "$nightly_llvm"; then
      ebpf_route=nightly
      ebpf_rustc="$nightly_rustc"
    else
      say "rustup nightly uses LLVM ${nightly_llvm:-?} and Debian has no llvm-${nightly_llvm:-?}-dev for bpf-linker"
    fi
  fi
fi
if [ -z "$ebpf_route" ]; then
  say "using Debian's rustc-web + rust-web-src for the eBPF crate"
  apt_install rustc-web cargo-web rust-web-src
  [ -x /usr/bin/rustc ] || die "rustc-web installed but /usr/bin/rustc is missing"
  ebpf_route=debian
  ebpf_rustc=/usr/bin/rustc
fi
llvm_major="$(llvm_of "$ebpf_rustc")"
[ -n "$llvm_major" ] || die "cannot read the LLVM version from '$ebpf_rustc -vV'"
say "eBPF route: $ebpf_route ($("$ebpf_rustc" --version), LLVM $llvm_major)"

# 4. bpf-linker against that LLVM major. `cargo install` puts it in CARGO_HOME's bin, which a
#    user's PATH may not hold (a fresh HOME, a plain PATH): its path is recorded for xtask.
linker_path() {
  command -v bpf-linker 2>/dev/null || echo "${CARGO_HOME:-${HOME:-/root}/.cargo}/bin/bpf-linker"
}
have_linker=""
if [ -x "$(linker_path)" ]; then
  have_linker="$("$(linker_path)" --version 2>/dev/null | awk '{print $2}')"
fi
if [ "$have_linker" = "$BPF_LINKER_VERSION" ] && [ -f "$STATE_DIR/bpf-linker-llvm" ] \
   && [ "$(cat "$STATE_DIR/bpf-linker-llvm")" = "$llvm_major" ]; then
  say "bpf-linker $BPF_LINKER_VERSION (LLVM $llvm_major) already installed"
else
  if apt-cache show "llvm-${llvm_major}-dev" >/dev/null 2>&1 || dpkg-query -W "llvm-${llvm_major}-dev" >/dev/null 2>&1; then
    apt_install "llvm-${llvm_major}-dev" libzstd-dev zlib1g-dev libxml2-dev
    say "building bpf-linker $BPF_LINKER_VERSION against /usr/lib/llvm-${llvm_major} (takes a few minutes)"
    LLVM_PREFIX="/usr/lib/llvm-${llvm_major}" env -u RUSTC -u RUSTFLAGS -u RUSTUP_TOOLCHAIN \
      cargo install "bpf-linker@${BPF_LINKER_VERSION}" --locked --force \
      --no-default-features --features "llvm-${llvm_major}"
  else
    say "no llvm-${llvm_major}-dev package: building bpf-linker with its bundled LLVM"
    env -u RUSTC -u RUSTFLAGS -u RUSTUP_TOOLCHAIN cargo install "bpf-linker@${BPF_LINKER_VERSION}" --locked --force
  fi
  echo "$llvm_major" > "$STATE_DIR/bpf-linker-llvm"
fi

# 5. Record the route for xtask.
{
  echo "route=$ebpf_route"
  echo "rustc=$ebpf_rustc"
  echo "llvm=$llvm_major"
  echo "linker=$(linker_path)"
} > "$STATE_DIR/ebpf-toolchain"
say "ready (eBPF route recorded in $STATE_DIR/ebpf-toolchain)"
