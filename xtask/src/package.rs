//! `cargo xtask package`: the Debian package `target/debian/imc_<version>_<arch>.deb`, built with
//! the Debian tools themselves (dpkg-deb, dpkg-shlibdeps) from the release binary:
//!
//! | path | what |
//! |---|---|
//! | /usr/bin/imc | the release binary, stripped of its debug information |
//! | /usr/lib/systemd/system/imc.service | packaging/systemd (not enabled on install) |
//! | /usr/share/bash-completion/completions/imc, /usr/share/zsh/vendor-completions/_imc, /usr/share/fish/vendor_completions.d/imc.fish | `imc completions` |
//! | /usr/share/man/man1/imc.1.gz | `imc manpage` |
//! | /usr/share/imc/prometheus/ | recording rules, alerts and the Grafana dashboard |
//! | /usr/share/doc/imc/ | copyright, changelog, README |
//! | /usr/share/lintian/overrides/imc | the one lintian finding that is not one (see below) |
//!
//! The package is native (its version is the crate's) and checked by lintian in tests/packaging.rs.
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MAINTAINER: &str = "imc maintainers <imc@example.org>";

fn output_of(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn install(dst: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    std::fs::create_dir_all(dst.parent().unwrap())?;
    std::fs::write(dst, bytes).with_context(|| format!("writing {}", dst.display()))?;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// `gzip -9n`: compressed without a name or time stamp, as Debian wants man pages and changelogs.
fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .args(["-9n", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running gzip")?;
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer.join().expect("gzip writer")?;
    if !out.status.success() {
        bail!("gzip failed: {}", out.status);
    }
    Ok(out.stdout)
}

fn copyright() -> String {
    "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: imc

Files: *
Copyright: 2026 the imc authors
License: MIT or Apache-2.0

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the \"Software\"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in
 all copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
 THE SOFTWARE.

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the \"License\"); you may not
 use this file except in compliance with the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in the file `/usr/share/common-licenses/Apache-2.0'.
"
    .to_string()
}

/// A Debian changelog entry for this version (a native package's changelog.gz).
fn changelog(version: &str) -> Result<String> {
    // The date of the last commit, so that the package is the same when built again.
    let date = Command::new("git")
        .args(["log", "-1", "--format=%aD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "Thu, 01 Jan 2026 00:00:00 +0000".to_string());
    Ok(format!(
        "imc ({version}) unstable; urgency=medium\n\n  * Package of imc {version}, built by `cargo xtask package`.\n\n -- {MAINTAINER}  {date}\n"
    ))
}

/// The shared-library dependencies of `bin`, from dpkg-shlibdeps (which wants a
/// debian/control beside it).
fn shlib_depends(stage: &Path, bin: &Path) -> Result<String> {
    let scratch = stage.with_extension("shlibdeps");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(scratch.join("debian"))?;
    std::fs::write(
        scratch.join("debian/control"),
        "Source: imc\nMaintainer: x <x@example.org>\n\nPackage: imc\nArchitecture: any\n",
    )?;
    let out = output_of(
        Command::new("dpkg-shlibdeps")
            .current_dir(&scratch)
            .args(["-O", "-e"])
            .arg(bin),
    )?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(out
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .unwrap_or("")
        .trim()
        .to_string())
}

fn du_kib(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let md = e.metadata()?;
        total += if md.is_dir() {
            du_kib(&e.path())?
        } else {
            md.len().div_ceil(1024)
        };
    }
    Ok(total)
}

/// Builds the package from the release binary `bin`; returns its path.
pub fn package(root: &Path, target: &Path, bin: &Path) -> Result<PathBuf> {
    let version = env!("CARGO_PKG_VERSION");
    let arch = output_of(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_string();
    let out_dir = target.join("debian");
    let stage = out_dir.join(format!("imc_{version}_{arch}"));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage)?;

    // The binary without its debug information (148 MB → a few MB).
    let usr_bin = stage.join("usr/bin/imc");
    std::fs::create_dir_all(usr_bin.parent().unwrap())?;
    output_of(
        Command::new("strip")
            .args(["--strip-all", "-o"])
            .arg(&usr_bin)
            .arg(bin),
    )?;
    std::fs::set_permissions(&usr_bin, std::fs::Permissions::from_mode(0o755))?;
    install_files(root, &stage, &usr_bin, version)?;
    let depends = shlib_depends(&stage, &usr_bin)?;
    let control = format!(
        "Package: imc
Version: {version}
Architecture: {arch}
Maintainer: {MAINTAINER}
Installed-Size: {size}
Depends: {depends}
Section: admin
Priority: optional
Description: per-process memory bandwidth from memory-controller counters
 imc reads the memory controllers' counters (Intel uncore IMC, AMD UMC and
 data fabric, and others) and attributes their traffic to the processes and
 cgroups that caused it with an eBPF sampler: imc stat, top, record, report,
 and imc serve, a Prometheus exporter with TLS and basic authentication.
 .
 The package ships a systemd unit (not enabled on install), shell
 completions, the man page, and Prometheus rules and a Grafana dashboard
 under /usr/share/imc/prometheus.
",
        size = du_kib(&stage)?,
    );
    install(&stage.join("DEBIAN/control"), control.as_bytes(), 0o644)?;
    write_md5sums(&stage)?;

    chmod_dirs(&stage)?;
    let deb = out_dir.join(format!("imc_{version}_{arch}.deb"));
    output_of(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&deb),
    )?;
    Ok(deb)
}

/// Everything the package installs beside the binary: the systemd unit, shell completions and
/// the man page (generated by the stripped binary `usr_bin`), the Prometheus rules and
/// dashboard, the docs and the lintian override.
fn install_files(root: &Path, stage: &Path, usr_bin: &Path, version: &str) -> Result<()> {
    let generated = |args: &[&str]| output_of(Command::new(usr_bin).args(args));

    let read = |p: &str| {
        std::fs::read(root.join(p)).with_context(|| format!("reading {p} from the checkout"))
    };
    install(
        &stage.join("usr/lib/systemd/system/imc.service"),
        &read("packaging/systemd/imc.service")?,
        0o644,
    )?;
    for (shell, path) in [
        ("bash", "usr/share/bash-completion/completions/imc"),
        ("zsh", "usr/share/zsh/vendor-completions/_imc"),
        ("fish", "usr/share/fish/vendor_completions.d/imc.fish"),
    ] {
        install(
            &stage.join(path),
            generated(&["completions", shell])?.as_bytes(),
            0o644,
        )?;
    }
    install(
        &stage.join("usr/share/man/man1/imc.1.gz"),
        &gzip(generated(&["manpage"])?.as_bytes())?,
        0o644,
    )?;
    for f in ["imc.rules.yml", "imc-dashboard.json"] {
        install(
            &stage.join("usr/share/imc/prometheus").join(f),
            &read(&format!("packaging/prometheus/{f}"))?,
            0o644,
        )?;
    }
    let doc = stage.join("usr/share/doc/imc");
    install(&doc.join("copyright"), copyright().as_bytes(), 0o644)?;
    install(
        &doc.join("changelog.gz"),
        &gzip(changelog(version)?.as_bytes())?,
        0o644,
    )?;
    install(
        &doc.join("README.md.gz"),
        &gzip(&read("README.md")?)?,
        0o644,
    )?;

    // yaml-rust2 (pure Rust) reads the web config; its error messages are libyaml's, which is
    // all lintian's embedded-library check looks for.
    install(
        &stage.join("usr/share/lintian/overrides/imc"),
        b"# yaml-rust2, a YAML parser in Rust, carries libyaml's error messages: no libyaml code.\nimc: embedded-library libyaml [usr/bin/imc]\n",
        0o644,
    )?;
    Ok(())
}

/// DEBIAN/md5sums: every installed file's sum, by its path in the package.
fn write_md5sums(stage: &Path) -> Result<()> {
    let mut sums = String::new();
    let mut files = Vec::new();
    collect_files(stage, stage, &mut files)?;
    files.sort();
    for rel in &files {
        let line = output_of(Command::new("md5sum").arg(rel).current_dir(stage))?;
        sums.push_str(&line);
    }
    install(&stage.join("DEBIAN/md5sums"), sums.as_bytes(), 0o644)?;
    Ok(())
}

/// Every file under `dir` but DEBIAN/, relative to `base`.
fn collect_files(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let rel = path.strip_prefix(base)?.to_path_buf();
        if rel == Path::new("DEBIAN") {
            continue;
        }
        if path.is_dir() {
            collect_files(base, &path, out)?;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

/// Directories 0755 whatever the umask (dpkg-deb keeps the modes it finds).
fn chmod_dirs(dir: &Path) -> Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.is_dir() {
            chmod_dirs(&path)?;
        }
    }
    Ok(())
}
