use super::{flamegraph, folded, pprof};
use crate::model::stacks::{Frame, FrameKind, SampleType, Stack, StackProfile, StackSample};

fn frame(name: &str, module: Option<&str>) -> Frame {
    Frame {
        kind: FrameKind::User,
        function: Some(name.to_string()),
        module: module.map(str::to_string),
        offset: 0x40,
        build_id: module.map(|_| "abcd".to_string()),
        file: None,
        line: Some(7),
    }
}

/// main → hot_three (300) and main → hot;one (100, a `;` in its name), one process.
fn profile() -> StackProfile {
    StackProfile {
        sample_types: vec![SampleType {
            name: "page-faults".into(),
            unit: "count".into(),
        }],
        frames: vec![
            frame("main", Some("/bin/two")),
            frame("hot_three", Some("/bin/two")),
            frame("hot;one", None),
        ],
        // Leaf first.
        stacks: vec![Stack { frames: vec![1, 0] }, Stack { frames: vec![2, 0] }],
        samples: vec![
            StackSample {
                tgid: 42,
                comm: "two".into(),
                cgroup: None,
                stack: 0,
                values: vec![300],
            },
            StackSample {
                tgid: 42,
                comm: "two".into(),
                cgroup: None,
                stack: 1,
                values: vec![100],
            },
            StackSample {
                tgid: 42,
                comm: "two".into(),
                cgroup: None,
                stack: 0,
                values: vec![0],
            },
        ],
        ..Default::default()
    }
}

#[test]
fn folded_lines_are_root_first_merged_and_escaped() {
    let mut out = Vec::new();
    folded::write_folded(&profile(), &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "two;main;hot:one 100\ntwo;main;hot_three 300\n"
    );
}

#[test]
fn flamegraph_is_svg_naming_the_functions_and_no_traffic_is_an_error() {
    let mut out = Vec::new();
    let p = profile();
    flamegraph::write_flamegraph(&p, &flamegraph::title_of(&p), &mut out).unwrap();
    let svg = String::from_utf8(out).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("hot_three"),
        "{svg:.200}"
    );
    let empty = StackProfile::default();
    assert!(flamegraph::write_flamegraph(&empty, "t", Vec::new()).is_err());
}

/// Reads the top-level fields of a Profile message by number, as any protobuf decoder would.
fn fields(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut is = protobuf::CodedInputStream::from_bytes(bytes);
    let mut out = Vec::new();
    while !is.eof().unwrap() {
        let tag = is.read_raw_varint32().unwrap();
        let (field, wire) = (tag >> 3, tag & 7);
        match wire {
            0 => out.push((
                field,
                is.read_raw_varint64().unwrap().to_le_bytes().to_vec(),
            )),
            2 => out.push((field, is.read_bytes().unwrap())),
            w => panic!("unexpected wire type {w}"),
        }
    }
    out
}

#[test]
fn pprof_is_gzipped_with_profile_proto_fields() {
    let mut gz = Vec::new();
    pprof::write_pprof(&profile(), &mut gz).unwrap();
    let mut raw = Vec::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    assert_eq!(raw, pprof::encode(&profile()));
    let f = fields(&raw);
    let strings: Vec<String> = f
        .iter()
        .filter(|(n, _)| *n == 6)
        .map(|(_, b)| String::from_utf8(b.clone()).unwrap())
        .collect();
    assert_eq!(strings[0], "", "string_table[0] is empty");
    for s in [
        "page-faults",
        "count",
        "main",
        "hot_three",
        "hot;one",
        "/bin/two",
        "abcd",
    ] {
        assert!(strings.iter().any(|x| x == s), "{s} in {strings:?}");
    }
    // Three samples written (the zero one too: pprof keeps what it is given), two sample types
    // entries (sample_type and period_type), three locations, one mapping.
    let count = |n| f.iter().filter(|(x, _)| *x == n).count();
    assert_eq!(count(2), 3);
    assert_eq!(count(4), 3);
    assert_eq!(count(3), 1);
    assert_eq!(count(1), 1);
    // The first sample: locations leaf first (hot_three's id 2, then main's 1), value 300.
    let first = fields(&f.iter().find(|(n, _)| *n == 2).unwrap().1);
    let locs = &first.iter().find(|(n, _)| *n == 1).unwrap().1;
    assert_eq!(locs, &vec![2, 1]);
    let vals = &first.iter().find(|(n, _)| *n == 2).unwrap().1;
    let mut is = protobuf::CodedInputStream::from_bytes(vals);
    assert_eq!(is.read_raw_varint64().unwrap(), 300);
}

#[test]
fn top_functions_count_self_at_the_leaf_and_total_once_per_stack() {
    let mut p = profile();
    // A recursive stack: main → hot_three → hot_three (leaf), 50 more.
    p.stacks.push(crate::model::stacks::Stack {
        frames: vec![1, 1, 0],
    });
    p.samples.push(StackSample {
        tgid: 42,
        comm: "two".into(),
        cgroup: None,
        stack: 2,
        values: vec![50],
    });
    let top = super::functions::top_functions(&p, 42, 10);
    let names: Vec<&str> = top.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(names, ["main", "hot_three", "hot;one"]);
    assert_eq!((top[0].self_value, top[0].total_value), (0, 450));
    assert_eq!((top[1].self_value, top[1].total_value), (350, 350));
    assert!((top[1].share - 350.0 / 450.0).abs() < 1e-9);
    assert!(super::functions::top_functions(&p, 7, 10).is_empty());
    assert_eq!(super::functions::top_functions(&p, 42, 1).len(), 1);
}
