//! Traffic by call stack as a pprof profile (the `perftools.profiles.Profile` message of
//! github.com/google/pprof, proto/profile.proto), gzipped as Go's net/http/pprof serves it:
//! pprof, Pyroscope, Parca and Perfetto read it.
//!
//! Written field by field with the protobuf runtime imc already uses (rust-protobuf's
//! `CodedOutputStream`), by profile.proto's field numbers. One sample per (process, stack),
//! its locations leaf first, a value per sample type (read and write bytes, or the stand-in's
//! count), labelled with the process's `pid` and `comm`. A mapping per module (with its build
//! ID), a location per distinct frame, a function per distinct (name, file).
use crate::model::stacks::{Frame, StackProfile};
use protobuf::CodedOutputStream;
use std::collections::HashMap;
use std::io::{self, Write};

// profile.proto's field numbers.
const PROFILE_SAMPLE_TYPE: u32 = 1;
const PROFILE_SAMPLE: u32 = 2;
const PROFILE_MAPPING: u32 = 3;
const PROFILE_LOCATION: u32 = 4;
const PROFILE_FUNCTION: u32 = 5;
const PROFILE_STRING_TABLE: u32 = 6;
const PROFILE_TIME_NANOS: u32 = 9;
const PROFILE_DURATION_NANOS: u32 = 10;
const PROFILE_PERIOD_TYPE: u32 = 11;
const PROFILE_PERIOD: u32 = 12;
const PROFILE_DEFAULT_SAMPLE_TYPE: u32 = 14;
const VALUE_TYPE_TYPE: u32 = 1;
const VALUE_TYPE_UNIT: u32 = 2;
const SAMPLE_LOCATION_ID: u32 = 1;
const SAMPLE_VALUE: u32 = 2;
const SAMPLE_LABEL: u32 = 3;
const LABEL_KEY: u32 = 1;
const LABEL_STR: u32 = 2;
const LABEL_NUM: u32 = 3;
const MAPPING_ID: u32 = 1;
const MAPPING_FILENAME: u32 = 5;
const MAPPING_BUILD_ID: u32 = 6;
const MAPPING_HAS_FUNCTIONS: u32 = 7;
const LOCATION_ID: u32 = 1;
const LOCATION_MAPPING_ID: u32 = 2;
const LOCATION_ADDRESS: u32 = 3;
const LOCATION_LINE: u32 = 4;
const LINE_FUNCTION_ID: u32 = 1;
const LINE_LINE: u32 = 2;
const FUNCTION_ID: u32 = 1;
const FUNCTION_NAME: u32 = 2;
const FUNCTION_SYSTEM_NAME: u32 = 3;
const FUNCTION_FILENAME: u32 = 4;

/// One message being written.
struct Msg(Vec<u8>);

impl Msg {
    fn new() -> Msg {
        Msg(Vec::new())
    }
    fn with(&mut self, f: impl FnOnce(&mut CodedOutputStream) -> protobuf::Result<()>) {
        let mut os = CodedOutputStream::vec(&mut self.0);
        // Writing into a Vec cannot fail.
        let _ = f(&mut os).and_then(|()| os.flush());
    }
    fn uint(&mut self, field: u32, v: u64) -> &mut Msg {
        if v != 0 {
            self.with(|o| o.write_uint64(field, v));
        }
        self
    }
    fn int(&mut self, field: u32, v: i64) -> &mut Msg {
        if v != 0 {
            self.with(|o| o.write_int64(field, v));
        }
        self
    }
    fn msg(&mut self, field: u32, m: &Msg) -> &mut Msg {
        self.with(|o| o.write_bytes(field, &m.0));
        self
    }
    fn string(&mut self, field: u32, s: &str) -> &mut Msg {
        self.with(|o| o.write_string(field, s));
        self
    }
    /// A packed repeated varint field.
    fn packed(&mut self, field: u32, vs: impl Iterator<Item = u64>) -> &mut Msg {
        let mut inner = Vec::new();
        {
            let mut os = CodedOutputStream::vec(&mut inner);
            for v in vs {
                let _ = os.write_raw_varint64(v);
            }
            let _ = os.flush();
        }
        self.with(|o| o.write_bytes(field, &inner));
        self
    }
}

/// The string table: index 0 is "".
struct Strings {
    ids: HashMap<String, i64>,
    list: Vec<String>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            ids: HashMap::from([(String::new(), 0)]),
            list: vec![String::new()],
        }
    }
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.list.len() as i64;
        self.ids.insert(s.to_string(), i);
        self.list.push(s.to_string());
        i
    }
}

/// The profile message's bytes (not gzipped).
pub fn encode(profile: &StackProfile) -> Vec<u8> {
    let mut s = Strings::new();
    let mut p = Msg::new();
    for t in &profile.sample_types {
        let mut vt = Msg::new();
        vt.int(VALUE_TYPE_TYPE, s.id(&t.name))
            .int(VALUE_TYPE_UNIT, s.id(&t.unit));
        p.msg(PROFILE_SAMPLE_TYPE, &vt);
    }
    let locations = write_locations(&mut p, &mut s, &profile.frames);
    for sample in &profile.samples {
        let Some(stack) = profile.stacks.get(sample.stack as usize) else {
            continue;
        };
        let mut m = Msg::new();
        m.packed(
            SAMPLE_LOCATION_ID,
            stack
                .frames
                .iter()
                .filter_map(|&f| locations.get(f as usize).copied()),
        );
        m.packed(SAMPLE_VALUE, sample.values.iter().copied());
        let mut pid = Msg::new();
        pid.int(LABEL_KEY, s.id("pid"))
            .int(LABEL_NUM, i64::from(sample.tgid));
        let mut comm = Msg::new();
        comm.int(LABEL_KEY, s.id("comm"))
            .int(LABEL_STR, s.id(&sample.comm));
        m.msg(SAMPLE_LABEL, &pid).msg(SAMPLE_LABEL, &comm);
        if let Some(cg) = &sample.cgroup {
            let mut l = Msg::new();
            l.int(LABEL_KEY, s.id("cgroup")).int(LABEL_STR, s.id(cg));
            m.msg(SAMPLE_LABEL, &l);
        }
        p.msg(PROFILE_SAMPLE, &m);
    }
    p.int(PROFILE_TIME_NANOS, profile.start_realtime_ns as i64)
        .int(PROFILE_DURATION_NANOS, profile.duration_ns as i64);
    if let Some(t) = profile.sample_types.first() {
        let mut vt = Msg::new();
        vt.int(VALUE_TYPE_TYPE, s.id(&t.name))
            .int(VALUE_TYPE_UNIT, s.id(&t.unit));
        p.msg(PROFILE_PERIOD_TYPE, &vt).int(PROFILE_PERIOD, 1);
        p.int(PROFILE_DEFAULT_SAMPLE_TYPE, s.id(&t.name));
    }
    for text in &s.list {
        p.string(PROFILE_STRING_TABLE, text);
    }
    p.0
}

/// Writes the mappings, functions and locations of `frames`; returns each frame's location id.
fn write_locations(p: &mut Msg, s: &mut Strings, frames: &[Frame]) -> Vec<u64> {
    let mut mappings: HashMap<(&str, &str), u64> = HashMap::new();
    let mut functions: HashMap<(String, &str), u64> = HashMap::new();
    let mut ids = Vec::with_capacity(frames.len());
    for (i, f) in frames.iter().enumerate() {
        let mapping = f.module.as_deref().map(|m| {
            let key = (m, f.build_id.as_deref().unwrap_or(""));
            let next = mappings.len() as u64 + 1;
            *mappings.entry(key).or_insert_with(|| {
                let mut mm = Msg::new();
                mm.uint(MAPPING_ID, next)
                    .int(MAPPING_FILENAME, s.id(key.0))
                    .int(MAPPING_BUILD_ID, s.id(key.1))
                    .uint(MAPPING_HAS_FUNCTIONS, u64::from(f.function.is_some()));
                p.msg(PROFILE_MAPPING, &mm);
                next
            })
        });
        let name = f.label();
        let file = f.file.as_deref().unwrap_or("");
        let next = functions.len() as u64 + 1;
        let func = *functions.entry((name.clone(), file)).or_insert_with(|| {
            let mut fm = Msg::new();
            fm.uint(FUNCTION_ID, next)
                .int(FUNCTION_NAME, s.id(&name))
                .int(FUNCTION_SYSTEM_NAME, s.id(&name))
                .int(FUNCTION_FILENAME, s.id(file));
            p.msg(PROFILE_FUNCTION, &fm);
            next
        });
        let id = i as u64 + 1;
        let mut line = Msg::new();
        line.uint(LINE_FUNCTION_ID, func)
            .int(LINE_LINE, f.line.map_or(0, i64::from));
        let mut loc = Msg::new();
        loc.uint(LOCATION_ID, id)
            .uint(LOCATION_MAPPING_ID, mapping.unwrap_or(0))
            .uint(LOCATION_ADDRESS, f.offset)
            .msg(LOCATION_LINE, &line);
        p.msg(PROFILE_LOCATION, &loc);
        ids.push(id);
    }
    ids
}

/// Writes `profile` as a gzipped pprof profile.
pub fn write_pprof(profile: &StackProfile, out: impl Write) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&encode(profile))?;
    gz.finish()?;
    Ok(())
}
