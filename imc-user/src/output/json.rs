//! The interval object and the report as JSON lines (`imc top --json`, `imc report --json`).
use serde::Serialize;

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// An interval object or a report as JSON. With `counts_unit` (a stand-in source: nothing
/// measured bytes) every byte field is null rather than 0, and a burst's rate is `counts_per_s`
/// in that unit instead of `bytes_per_s`.
pub fn to_json(value: &impl Serialize, counts_unit: Option<&str>) -> serde_json::Result<String> {
    let Some(unit) = counts_unit else {
        return serde_json::to_string(value);
    };
    let mut v = serde_json::to_value(value)?;
    counts_not_bytes(&mut v, unit);
    serde_json::to_string(&v)
}

/// [`to_json`] of rows grouped `by`: a group row's pid, tgid and comm are null unless the group
/// key is that field (a group is not one of its members), in the tasks and in every burst's.
pub fn to_json_by(
    value: &impl Serialize,
    counts_unit: Option<&str>,
    by: crate::model::GroupBy,
) -> serde_json::Result<String> {
    let mut v = serde_json::to_value(value)?;
    if let Some(unit) = counts_unit {
        counts_not_bytes(&mut v, unit);
    }
    member_identity_null(&mut v, by.identity());
    serde_json::to_string(&v)
}

fn member_identity_null(v: &mut serde_json::Value, keep: crate::model::Identity) {
    use serde_json::Value;
    fn rows(rows: Option<&mut Value>, keep: crate::model::Identity) {
        for row in rows.and_then(Value::as_array_mut).into_iter().flatten() {
            for (k, kept) in [("pid", keep.pid), ("tgid", keep.tgid), ("comm", keep.comm)] {
                if let (false, Some(f)) = (kept, row.get_mut(k)) {
                    *f = Value::Null;
                }
            }
        }
    }
    rows(v.get_mut("tasks"), keep);
    let bursts = v.get_mut("bursts").and_then(Value::as_array_mut);
    for b in bursts.into_iter().flatten() {
        rows(b.get_mut("tasks"), keep);
    }
}

fn counts_not_bytes(v: &mut serde_json::Value, unit: &str) {
    use serde_json::Value;
    const BYTES: [&str; 3] = ["read_bytes", "write_bytes", "total_bytes"];
    fn null_rows(rows: Option<&mut Value>) {
        for row in rows.and_then(Value::as_array_mut).into_iter().flatten() {
            for k in BYTES {
                if let Some(f) = row.get_mut(k) {
                    *f = Value::Null;
                }
            }
        }
    }
    null_rows(v.get_mut("packages"));
    null_rows(v.get_mut("tasks"));
    if let Some(f) = v.get_mut("unattributed_bytes") {
        *f = Value::Null;
    }
    if let Some(f) = v.get_mut("unattributed") {
        *f = Value::Null;
    }
    let bursts = v.get_mut("bursts").and_then(Value::as_array_mut);
    for b in bursts.into_iter().flatten() {
        null_rows(b.get_mut("tasks"));
        if let Some(obj) = b.as_object_mut() {
            let rate = obj.insert("bytes_per_s".into(), Value::Null);
            obj.insert("counts_per_s".into(), rate.unwrap_or(Value::Null));
            obj.insert("unit".into(), Value::from(unit));
        }
    }
}
