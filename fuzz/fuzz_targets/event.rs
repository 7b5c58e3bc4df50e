//! Event strings → Encoded against a small fixed PMU set shaped like skx-2socket plus a PMU with
//! a split field and an offcore-style config1 field. libpfm4 strings reach the real library when
//! it is installed. Beyond "no panic": every error is one line naming the string, and every
//! sysfs result belongs to a PMU of the set with the event text kept verbatim.
#![no_main]
use imc::discovery::format::parse_format;
use imc::events::parse_event;
use imc::model::{EventAlias, Pmu};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::OnceLock;

fn pmu(name: &str, ty: u32, formats: &[(&str, &str)], events: &[(&str, &str)]) -> Pmu {
    Pmu {
        name: name.into(),
        pmu_type: ty,
        cpumask: Some(vec![0, 20]),
        formats: formats
            .iter()
            .map(|(n, t)| (n.to_string(), parse_format(n, t).unwrap()))
            .collect::<BTreeMap<_, _>>(),
        events: events
            .iter()
            .map(|(n, t)| {
                (
                    n.to_string(),
                    EventAlias {
                        name: n.to_string(),
                        terms: t.to_string(),
                        scale: Some(6.103515625e-5),
                        unit: Some("MiB".into()),
                    },
                )
            })
            .collect(),
        path: Default::default(),
    }
}

fn pmus() -> &'static [Pmu] {
    static P: OnceLock<Vec<Pmu>> = OnceLock::new();
    P.get_or_init(|| {
        let imc_f: &[(&str, &str)] = &[
            ("event", "config:0-7"),
            ("umask", "config:8-15"),
            ("edge", "config:18"),
            ("inv", "config:23"),
            ("thresh", "config:24-31"),
        ];
        let imc_e: &[(&str, &str)] = &[
            ("cas_count_read", "event=0x04,umask=0x03"),
            ("cas_count_write", "event=0x04,umask=0x0c"),
        ];
        vec![
            pmu(
                "cpu",
                4,
                &[
                    ("event", "config:0-7"),
                    ("umask", "config:8-15"),
                    ("offcore_rsp", "config1:0-63"),
                ],
                &[("cpu-cycles", "event=0x3c")],
            ),
            pmu("uncore_imc_0", 13, imc_f, imc_e),
            pmu("uncore_imc_1", 14, imc_f, imc_e),
            pmu("uncore_imc_3", 16, imc_f, &[]),
            pmu(
                "spr_m",
                40,
                &[("event", "config:0-7"), ("umask", "config:8-15,32-55")],
                &[],
            ),
            pmu("software", 1, &[("event", "config:0-63")], &[]),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_event(pmus(), text) {
        Ok(v) => {
            assert!(!v.is_empty(), "{text:?}: Ok with no counter");
            for e in &v {
                assert_eq!(e.event, text);
                if text.contains('/') {
                    assert!(
                        pmus()
                            .iter()
                            .any(|p| p.name == e.pmu && p.pmu_type == e.pmu_type)
                    );
                }
            }
        }
        Err(e) => {
            let m = e.to_string();
            assert!(
                !m.contains('\n') && !m.contains('\r'),
                "{text:?}: multi-line error {m:?}"
            );
        }
    }
});
