//! The `imc` crate's build step: it embeds the eBPF object when `cargo xtask` built it
//! (IMC_EBPF_OBJECT points at it), so the `imc` binary is self-contained. A plain `cargo build`
//! still works: the binary then loads the object named by the IMC_BPF_OBJECT environment
//! variable at run time, or says how to build it.
fn main() {
    embedded_bpf();
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
