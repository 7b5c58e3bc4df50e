//! Two build steps for the `imc` crate:
//! - embeds the eBPF object when `cargo xtask` built it (IMC_EBPF_OBJECT points at it), so the
//!   `imc` binary is self-contained. A plain `cargo build` still works: the binary then loads
//!   the object named by the IMC_BPF_OBJECT environment variable at run time, or says how to
//!   build it;
//! - generates the Rust types of the pprof profile (`proto/profile.proto`, into OUT_DIR/pprof)
//!   and of the part of Perfetto's trace format imc writes (`proto/perfetto_trace.proto`, into
//!   OUT_DIR/perfetto), with rust-protobuf's pure-Rust parser, so no protoc binary is needed.
fn main() {
    embedded_bpf();
    proto_types("profile.proto", "pprof");
    proto_types("perfetto_trace.proto", "perfetto");
}

fn embedded_bpf() {
    println!("cargo::rustc-check-cfg=cfg(imc_embedded_bpf)");
    println!("cargo::rerun-if-env-changed=IMC_EBPF_OBJECT");
    if let Ok(path) = std::env::var("IMC_EBPF_OBJECT") {
        // Also while it is missing: a build made before the object existed must not stay
        // without it once it does (Cargo reruns the script while a watched path is absent).
        println!("cargo::rerun-if-changed={path}");
        if std::path::Path::new(&path).is_file() {
            println!("cargo::rustc-cfg=imc_embedded_bpf");
            println!("cargo::rustc-env=IMC_EBPF_OBJECT_PATH={path}");
        } else {
            println!(
                "cargo::warning=IMC_EBPF_OBJECT={path} is not a file; building without the eBPF program"
            );
        }
    }
}

/// The types of `proto/FILE` into OUT_DIR/DIR/mod.rs, which `output::stacks::pprof` and
/// `output::perfetto_proto` include. A failure is printed and ends the build
/// (`run_from_script`).
fn proto_types(file: &str, dir: &str) {
    let path = format!("proto/{file}");
    println!("cargo::rerun-if-changed={path}");
    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .input(&path)
        .cargo_out_dir(dir)
        .run_from_script();
}
