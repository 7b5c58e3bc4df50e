//! `format/<name>` text → FormatField. Invariants beyond "no panic": every accepted field has
//! in-range, non-overlapping bits, and a value as wide as the field round-trips through
//! place_value without error while one bit wider is refused.
#![no_main]
use imc::discovery::format::{field_width, parse_format, place_value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(field) = parse_format("f", text) else {
        return;
    };
    let mut seen = 0u64;
    for r in &field.bits {
        assert!(r.start() <= r.end() && *r.end() < 64, "{text:?} → {r:?}");
        for b in *r.start()..=*r.end() {
            assert!(seen & (1 << b) == 0, "{text:?}: bit {b} twice");
            seen |= 1 << b;
        }
    }
    let width = field_width(&field);
    assert_eq!(width, seen.count_ones(), "{text:?}");
    let max = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let placed = place_value(&field, max).expect("a value of the field's width fits");
    assert_eq!(
        placed, seen,
        "{text:?}: all-ones must set exactly the field's bits"
    );
    if width < 64 {
        assert!(
            place_value(&field, max + 1).is_err(),
            "{text:?}: one bit too wide accepted"
        );
    }
});
