//! The stack outputs on small profiles built by hand: folded lines exactly, the flame graph
//! as SVG text, the pprof message decoded both with the generated types and field by field
//! from the raw bytes, the top functions' self and total values; and deep stacks and many
//! samples, which must neither recurse nor slow to a crawl.
use super::pprof::proto::profile as pb;
use super::*;
use crate::model::stacks::{
    Frame, FrameKind, LOST_STACK_FRAME, SampleType, Stack, StackProfile, StackSample,
};
use protobuf::Message;
use std::io::Read;

fn user(function: Option<&str>, module: &str, build_id: &str, offset: u64) -> Frame {
    Frame {
        kind: FrameKind::User,
        function: function.map(str::to_string),
        module: Some(module.to_string()),
        offset,
        build_id: Some(build_id.to_string()),
        file: None,
        line: None,
    }
}

fn sample(tgid: u32, comm: &str, stack: u32, values: &[u64]) -> StackSample {
    StackSample {
        tgid,
        comm: comm.into(),
        cgroup: None,
        stack,
        values: values.into(),
    }
}

fn bytes_types() -> Vec<SampleType> {
    ["read", "write"]
        .iter()
        .map(|n| SampleType {
            name: n.to_string(),
            unit: "bytes".to_string(),
        })
        .collect()
}

/// Frames 0 main, 1 work (app, with source), 2 memcpy, 3 unsymbolized (libc). Stacks
/// 0 main>work>memcpy, 1 main>work, 2 main>work>libc+0x4242 (leaf first in the data).
fn profile() -> StackProfile {
    let mut main = user(Some("main"), "/usr/bin/app", "abcd", 0x100);
    main.file = Some("app.c".to_string());
    main.line = Some(10);
    let mut work = user(Some("work"), "/usr/bin/app", "abcd", 0x200);
    work.file = Some("app.c".to_string());
    work.line = Some(20);
    let mut first = sample(10, "app", 0, &[100, 50]);
    first.cgroup = Some("/sys/app".into());
    StackProfile {
        sample_types: bytes_types(),
        frames: vec![
            main,
            work,
            user(Some("memcpy"), "/usr/lib/libc.so.6", "ef01", 0x3000),
            user(None, "/usr/lib/libc.so.6", "ef01", 0x4242),
        ],
        stacks: vec![
            Stack {
                frames: vec![2, 1, 0],
            },
            Stack { frames: vec![1, 0] },
            Stack {
                frames: vec![3, 1, 0],
            },
        ],
        samples: vec![
            first,
            sample(10, "app", 1, &[10, 0]),
            // Another process of the same name in the same stack: one folded line.
            sample(11, "app", 0, &[1, 2]),
            sample(12, "other", 2, &[5, 0]),
            // Counts nothing: no line, no pprof sample, no function row.
            sample(13, "idle", 1, &[0, 0]),
        ],
        start_realtime_ns: 1_700_000_000_000_000_000,
        duration_ns: 5_000_000_000,
        lost_stacks: 2,
        truncated_stacks: 0,
    }
}

fn folded(p: &StackProfile) -> String {
    let mut out = Vec::new();
    write_folded(p, &mut out).expect("writing to a Vec");
    String::from_utf8(out).expect("folded lines are UTF-8")
}

#[test]
fn folded_lines_are_root_first_merged_sorted_and_skip_zero() {
    assert_eq!(
        folded(&profile()),
        "app;main;work 10\n\
         app;main;work;memcpy 153\n\
         other;main;work;libc.so.6+0x4242 5\n"
    );
}

#[test]
fn folded_labels_cannot_break_a_line() {
    let mut p = profile();
    p.frames[0].function = Some("a;b\nc\td".to_string());
    p.frames[1].function = Some(String::new());
    p.frames[2].function = Some("worker 2".to_string());
    p.samples = vec![sample(1, "#web content", 0, &[1, 0])];
    assert_eq!(folded(&p), "?web_content;a:b?c?d;?;worker_2 1\n");
    assert_eq!(folded::escape_label("vec 1.5", false), "vec_1.5");
    assert_eq!(folded::escape_label("f(int x) 2a", false), "f(int x) 2a");
    assert_eq!(folded::escape_label("#f", false), "#f");
}

#[test]
fn dangling_indices_read_as_unresolved() {
    let mut p = profile();
    p.stacks.push(Stack {
        frames: vec![2, 99],
    });
    p.samples = vec![sample(1, "a", 3, &[1, 0]), sample(1, "a", 42, &[2, 0])];
    assert_eq!(folded(&p), "a;[unresolved] 2\na;[unresolved];memcpy 1\n");
    let top = top_functions(&p, 1, 10);
    assert_eq!(top[0].function, "[unresolved]");
    assert_eq!(top[0].total_value, 3);
}

#[test]
fn values_past_u64_saturate() {
    let mut p = profile();
    p.samples = vec![
        sample(1, "a", 1, &[u64::MAX, 5]),
        sample(2, "a", 1, &[u64::MAX, 0]),
    ];
    assert_eq!(folded(&p), format!("a;main;work {}\n", u64::MAX));
    let top = top_functions(&p, 1, 1);
    assert_eq!(top[0].total_value, u64::MAX);
    assert!(matches!(
        write_flamegraph(&p, "", Vec::new()),
        Ok(()) | Err(FlamegraphError::CountOverflow)
    ));
}

#[test]
fn flamegraph_is_an_svg_of_the_stacks() {
    let mut out = Vec::new();
    write_flamegraph(&profile(), "", &mut out).expect("a profile with traffic draws");
    let svg = String::from_utf8(out).expect("SVG is UTF-8");
    assert!(svg.contains("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    for name in [
        "DRAM bytes by call stack",
        "memcpy",
        "work",
        "main",
        "other",
    ] {
        assert!(svg.contains(name), "{name} missing");
    }
    assert!(svg.contains("bytes"));
    assert!(svg.contains("2 slices without a recorded stack"));
}

#[test]
fn flamegraph_title_and_unit_follow_the_sample_types() {
    let mut p = profile();
    p.sample_types = vec![SampleType {
        name: "page-faults".to_string(),
        unit: "count".to_string(),
    }];
    assert_eq!(default_title(&p), "page-faults by call stack");
    assert_eq!(count_name(&p.sample_types), "page-faults");
    let mut out = Vec::new();
    write_flamegraph(&p, "nginx <1>", &mut out).expect("draws");
    let svg = String::from_utf8(out).expect("UTF-8");
    assert!(svg.contains("nginx &lt;1&gt;"), "the title is escaped");
    assert!(svg.contains("page-faults"));
}

#[test]
fn flamegraph_of_nothing_is_a_typed_error_and_writes_nothing() {
    let mut p = profile();
    for s in &mut p.samples {
        s.values = smallvec::smallvec![0, 0];
    }
    let mut out = Vec::new();
    let err = write_flamegraph(&p, "", &mut out).expect_err("nothing to draw");
    assert!(matches!(err, FlamegraphError::Empty));
    assert_eq!(err.to_string(), "no stacks recorded");
    assert!(out.is_empty());
    assert!(matches!(
        write_flamegraph(&StackProfile::default(), "", Vec::new()),
        Err(FlamegraphError::Empty)
    ));
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("a gzip stream");
    raw
}

fn pprof_bytes(p: &StackProfile) -> Vec<u8> {
    let mut out = Vec::new();
    write_pprof(p, &mut out).expect("writing to a Vec");
    gunzip(&out)
}

/// A location's function names, innermost first.
fn names(m: &pb::Profile, location_id: u64) -> Vec<&str> {
    let loc = &m.location[(location_id - 1) as usize];
    assert_eq!(loc.id, location_id);
    loc.line
        .iter()
        .map(|l| {
            let f = &m.function[(l.function_id - 1) as usize];
            assert_eq!(f.id, l.function_id);
            m.string_table[f.name as usize].as_str()
        })
        .collect()
}

fn label<'m>(m: &'m pb::Profile, s: &'m pb::Sample, key: &str) -> Option<&'m pb::Label> {
    s.label
        .iter()
        .find(|l| m.string_table[l.key as usize] == key)
}

#[test]
fn pprof_carries_types_samples_and_labels() {
    let m = pb::Profile::parse_from_bytes(&pprof_bytes(&profile())).expect("a Profile");
    let s = |i: i64| m.string_table[i as usize].as_str();
    assert_eq!(m.string_table[0], "");
    let types: Vec<(&str, &str)> = m
        .sample_type
        .iter()
        .map(|t| (s(t.type_), s(t.unit)))
        .collect();
    assert_eq!(types, [("read", "bytes"), ("write", "bytes")]);
    assert_eq!(s(m.default_sample_type), "read");
    assert_eq!(s(m.period_type.type_), "read");
    assert_eq!(s(m.period_type.unit), "bytes");
    assert_eq!(m.period, 1);
    assert_eq!(m.time_nanos, 1_700_000_000_000_000_000);
    assert_eq!(m.duration_nanos, 5_000_000_000);
    let comments: Vec<&str> = m.comment.iter().map(|&c| s(c)).collect();
    assert_eq!(comments, ["2 slices without a recorded stack"]);
    // The zero sample is left out.
    assert_eq!(m.sample.len(), 4);
    let first = &m.sample[0];
    assert_eq!(first.value, [100, 50]);
    let stack: Vec<&str> = first
        .location_id
        .iter()
        .flat_map(|&l| names(&m, l))
        .collect();
    assert_eq!(stack, ["memcpy", "work", "main"], "leaf first");
    assert_eq!(label(&m, first, "pid").map(|l| l.num), Some(10));
    assert_eq!(label(&m, first, "comm").map(|l| s(l.str)), Some("app"));
    assert_eq!(
        label(&m, first, "cgroup").map(|l| s(l.str)),
        Some("/sys/app")
    );
    let last = &m.sample[3];
    assert_eq!(last.value, [5, 0]);
    assert_eq!(label(&m, last, "pid").map(|l| l.num), Some(12));
    assert!(label(&m, last, "cgroup").is_none());
    let stack: Vec<&str> = last
        .location_id
        .iter()
        .flat_map(|&l| names(&m, l))
        .collect();
    assert_eq!(stack, ["libc.so.6+0x4242", "work", "main"]);
    // The same stack twice: the same locations.
    assert_eq!(m.sample[2].location_id, first.location_id);
}

#[test]
fn pprof_has_one_mapping_location_and_function_per_distinct_thing() {
    let m = pb::Profile::parse_from_bytes(&pprof_bytes(&profile())).expect("a Profile");
    let s = |i: i64| m.string_table[i as usize].as_str();
    assert_eq!(m.location.len(), 4);
    assert_eq!(m.function.len(), 4);
    assert_eq!(m.mapping.len(), 2);
    let by_file = |f: &str| {
        m.mapping
            .iter()
            .find(|x| s(x.filename) == f)
            .expect("mapping")
    };
    let app = by_file("/usr/bin/app");
    assert_eq!(s(app.build_id), "abcd");
    assert_eq!(app.memory_limit, 0x201);
    assert!(app.has_functions && app.has_filenames && app.has_line_numbers);
    let libc = by_file("/usr/lib/libc.so.6");
    assert_eq!(s(libc.build_id), "ef01");
    assert!(!libc.has_functions, "one of its frames has no symbol");
    let memcpy = m
        .location
        .iter()
        .find(|l| names(&m, l.id) == ["memcpy"])
        .expect("memcpy's location");
    assert_eq!(memcpy.address, 0x3000);
    assert_eq!(memcpy.mapping_id, libc.id);
    let main = m
        .location
        .iter()
        .find(|l| names(&m, l.id) == ["main"])
        .expect("main's location");
    assert_eq!(main.line[0].line, 10);
    assert_eq!(main.mapping_id, app.id);
    let main_fn = &m.function[(main.line[0].function_id - 1) as usize];
    assert_eq!(s(main_fn.filename), "app.c");
    for (i, x) in m.location.iter().enumerate() {
        assert_eq!(x.id, i as u64 + 1);
    }
}

/// Reads the top-level fields by number from the wire, so the schema is checked against
/// pprof's numbers and not only against itself.
#[test]
fn pprof_wire_has_pprof_field_numbers() {
    use protobuf::CodedInputStream;
    use protobuf::rt::WireType;
    let raw = pprof_bytes(&profile());
    let mut input = CodedInputStream::from_bytes(&raw);
    let (mut strings, mut sample_types, mut samples) = (Vec::new(), 0, 0);
    let (mut time, mut duration, mut period) = (None, None, None);
    while let Some(tag) = input.read_raw_tag_or_eof().expect("a tag") {
        let wire = WireType::new(tag & 7).expect("a wire type");
        match tag >> 3 {
            1 => {
                sample_types += 1;
                input.skip_field(wire).expect("skip");
            }
            2 => {
                samples += 1;
                input.skip_field(wire).expect("skip");
            }
            6 => strings.push(input.read_string().expect("a string")),
            9 => time = Some(input.read_int64().expect("time_nanos")),
            10 => duration = Some(input.read_int64().expect("duration_nanos")),
            12 => period = Some(input.read_int64().expect("period")),
            _ => input.skip_field(wire).expect("skip"),
        }
    }
    assert_eq!(sample_types, 2);
    assert_eq!(samples, 4);
    assert_eq!(strings.first().map(String::as_str), Some(""));
    for name in [
        "read",
        "bytes",
        "memcpy",
        "pid",
        "comm",
        "/usr/bin/app",
        "abcd",
    ] {
        assert!(
            strings.iter().any(|s| s == name),
            "{name} not in the string table"
        );
    }
    assert_eq!(time, Some(1_700_000_000_000_000_000));
    assert_eq!(duration, Some(5_000_000_000));
    assert_eq!(period, Some(1));
}

#[test]
fn pprof_of_an_empty_profile_is_valid() {
    let m =
        pb::Profile::parse_from_bytes(&pprof_bytes(&StackProfile::default())).expect("a Profile");
    assert_eq!(m.string_table, [""]);
    assert!(m.sample.is_empty());
}

#[test]
fn top_functions_split_self_and_total() {
    let top = top_functions(&profile(), 10, 10);
    let rows: Vec<(&str, u64, u64)> = top
        .iter()
        .map(|f| (f.function.as_str(), f.self_value, f.total_value))
        .collect();
    assert_eq!(
        rows,
        [("main", 0, 160), ("work", 10, 160), ("memcpy", 150, 150)]
    );
    assert_eq!(top[0].share, 1.0);
    assert!((top[2].share - 150.0 / 160.0).abs() < 1e-12);
    assert_eq!(top_functions(&profile(), 10, 1).len(), 1);
    assert!(top_functions(&profile(), 999, 10).is_empty());
}

#[test]
fn top_functions_count_recursion_once_and_markers_as_functions() {
    let mut p = profile();
    p.frames.push(Frame::marker(LOST_STACK_FRAME));
    // work > work > work > memcpy, and a lost stack.
    p.stacks = vec![
        Stack {
            frames: vec![2, 1, 1, 1],
        },
        Stack { frames: vec![4] },
    ];
    p.samples = vec![sample(7, "r", 0, &[6, 0]), sample(7, "r", 1, &[2, 0])];
    let top = top_functions(&p, 7, 10);
    let rows: Vec<(&str, u64, u64)> = top
        .iter()
        .map(|f| (f.function.as_str(), f.self_value, f.total_value))
        .collect();
    assert_eq!(
        rows,
        [("memcpy", 6, 6), ("work", 0, 6), (LOST_STACK_FRAME, 2, 2)]
    );
    assert!((top[2].share - 0.25).abs() < 1e-12);
}

/// Two stacks 10 000 frames deep: every output finishes and none recurses.
#[test]
fn deep_stacks() {
    let depth = 10_000u32;
    let mut p = profile();
    p.frames = (0..depth)
        .map(|i| user(Some(&format!("f{i}")), "/usr/bin/app", "abcd", u64::from(i)))
        .collect();
    p.stacks = vec![
        Stack {
            frames: (0..depth).collect(),
        },
        Stack {
            frames: (0..depth).rev().collect(),
        },
    ];
    p.samples = (0..100u32)
        .map(|i| sample(i % 10, "deep", i % 2, &[1, 1]))
        .collect();
    let lines = folded(&p);
    assert_eq!(lines.lines().count(), 2);
    assert!(lines.lines().all(|l| l.ends_with(" 100")));
    let mut svg = Vec::new();
    write_flamegraph(&p, "", &mut svg).expect("draws");
    let m = pb::Profile::parse_from_bytes(&pprof_bytes(&p)).expect("a Profile");
    assert_eq!(m.sample.len(), 100);
    assert_eq!(m.location.len(), depth as usize);
    assert_eq!(m.sample[0].location_id.len(), depth as usize);
    let top = top_functions(&p, 0, 3);
    assert_eq!(top.len(), 3);
    assert_eq!(top[0].total_value, 10 * 2);
}

/// 200 000 samples of 1 000 processes: every output finishes, the counts add up.
#[test]
fn many_samples() {
    let mut p = profile();
    p.samples = (0..200_000u32)
        .map(|i| sample(i % 1_000, &format!("p{}", i % 1_000), i % 3, &[1, 0]))
        .collect();
    let lines = folded(&p);
    assert_eq!(lines.lines().count(), 3_000);
    let mut svg = Vec::new();
    write_flamegraph(&p, "", &mut svg).expect("draws");
    let m = pb::Profile::parse_from_bytes(&pprof_bytes(&p)).expect("a Profile");
    assert_eq!(m.sample.len(), 200_000);
    assert_eq!(m.location.len(), 4);
    let top = top_functions(&p, 7, 10);
    assert_eq!(top[0].total_value, 200);
    assert_eq!(top[0].share, 1.0);
}
