//! The checked-in modules are generated from the .proto files as they are now: every file in
//! proto/ is listed in `SOURCES` with the hash of its bytes, so a changed, added or removed
//! .proto file fails here until `cargo xtask protos` writes src/generated/ again.
use std::path::Path;

#[test]
fn the_generated_modules_match_the_proto_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".proto"))
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = imc_proto::SOURCES.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        listed, on_disk,
        "src/generated/ was written from other .proto files: run `cargo xtask protos`"
    );
    for (name, hash) in imc_proto::SOURCES {
        let now = imc_proto::fnv1a(&std::fs::read(dir.join(name)).unwrap());
        assert_eq!(
            now, *hash,
            "proto/{name} changed after src/generated/ was written: run `cargo xtask protos`"
        );
    }
}

#[test]
fn the_hash_is_fnv1a() {
    // The published FNV-1a 64 test vectors.
    assert_eq!(imc_proto::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(imc_proto::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(imc_proto::fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}
