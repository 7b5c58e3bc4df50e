//! A profile as pprof's `Profile` message, gzipped (what Go's net/http/pprof serves and
//! `go tool pprof`, Pyroscope and Parca read). The message types are imc-proto's, generated
//! from `imc-proto/proto/profile.proto` (pprof's published `perftools.profiles` schema).
//!
//! What the message holds:
//! - one sample type per [`StackProfile::sample_types`], the first the default one and the
//!   period type (period 1: every byte or event is counted, none sampled);
//! - one Sample per [`crate::model::stacks::StackSample`] that counts anything: its stack's
//!   location ids leaf first, one value per sample type (a missing value is 0; a value past
//!   `i64::MAX` is `i64::MAX`), labels `pid` (num), `comm` and, where known, `cgroup` (str);
//! - one Location per distinct frame: its address is the frame's offset (the ELF file offset
//!   in its module, else the raw address), its one Line names the frame's function (the
//!   frame's label where no symbol covers it, so every viewer shows what the flame graph
//!   shows) and source line;
//! - one Mapping per distinct (module, build id), its file name and build id set, its range
//!   `[0, highest offset + 1)` so every address in it lies inside, `has_functions` (and the
//!   file and line flags) set where every frame in it has one;
//! - one Function per distinct (name, source file);
//! - comments saying how many slices had no stack and how many stacks were cut short.
use super::common::{Stacks, sample_total};
use crate::model::stacks::{Frame, StackProfile, StackSample};
use flate2::Compression;
use flate2::write::GzEncoder;
use protobuf::{Message, MessageField};
use std::collections::HashMap;
use std::io::{self, Write};

/// The generated `perftools.profiles` types.
pub mod proto {
    pub use imc_proto::profile;
}
use proto::profile as pb;

/// Writes the profile as a gzipped pprof `Profile`. Each sample is written as it is made (the
/// message's other fields after them: a protobuf message's fields may come in any order), so a
/// profile of a million stacks is never held as messages whole.
pub fn write_pprof(profile: &StackProfile, out: impl Write) -> io::Result<()> {
    let mut gz = GzEncoder::new(out, Compression::default());
    let mut os = protobuf::CodedOutputStream::new(&mut gz);
    let rest = build(profile, |s| os.write_message(SAMPLE_FIELD, &s))
        .and_then(|rest| rest.write_to(&mut os).and_then(|()| os.flush()))
        .map_err(io::Error::other);
    drop(os);
    rest?;
    gz.finish()?.flush()
}

/// `Profile.sample`'s field number in profile.proto.
const SAMPLE_FIELD: u32 = 2;

/// The profile as a pprof message (not yet serialized).
pub fn to_pprof(profile: &StackProfile) -> pb::Profile {
    let mut samples = Vec::new();
    let mut out = build(profile, |s| {
        samples.push(s);
        Ok(())
    })
    .unwrap_or_default();
    out.sample = samples;
    out
}

/// The profile's message without its samples, each sample handed to `sample` as it is made.
fn build(
    profile: &StackProfile,
    mut sample: impl FnMut(pb::Sample) -> protobuf::Result<()>,
) -> protobuf::Result<pb::Profile> {
    let stacks = Stacks::new(profile);
    let mut b = Builder {
        strings: Strings::new(),
        stacks: &stacks,
        locations: vec![0; stacks.slot_count()],
        mappings: HashMap::new(),
        functions: HashMap::new(),
        out: pb::Profile::new(),
    };
    for t in &profile.sample_types {
        let value_type = b.value_type(&t.name, &t.unit);
        b.out.sample_type.push(value_type);
    }
    if let Some(first) = profile.sample_types.first() {
        b.out.default_sample_type = b.strings.index(&first.name);
        b.out.period_type = MessageField::some(b.value_type(&first.name, &first.unit));
    }
    b.out.period = 1;
    b.out.time_nanos = to_i64(profile.start_realtime_ns);
    b.out.duration_nanos = to_i64(profile.duration_ns);
    for s in &profile.samples {
        if sample_total(s) > 0 {
            sample(b.sample(s, profile.sample_types.len()))?;
        }
    }
    if profile.lost_stacks > 0 {
        let c = format!("{} slices without a recorded stack", profile.lost_stacks);
        let c = b.strings.index(&c);
        b.out.comment.push(c);
    }
    if profile.truncated_stacks > 0 {
        let c = format!("{} stacks cut short", profile.truncated_stacks);
        let c = b.strings.index(&c);
        b.out.comment.push(c);
    }
    b.out.string_table = b.strings.table;
    Ok(b.out)
}

/// A count as pprof's signed 64 bits, saturating.
fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The string table: each string once, `""` at index 0.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn index(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = to_i64(self.table.len() as u64);
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The message as it is built; ids are assigned in order of first use (1, 2, ...), so the
/// same profile always gives the same bytes.
struct Builder<'a> {
    strings: Strings,
    stacks: &'a Stacks<'a>,
    /// Location id per frame slot; 0 until the slot's frame is first used.
    locations: Vec<u64>,
    /// Index into `out.mapping` per (module, build id).
    mappings: HashMap<(&'a str, Option<&'a str>), usize>,
    /// Function id per (name, source file).
    functions: HashMap<(String, Option<&'a str>), u64>,
    out: pb::Profile,
}

impl<'a> Builder<'a> {
    fn value_type(&mut self, name: &str, unit: &str) -> pb::ValueType {
        let mut v = pb::ValueType::new();
        v.type_ = self.strings.index(name);
        v.unit = self.strings.index(unit);
        v
    }

    fn sample(&mut self, sample: &StackSample, types: usize) -> pb::Sample {
        let mut s = pb::Sample::new();
        let stacks = self.stacks;
        for slot in stacks.slots(sample.stack) {
            let id = self.location(slot);
            s.location_id.push(id);
        }
        s.value = (0..types)
            .map(|i| to_i64(sample.values.get(i).copied().unwrap_or(0)))
            .collect();
        let mut pid = pb::Label::new();
        pid.key = self.strings.index("pid");
        pid.num = i64::from(sample.tgid);
        s.label.push(pid);
        s.label.push(self.str_label("comm", &sample.comm));
        if let Some(cgroup) = &sample.cgroup {
            s.label.push(self.str_label("cgroup", cgroup));
        }
        s
    }

    fn str_label(&mut self, key: &str, value: &str) -> pb::Label {
        let mut l = pb::Label::new();
        l.key = self.strings.index(key);
        l.str = self.strings.index(value);
        l
    }

    /// The location id of a frame slot, adding the location (and its mapping and function)
    /// the first time.
    fn location(&mut self, slot: usize) -> u64 {
        if let Some(&id) = self.locations.get(slot)
            && id != 0
        {
            return id;
        }
        let stacks = self.stacks;
        let frame = stacks.frame(slot);
        let mut loc = pb::Location::new();
        loc.id = self.out.location.len() as u64 + 1;
        loc.address = frame.offset;
        loc.mapping_id = self.mapping(frame);
        let mut line = pb::Line::new();
        line.function_id = self.function(frame);
        line.line = frame.line.map_or(0, i64::from);
        loc.line.push(line);
        let id = loc.id;
        self.out.location.push(loc);
        if let Some(l) = self.locations.get_mut(slot) {
            *l = id;
        }
        id
    }

    /// The mapping id of a frame's module (0 where it has none), widening the mapping's range
    /// to the frame's offset and clearing its flags where the frame lacks what they promise.
    fn mapping(&mut self, frame: &'a Frame) -> u64 {
        let Some(module) = frame.module.as_deref() else {
            return 0;
        };
        let key = (module, frame.build_id.as_deref());
        let index = match self.mappings.get(&key) {
            Some(&i) => i,
            None => {
                let mut m = pb::Mapping::new();
                m.id = self.out.mapping.len() as u64 + 1;
                m.filename = self.strings.index(module);
                m.build_id = frame
                    .build_id
                    .as_deref()
                    .map_or(0, |b| self.strings.index(b));
                m.has_functions = true;
                m.has_filenames = true;
                m.has_line_numbers = true;
                self.out.mapping.push(m);
                let i = self.out.mapping.len() - 1;
                self.mappings.insert(key, i);
                i
            }
        };
        let Some(m) = self.out.mapping.get_mut(index) else {
            return 0;
        };
        m.memory_limit = m.memory_limit.max(frame.offset.saturating_add(1));
        m.has_functions &= frame.function.is_some();
        m.has_filenames &= frame.file.is_some();
        m.has_line_numbers &= frame.line.is_some();
        m.id
    }

    /// The function id of a frame's (label, source file).
    fn function(&mut self, frame: &'a Frame) -> u64 {
        let key = (frame.label(), frame.file.as_deref());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        let mut f = pb::Function::new();
        f.id = self.out.function.len() as u64 + 1;
        f.name = self.strings.index(&key.0);
        f.system_name = f.name;
        f.filename = key.1.map_or(0, |file| self.strings.index(file));
        let id = f.id;
        self.out.function.push(f);
        self.functions.insert(key, id);
        id
    }
}
