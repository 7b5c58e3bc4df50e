//! The arm64 package `cargo xtask test` builds from its aarch64 cross build (as `cargo xtask
//! package --target aarch64-unknown-linux-gnu` does from the release build).
use imc_tests::deb::{built_deb_for, lintian_passes, stdout_ok};
use imc_tests::{imc, require};
use std::process::Command;

/// The arm64 package (`cargo xtask package --target aarch64-unknown-linux-gnu`): arm64 in its
/// control fields, depending on libc6 and libgcc-s1 as its binary's ELF needs them, and that
/// binary an aarch64 executable, stripped, that runs `--version` and `list` under qemu-user
/// where qemu-aarch64 is installed.
#[test]
fn the_arm64_package_holds_a_stripped_aarch64_imc() {
    let deb = built_deb_for("IMC_TEST_DEB_ARM64", "arm64");
    if !require(
        deb.as_ref().is_some_and(|d| d.is_file()),
        "no imc_*_arm64.deb: `cargo xtask package --target aarch64-unknown-linux-gnu` builds it \
         with Debian's aarch64 cross compiler (scripts/setup.sh), and `cargo xtask test` does first",
    ) {
        return;
    }
    let deb = deb.unwrap();
    let field = |name: &str| {
        stdout_ok(Command::new("dpkg-deb").arg("--field").arg(&deb).arg(name))
            .trim()
            .to_string()
    };
    assert_eq!(field("Package"), "imc");
    assert_eq!(field("Architecture"), "arm64");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    let depends = field("Depends");
    let packages: Vec<&str> = depends
        .split(", ")
        .map(|d| d.split(' ').next().unwrap())
        .collect();
    assert_eq!(packages, ["libc6", "libgcc-s1"], "{depends}");
    // Each at least the newest symbol version the binary needs (aarch64 glibc begins at 2.17).
    let libc = depends.split(", ").next().unwrap();
    let v = libc
        .strip_prefix("libc6 (>= ")
        .and_then(|v| v.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{depends}"));
    let minor: u32 = v.split('.').nth(1).unwrap().parse().unwrap();
    assert!(v.starts_with("2.") && minor >= 17, "{depends}");

    let dir = tempfile::tempdir().unwrap();
    stdout_ok(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir.path()));
    let bin = dir.path().join("usr/bin/imc");
    let header = stdout_ok(Command::new("readelf").args(["-h", "-W"]).arg(&bin));
    assert!(header.contains("AArch64"), "{header}");
    assert!(header.contains("ELF64"), "{header}");
    let sections = stdout_ok(Command::new("readelf").args(["-S", "-W"]).arg(&bin));
    for s in [".debug_info", ".symtab"] {
        assert!(!sections.contains(s), "{s} in the packaged binary");
    }
    // The completions and the man page are there and name imc's commands (a host imc wrote
    // them), the same as this checkout's binary writes.
    let bash =
        std::fs::read_to_string(dir.path().join("usr/share/bash-completion/completions/imc"))
            .unwrap();
    assert_eq!(bash, stdout_ok(imc().args(["completions", "bash"])));
    assert!(
        dir.path().join("usr/share/man/man1/imc.1.gz").is_file(),
        "no man page"
    );
    let qemu = Command::new("qemu-aarch64")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if require(
        qemu,
        "qemu-aarch64 not installed: scripts/setup.sh installs qemu-user",
    ) {
        let version = stdout_ok(
            Command::new("qemu-aarch64")
                .args(["-L", "/usr/aarch64-linux-gnu"])
                .arg(&bin)
                .arg("--version"),
        );
        assert_eq!(version.trim(), format!("imc {}", env!("CARGO_PKG_VERSION")));
    }
    lintian_passes(&deb);
}
