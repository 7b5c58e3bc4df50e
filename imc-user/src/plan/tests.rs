//! The plan on the project's own fixture trees: which counters, who reads them, what ticks.
use super::*;
use crate::model::{Direction, QueuePart, SlotScope, StallPart};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

fn kernel(release: &str) -> Kernel {
    Kernel {
        release: Some(release.into()),
        hz: Some(250),
        hz_source: Some("boot/config".into()),
        nmi_watchdog: false,
    }
}

fn request(command: CommandKind) -> Request {
    Request {
        command,
        events: Vec::new(),
        backend: None,
        exclude: Vec::new(),
        freq: None,
        precise: false,
        interval_ms: 1000,
        drain_ms: 50,
        batch_ms: None,
        stand_in: Vec::new(),
        latency: None,
        weight: Default::default(),
        stacks: None,
    }
}

fn plan_on(tree: &str, k: &Kernel, req: &Request) -> Plan {
    let found = crate::discovery::discover(&fixture(tree)).expect("fixture discovers");
    plan(&found, k, req).expect("plans")
}

#[test]
fn every_channel_of_every_package_in_two_slots() {
    // Sapphire Rapids, 2 sockets, 8 channels each: 32 counters, one read and one write slot.
    let p = plan_on("spr-2socket", &kernel("6.8.0"), &request(CommandKind::Top));
    assert_eq!(p.source.to_string(), "intel-uncore-imc");
    assert_eq!(traffic(&p.counters).count(), 32);
    for pkg in [0, 1] {
        for dir in [Direction::Read, Direction::Write] {
            let chans: Vec<u32> = p
                .counters
                .iter()
                .filter(|c| c.package == Some(pkg) && c.direction == Some(dir))
                .filter_map(|c| c.channel)
                .collect();
            assert_eq!(chans, (0..8).collect::<Vec<_>>(), "package {pkg} {dir:?}");
        }
    }
    let slots: Vec<_> = p
        .slots
        .iter()
        .filter(|s| {
            !matches!(
                s.role,
                SlotRole::Weight(_) | SlotRole::RemoteWeight(_) | SlotRole::Stall(_)
            )
        })
        .collect();
    assert_eq!(slots.len(), 2);
    assert!(slots.iter().all(|s| s.scope == SlotScope::Package));
    assert_eq!(p.tick.source, TickSource::KernelTick);
    assert!(!p.tick.adds_interrupts);
    assert!(p.tick.switches);
    let controller_refusals: Vec<_> = p
        .refusals
        .iter()
        .filter(|r| !r.reason.starts_with("weight") && !r.reason.contains("latency events"))
        .collect();
    assert!(controller_refusals.is_empty(), "{controller_refusals:?}");
}

/// The memory controller's counters of a plan (its weights and other counters left out).
fn traffic(counters: &[Counter]) -> impl Iterator<Item = &Counter> {
    counters.iter().filter(|c| c.role == CounterRole::Traffic)
}

#[test]
fn package_reader_depends_on_the_kernel_release() {
    let found = crate::discovery::discover(&fixture("spr-2socket")).unwrap();
    let pkg0_cpus: Vec<u32> = found.topology.packages[0]
        .cpus
        .iter()
        .copied()
        .filter(|c| found.topology.online.contains(c))
        .collect();
    // 6.7+: any CPU of the package reads Intel uncore counters, so every one of them may.
    let new = plan(&found, &kernel("6.7.0"), &request(CommandKind::Record)).unwrap();
    let c = new.counters.iter().find(|c| c.package == Some(0)).unwrap();
    assert_eq!(
        c.reader,
        Reader::PackageTick {
            cpus: pkg0_cpus.clone(),
            idle_every_ms: 100
        }
    );
    // Before 6.7 (and with no release known): only the CPU the counters are opened on.
    for k in [kernel("6.6.30"), Kernel::default()] {
        let old = plan(&found, &k, &request(CommandKind::Record)).unwrap();
        let c = old.counters.iter().find(|c| c.package == Some(0)).unwrap();
        match &c.reader {
            Reader::PackageTick { cpus, .. } => assert_eq!(cpus, &c.cpus, "{k:?}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn amd_counters_are_read_by_their_own_cpu_on_any_kernel() {
    let p = plan_on(
        "zen4-2socket",
        &kernel("6.10.0"),
        &request(CommandKind::Top),
    );
    assert_eq!(p.source.to_string(), "amd-umc");
    for c in traffic(&p.counters) {
        match &c.reader {
            Reader::PackageTick { cpus, .. } => assert_eq!(cpus, &c.cpus),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn zen2_total_events_are_planned_as_total() {
    let p = plan_on("zen2-1socket", &kernel("6.1.0"), &request(CommandKind::Top));
    assert_eq!(p.source.to_string(), "amd-df");
    assert!(traffic(&p.counters).next().is_some());
    assert!(traffic(&p.counters).all(|c| c.direction == Some(Direction::Total)));
    assert_eq!(
        p.slots
            .iter()
            .filter(|s| matches!(s.role, SlotRole::Traffic(_)))
            .count(),
        1
    );
    assert_eq!(p.slots[0].direction, Some(Direction::Total));
}

#[test]
fn freq_keeps_a_timer_of_its_own_and_says_it_adds_interrupts() {
    let mut req = request(CommandKind::Top);
    req.freq = Some(1000);
    let p = plan_on("spr-2socket", &kernel("6.8.0"), &req);
    assert_eq!(p.tick.source, TickSource::CpuClock);
    assert!(p.tick.adds_interrupts);
    assert_eq!(p.tick.hz, Some(1000.0));
    // Its ticks come on top of the switches, never instead of them: every count is charged
    // to the task that ran when it was made.
    assert!(p.tick.switches);
    assert_eq!(p.records, Some(Records::Aggregated));
    assert_eq!(p.tick.label(), "cpu-clock:1000Hz+sched_switch");
    let cfg = crate::sampler::from_plan::config_of(&p, &[0, 1], 100, false);
    assert_eq!(
        cfg.tick,
        crate::sampler::TickSource::CpuClock {
            freq: 1000,
            switches: true
        }
    );
    assert!(cfg.aggregate);
}

#[test]
fn stat_reads_from_userspace_at_each_interval() {
    let p = plan_on("spr-2socket", &kernel("6.8.0"), &request(CommandKind::Stat));
    assert!(p.slots.is_empty());
    assert!(
        p.counters
            .iter()
            .all(|c| c.reader == Reader::Userspace { every_ms: 1000 })
    );
    assert_eq!(p.counters.len(), 32);
}

#[test]
fn events_narrow_the_set_and_too_many_slots_are_refused() {
    let root = fixture("spr-2socket");
    let found = crate::discovery::discover(&root).unwrap();
    let enc = |t: &str| (t.to_string(), crate::events::resolve(&root, t).unwrap());
    let mut req = request(CommandKind::Top);
    req.events = vec![enc("uncore_imc_0/cas_count_read/")];
    let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
    assert_eq!(p.source.to_string(), "events");
    assert_eq!(
        traffic(&p.counters).count(),
        2,
        "one PMU instance on each package"
    );
    assert_eq!(
        p.slots
            .iter()
            .filter(|s| matches!(s.role, SlotRole::Traffic(_)))
            .count(),
        1
    );

    // Nine per-CPU events (as software/config=N/ encodes them): a slot each, one too many.
    req.events = (0..9)
        .map(|i| {
            let e = Encoded {
                event: format!("software/config={i}/"),
                pmu: "software".into(),
                pmu_type: 1,
                config: i,
                ..Default::default()
            };
            (e.event.clone(), vec![e])
        })
        .collect();
    match plan(&found, &kernel("6.8.0"), &req) {
        Err(e @ PlanError::TooManySlots { .. }) => {
            assert!(e.to_string().contains("9 counters"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_multiplexed_data_fabric_is_read_and_scaled_from_userspace() {
    // Zen 3: 8 DRAM channel events on an amd_df with 4 counters.
    let p = plan_on("zen3-ibs", &kernel("6.8.0"), &request(CommandKind::Top));
    assert_eq!(p.source.to_string(), "amd-df");
    assert_eq!(traffic(&p.counters).count(), 8);
    assert!(
        traffic(&p.counters).all(|c| c.reader == Reader::Userspace { every_ms: 50 }),
        "{:?}",
        p.counters[0].reader
    );
    assert!(
        p.notes.iter().any(|n| n.contains("4 hardware counters")),
        "{:?}",
        p.notes
    );
}

#[test]
fn every_fixture_with_a_memory_controller_plans_all_its_channels() {
    // (tree, source, counters, slots): every channel of every package, read and write (or
    // total where that is all the hardware has).
    let cases = [
        ("skx-2socket", "intel-uncore-imc", 24, 2),
        ("spr-2socket", "intel-uncore-imc", 32, 2),
        ("icx-gaps", "intel-uncore-imc", 32, 2),
        ("zen4-2socket", "amd-umc", 8, 2),
        ("zen2-1socket", "amd-df", 8, 1),
        ("zen3-ibs", "amd-df", 8, 1),
        ("knl", "knl-edc", 28, 4),
        ("power9-2chip", "power-nest-imc", 16, 2),
        ("icl-client", "intel-client-imc", 2, 2),
    ];
    for (tree, source, n, slots) in cases {
        for command in [
            CommandKind::Top,
            CommandKind::Record,
            CommandKind::Serve,
            CommandKind::Stat,
        ] {
            let p = plan_on(tree, &kernel("6.8.0"), &request(command));
            assert_eq!(p.source.to_string(), source, "{tree} {command:?}");
            assert_eq!(traffic(&p.counters).count(), n, "{tree} {command:?}");
            let want = if command == CommandKind::Stat {
                0
            } else {
                slots
            };
            let traffic_slots = p
                .slots
                .iter()
                .filter(|s| matches!(s.role, SlotRole::Traffic(_)))
                .count();
            assert_eq!(traffic_slots, want, "{tree} {command:?}");
            assert!(
                traffic(&p.counters).all(|c| c.package.is_some() && c.direction.is_some()),
                "{tree}"
            );
            // Everything else is a per-CPU weight or stall counter, and only where something
            // samples; latency counters are read at each interval, by no tick.
            assert!(
                latency_counters_of(&p)
                    .iter()
                    .all(|c| command.samples() && c.reader == Reader::Interval { every_ms: 1000 }),
                "{tree} {command:?}"
            );
            assert!(
                p.counters
                    .iter()
                    .filter(|c| c.role != CounterRole::Traffic && c.role != CounterRole::Latency)
                    .all(
                        |c| (c.role == CounterRole::Weight || c.role == CounterRole::Stall)
                            && c.package.is_none()
                            && command.samples()
                    ),
                "{tree} {command:?}"
            );
        }
    }
}

#[test]
fn a_guest_gets_a_labelled_stand_in_for_sampling_and_a_refusal_for_stat() {
    let root = fixture("vm-guest");
    let found = crate::discovery::discover(&root).unwrap();
    let mut req = request(CommandKind::Top);
    req.stand_in = vec![(
        "page-faults".into(),
        crate::events::resolve(&root, "page-faults").unwrap(),
    )];
    let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
    assert_eq!(p.source.to_string(), "proxy:page-faults");
    assert_eq!(p.refusals.len(), 1, "{:?}", p.refusals);
    assert!(
        p.refusals[0].reason.contains("hypervisor"),
        "{:?}",
        p.refusals
    );
    assert!(p.counters.iter().all(|c| c.bytes_per_count.is_none()));
    match plan(&found, &kernel("6.8.0"), &request(CommandKind::Stat)) {
        Err(e @ PlanError::NothingToRead(_)) => {
            assert!(e.to_string().contains("hypervisor"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn power_core_and_thread_imc_are_planned_per_core_and_per_task_with_the_kernels_refusals() {
    let p = plan_on(
        "power9-imc-full",
        &kernel("6.8.0"),
        &request(CommandKind::Top),
    );
    assert_eq!(
        p.source.to_string(),
        "power-nest-imc",
        "nest IMC stays the bandwidth source"
    );
    let core: Vec<&OtherUse> = p
        .other_sources
        .iter()
        .filter(|o| o.pmu == "core_imc" && !o.refused)
        .collect();
    assert_eq!(core.len(), 32, "one core_imc use per core: {core:?}");
    assert!(core[1].what.contains("CPU 4"), "{:?}", core[1]);
    let refused = |pmu: &str, what: &str| {
        p.other_sources
            .iter()
            .any(|o| o.pmu == pmu && o.refused && o.what.contains(what))
    };
    assert!(refused("core_imc", "per task"));
    assert!(refused("thread_imc", "CPU-wide"));
    assert!(
        p.other_sources
            .iter()
            .any(|o| o.pmu == "thread_imc" && !o.refused && o.what.contains("per task"))
    );
    assert!(p.other_sources.iter().any(|o| o.pmu == "trace_imc"));
}

#[test]
fn stat_latency_plans_the_offcore_pair_on_every_cpu_beside_ddr_and_mcdram() {
    let root = fixture("knl");
    let found = crate::discovery::discover(&root).unwrap();
    let enc = |event: &str, config1| Encoded {
        event: event.into(),
        pmu: "knl".into(),
        pmu_type: 4,
        config: 0x01b7,
        config1,
        ..Default::default()
    };
    let mut req = request(CommandKind::Stat);
    req.latency = Some(LatencyRequest::Offcore(Box::new((
        enc(
            "knl::OFFCORE_RESPONSE_0:DMND_DATA_RD:OUTSTANDING",
            0x4000000001,
        ),
        enc("knl::OFFCORE_RESPONSE_1:DMND_DATA_RD:ANY_RESPONSE", 0x10001),
    ))));
    let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
    assert_eq!(p.source.to_string(), "knl-imc+knl-edc+latency");
    let offcore: Vec<&Counter> = p.counters.iter().filter(|c| c.package.is_none()).collect();
    assert_eq!(offcore.len(), 2, "the pair");
    assert!(offcore.iter().all(|c| c.cpus == found.topology.online));
    assert_eq!(offcore[0].encoded.config1, 0x4000000001);
    assert_eq!(p.counters.len(), 28 + 2);
}

fn latency_plan(tree: &str) -> Plan {
    let mut req = request(CommandKind::Stat);
    req.latency = Some(LatencyRequest::Queues);
    plan_on(tree, &kernel("6.8.0"), &req)
}

fn latency_counters_of(p: &Plan) -> Vec<&Counter> {
    p.counters
        .iter()
        .filter(|c| c.role == CounterRole::Latency)
        .collect()
}

/// Generic counters per (PMU, CPU): every counter but the fixed DRAM clock.
fn generic_per_box(p: &Plan) -> std::collections::BTreeMap<(String, u32), usize> {
    let mut m = std::collections::BTreeMap::new();
    for c in &p.counters {
        if c.queue == Some(QueuePart::DramClocks) {
            assert_eq!(
                c.encoded.config, 0xff,
                "the fixed counter (UNCORE_FIXED_EVENT)"
            );
            continue;
        }
        *m.entry((c.pmu.clone(), c.cpus[0])).or_default() += 1;
    }
    m
}

#[test]
fn stat_latency_on_skx_counts_the_read_queue_of_every_channel_beside_bandwidth() {
    let p = latency_plan("skx-2socket");
    let lat = latency_counters_of(&p);
    // 6 channels × 2 packages × (clock, RPQ occupancy, RPQ inserts).
    assert_eq!(lat.len(), 6 * 2 * 3);
    for c in &lat {
        assert!(c.channel.is_some() && c.package.is_some());
        assert!(matches!(c.reader, Reader::Userspace { .. }));
    }
    let occ = lat
        .iter()
        .find(|c| c.queue == Some(QueuePart::ReadOccupancy))
        .unwrap();
    // skylakex uncore-memory.json UNC_M_RPQ_OCCUPANCY: EventCode 0x80; RPQ_INSERTS 0x10.
    assert_eq!(occ.encoded.config, 0x80);
    assert!(lat.iter().any(|c| c.encoded.config == 0x10));
    // Bandwidth kept; the write queue dropped and said.
    assert_eq!(traffic(&p.counters).count(), 24);
    assert!(generic_per_box(&p).values().all(|&n| n <= 4));
    assert!(
        p.refusals
            .iter()
            .any(|r| r.event.as_deref() == Some("wpq_occupancy,wpq_inserts"))
    );
}

#[test]
fn stat_latency_on_spr_counts_pseudo_channel_0_and_says_what_it_drops() {
    let p = latency_plan("spr-2socket");
    let lat = latency_counters_of(&p);
    assert_eq!(lat.len(), 8 * 2 * 3);
    // sapphirerapids uncore-memory.json: UNC_M_RPQ_OCCUPANCY_PCH0 0x80, RPQ_INSERTS.PCH0
    // 0x10 umask 0x01.
    let configs: Vec<u64> = lat
        .iter()
        .filter(|c| c.package == Some(0) && c.channel == Some(3))
        .map(|c| c.encoded.config)
        .collect();
    assert_eq!(configs, [0xff, 0x80, 0x0110]);
    assert!(
        lat.iter()
            .all(|c| c.queue == Some(QueuePart::DramClocks) || c.pseudo_channel == Some(0))
    );
    assert!(generic_per_box(&p).values().all(|&n| n <= 4));
    assert_eq!(
        p.refusals
            .iter()
            .filter(|r| r.reason.contains("4 generic"))
            .count(),
        3
    );
}

#[test]
fn gnr_channels_are_channels_with_two_sub_channels() {
    // Without --latency: 12 channels per package (not 24), each read by both schedulers.
    let p = plan_on("gnr-2socket", &kernel("6.8.0"), &request(CommandKind::Stat));
    for pkg in [0, 1] {
        let mut chans: Vec<(u32, u32)> = traffic(&p.counters)
            .filter(|c| c.package == Some(pkg) && c.direction == Some(Direction::Read))
            .map(|c| (c.channel.unwrap(), c.sub_channel.unwrap()))
            .collect();
        chans.sort_unstable();
        let want: Vec<(u32, u32)> = (0..12).flat_map(|ch| [(ch, 0), (ch, 1)]).collect();
        assert_eq!(chans, want, "package {pkg}");
    }
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["counters"][0]["sub_channel"], 0);
    // serve's channel label is the PMU: both schedulers are one series.
    let c = &p.counters[0];
    assert_eq!(p.channel_label(c), c.pmu);

    // With --latency: a read queue per sub-channel (pseudo-channel 0) takes the four generic
    // counters; bandwidth is dropped and said, never multiplexed.
    let p = latency_plan("gnr-2socket");
    let lat = latency_counters_of(&p);
    assert_eq!(lat.len(), 12 * 2 * 5);
    let sub1: Vec<u64> = lat
        .iter()
        .filter(|c| c.package == Some(1) && c.channel == Some(11) && c.sub_channel == Some(1))
        .map(|c| c.encoded.config)
        .collect();
    // graniterapids: UNC_M_RPQ_OCCUPANCY_SCH1_PCH0 0x82, UNC_M_RPQ_INSERTS.SCH1_PCH0 0x10/0x40.
    assert_eq!(sub1, [0x82, 0x4010]);
    assert_eq!(traffic(&p.counters).count(), 0);
    assert!(generic_per_box(&p).values().all(|&n| n <= 4));
    assert!(
        p.refusals
            .iter()
            .any(|r| r.event.as_deref() == Some("read,write"))
    );
}

#[test]
fn stat_latency_on_zen4_reads_the_l3_sampled_dram_latency_per_ccx() {
    let p = latency_plan("zen4-2socket");
    let lat = latency_counters_of(&p);
    // One CCX per socket here, local and remote pairs.
    assert_eq!(lat.len(), 2 * 4);
    let near = lat
        .iter()
        .find(|c| c.queue == Some(QueuePart::SampledLatency { remote: false }))
        .unwrap();
    // amdzen4 cache.json l3_xi_sampled_latency.dram_near 0xac/0x01, EnAllCores, EnAllSlices,
    // SliceId 3, ThreadMask 3.
    assert_eq!(near.encoded.config, 0x0303_c000_0000_01ac);
    assert_eq!(near.pmu, "amd_l3");
    assert_eq!(traffic(&p.counters).count(), 8, "UMC bandwidth kept");
    assert!(p.refusals.is_empty() || p.refusals.iter().all(|r| !r.reason.contains("generic")));
}

#[test]
fn stat_latency_refuses_where_there_are_no_queues() {
    for (tree, why) in [
        ("vm-guest", "hypervisor"),
        ("tgl-client", "client"),
        ("zen2-1socket", "Zen 1-3"),
    ] {
        let found = crate::discovery::discover(&fixture(tree)).unwrap();
        let mut req = request(CommandKind::Stat);
        req.latency = Some(LatencyRequest::Queues);
        match plan(&found, &kernel("6.8.0"), &req) {
            Err(e @ PlanError::NoQueues(_)) => {
                let m = e.to_string();
                assert!(e.is_bad_request() && m.contains(why), "{tree}: {m}");
                assert_eq!(m.lines().count(), 1);
            }
            other => panic!("{tree}: {other:?}"),
        }
    }
}

#[test]
fn record_sleeps_long_unless_a_counter_is_read_from_userspace() {
    let k = kernel("6.8.0");
    let batched = |command| Request {
        batch_ms: Some(1000),
        ..request(command)
    };
    // Every counter comes in the records: a second between drains, intervals closed after.
    let p = plan_on("skx-2socket", &k, &batched(CommandKind::Record));
    let d = p.drain.expect("a sampling plan says how it drains");
    assert_eq!((d.every_ms, d.intervals_closed_after), (1000, true));
    match &p.counters[0].reader {
        Reader::PackageTick { idle_every_ms, .. } => assert_eq!(*idle_every_ms, 2000),
        other => panic!("{other:?}"),
    }
    // Zen 2's multiplexed data fabric is read from userspace at the interval's pace.
    let p = plan_on("zen2-1socket", &k, &batched(CommandKind::Serve));
    assert!(traffic(&p.counters).all(|c| matches!(c.reader, Reader::Userspace { every_ms: 50 })));
    let d = p.drain.unwrap();
    assert_eq!((d.every_ms, d.intervals_closed_after), (50, true));
    assert!(d.reason.contains("userspace"), "{}", d.reason);
    // A live view drains every interval; stat has no drain.
    let d = plan_on("skx-2socket", &k, &request(CommandKind::Top))
        .drain
        .unwrap();
    assert_eq!((d.every_ms, d.intervals_closed_after), (50, false));
    assert_eq!(
        plan_on("skx-2socket", &k, &batched(CommandKind::Stat)).drain,
        None
    );
}

#[test]
fn weights_are_per_cpu_core_counters_with_their_encoding_and_reason() {
    let p = plan_on(
        "skx-2socket",
        &kernel("6.8.0"),
        &request(CommandKind::Record),
    );
    let w = p
        .weighting
        .as_ref()
        .expect("a sampling plan says how it weighs");
    assert_eq!(w.method, "traffic", "{w:?}");
    assert!(w.read.is_some(), "{w:?}");
    let weights: Vec<&Counter> = p
        .counters
        .iter()
        .filter(|c| c.role == CounterRole::Weight)
        .collect();
    assert!(!weights.is_empty());
    for c in &weights {
        assert_eq!(c.scope, CounterScope::Cpu);
        assert!(matches!(c.reader, Reader::Tick), "{c:?}");
        assert_eq!(c.cpus.len(), 80, "every CPU counts its own traffic");
        assert_eq!(
            c.encoded.pmu_type, 4,
            "the core PMU's own type (PERF_TYPE_RAW)"
        );
        assert_ne!(c.encoded.config, 0);
        let slot = &p.slots[c.slot.unwrap()];
        assert!(
            matches!(slot.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_)),
            "{slot:?}"
        );
        assert_eq!(slot.scope, SlotScope::Cpu);
    }
    // stat divides nothing.
    let stat = plan_on("skx-2socket", &kernel("6.8.0"), &request(CommandKind::Stat));
    assert!(stat.weighting.is_none());
    assert!(stat.counters.iter().all(|c| c.role == CounterRole::Traffic));
}

#[test]
fn cpu_time_is_a_refusal_with_its_reason() {
    // Asked for.
    let mut req = request(CommandKind::Top);
    req.weight = WeightRequest::CpuTime;
    let p = plan_on("skx-2socket", &kernel("6.8.0"), &req);
    let w = p.weighting.unwrap();
    assert_eq!((w.method.as_str(), w.read), ("cpu-time", None));
    assert!(w.reason.contains("--weight cpu-time"), "{}", w.reason);
    // No weight; the stall pair still tells each task's waits.
    assert!(p.counters.iter().all(|c| matches!(
        c.role,
        CounterRole::Traffic | CounterRole::Stall | CounterRole::Latency
    )));
    // No core PMU under the root.
    let mut found = crate::discovery::discover(&fixture("skx-2socket")).unwrap();
    found.cores.clear();
    let p = plan(&found, &kernel("6.8.0"), &request(CommandKind::Top)).unwrap();
    let w = p.weighting.unwrap();
    assert_eq!(w.method, "cpu-time");
    assert!(w.reason.contains("no core PMU"), "{}", w.reason);
    // A hypervisor's virtual PMU.
    found.hypervisor = true;
    let p = plan(&found, &kernel("6.8.0"), &request(CommandKind::Top)).unwrap();
    assert!(p.weighting.unwrap().reason.contains("hypervisor"));
}

#[test]
fn a_hybrid_part_weighs_each_cpu_by_its_own_core_pmu_in_one_slot_per_role() {
    let p = plan_on(
        "adl-hybrid",
        &kernel("6.8.0"),
        &request(CommandKind::Record),
    );
    let found = crate::discovery::discover(&fixture("adl-hybrid")).unwrap();
    let pmu = |name: &str| found.cores.iter().find(|c| c.pmu.name == name).unwrap();
    let (core, atom) = (pmu("cpu_core"), pmu("cpu_atom"));
    assert_ne!(core.pmu.pmu_type, atom.pmu.pmu_type);
    let weights: Vec<&Counter> = p
        .counters
        .iter()
        .filter(|c| c.role == CounterRole::Weight)
        .collect();
    for c in &weights {
        let on = if c.pmu == "cpu_core" { core } else { atom };
        assert_eq!(c.cpus, on.cpus, "{c:?}");
        assert_eq!(c.encoded.pmu_type, on.pmu.pmu_type, "{c:?}");
    }
    // The read weight of both kinds of core is one slot; so is the write weight.
    for dir in [Direction::Read, Direction::Write] {
        let slots: std::collections::BTreeSet<usize> = weights
            .iter()
            .filter(|c| c.weight.unwrap().direction == Some(dir))
            .map(|c| c.slot.unwrap())
            .collect();
        let pmus: std::collections::BTreeSet<&str> = weights
            .iter()
            .filter(|c| c.weight.unwrap().direction == Some(dir))
            .map(|c| c.pmu.as_str())
            .collect();
        assert_eq!(slots.len(), 1, "{dir:?}: {weights:?}");
        assert_eq!(pmus.len(), 2, "{dir:?}: {weights:?}");
    }
    let cfg = crate::sampler::from_plan::config_of(&p, &found.topology.online, 1000, false);
    let read_slot = weights[0].slot.unwrap();
    let plan = &cfg.slots[read_slot];
    assert_eq!(plan.instances.len(), found.topology.online.len());
    assert_eq!(
        plan.attr_for(atom.cpus[0]).type_,
        atom.pmu.pmu_type,
        "an E-core opens its own PMU's event"
    );
    assert_eq!(plan.attr_for(core.cpus[0]).type_, core.pmu.pmu_type);
}

#[test]
fn several_events_of_one_role_each_have_a_slot_and_weigh_together() {
    // Zen 4: DRAM fills near and far, and the L2 prefetchers' misses: three read weights.
    let p = plan_on("zen4-2socket", &kernel("6.8.0"), &request(CommandKind::Top));
    let specs = crate::sampler::from_plan::slot_specs(&p);
    let reads = specs
        .iter()
        .filter(|s| {
            matches!(
                s.role,
                crate::model::SlotRole::Weight(Some(Direction::Read))
            )
        })
        .count();
    let remote = specs
        .iter()
        .filter(|s| matches!(s.role, crate::model::SlotRole::RemoteWeight(_)))
        .count();
    assert!(reads >= 2 && remote == 1, "{specs:?}");
    let w = p.weighting.unwrap();
    assert!(w.numa && w.write.is_none(), "{w:?}");
    assert!(
        w.reason.contains("writes are spread by the read weight"),
        "{}",
        w.reason
    );
    // One package: no remote reads, and the write event that needed their offcore register.
    let one = plan_on("icl-client", &kernel("6.8.0"), &request(CommandKind::Top));
    assert!(!one.weighting.unwrap().numa);
}

#[test]
fn the_nmi_watchdog_is_said_to_take_a_counter_from_the_weights() {
    let mut k = kernel("6.8.0");
    k.nmi_watchdog = true;
    let p = plan_on("skx-2socket", &k, &request(CommandKind::Record));
    assert!(
        p.notes.iter().any(|n| n.contains("nmi_watchdog")),
        "{:?}",
        p.notes
    );
    let quiet = plan_on(
        "skx-2socket",
        &kernel("6.8.0"),
        &request(CommandKind::Record),
    );
    assert!(!quiet.notes.iter().any(|n| n.contains("nmi_watchdog")));
}

#[test]
fn weights_carry_their_line_size_and_a_fidelity_the_measured_one_replaces() {
    let mut p = plan_on(
        "skx-2socket",
        &kernel("6.8.0"),
        &request(CommandKind::Record),
    );
    let weights: Vec<&Counter> = p.counters.iter().filter(|c| c.weight.is_some()).collect();
    assert!(!weights.is_empty());
    assert!(weights.iter().all(|c| c.bytes_per_count == Some(64.0)));
    let w = p.weighting.clone().unwrap();
    // Every weight event at 1 until measured, by the names the plan shows.
    assert_eq!(w.fidelity.len(), 3, "{:?}", w.fidelity);
    assert!(w.fidelity.values().all(|&f| f == 1.0));
    // Skylake-SP's write event cannot tell local from remote: said, with the rule.
    assert!(
        w.reason
            .contains("L2_LINES_OUT.NON_SILENT cannot tell local from remote"),
        "{}",
        w.reason
    );
    assert!(w.reason.contains("device traffic"), "{}", w.reason);
    let measured = std::collections::BTreeMap::from([
        ("L2_LINES_OUT.NON_SILENT".to_string(), 0.8),
        ("NOT.A.WEIGHT.OF.THIS.PLAN".to_string(), 0.5),
        // Not a measurement: ignored.
        (
            "OCR.ALL_READS.L3_MISS_LOCAL_DRAM.SNOOP_MISS_OR_NO_FWD".to_string(),
            0.0,
        ),
    ]);
    super::weights::apply_fidelity(&mut p, &measured);
    let f = &p.weighting.as_ref().unwrap().fidelity;
    assert_eq!(f["L2_LINES_OUT.NON_SILENT"], 0.8);
    assert_eq!(
        f["OCR.ALL_READS.L3_MISS_LOCAL_DRAM.SNOOP_MISS_OR_NO_FWD"],
        1.0
    );
    assert!(!f.contains_key("NOT.A.WEIGHT.OF.THIS.PLAN"));
    // One package: no remote weight, so no blind-write sentence.
    let one = plan_on(
        "zen2-1socket",
        &kernel("6.8.0"),
        &request(CommandKind::Record),
    );
    let r = one.weighting.unwrap().reason;
    assert!(!r.contains("cannot tell local from remote"), "{r}");
}

#[test]
fn the_records_are_decided_once_from_the_tick_and_precise() {
    let k = kernel("6.8.0");
    let records = |command, freq, precise| {
        let req = Request {
            freq,
            precise,
            ..request(command)
        };
        let p = plan_on("skx-2socket", &k, &req);
        let cfg = crate::sampler::from_plan::config_of(&p, &[0, 1], 100, false);
        // The sampler aggregates exactly when the plan says so.
        assert_eq!(
            cfg.aggregate,
            p.records == Some(Records::Aggregated),
            "{p:?}"
        );
        p.records
    };
    assert_eq!(
        records(CommandKind::Top, None, false),
        Some(Records::Aggregated)
    );
    assert_eq!(
        records(CommandKind::Record, None, true),
        Some(Records::PerSwitch)
    );
    // A finer timer keeps the switch boundaries: its ticks are added to them.
    assert_eq!(
        records(CommandKind::Serve, Some(999), false),
        Some(Records::Aggregated)
    );
    assert_eq!(
        records(CommandKind::Top, Some(999), true),
        Some(Records::PerSwitch)
    );
    assert_eq!(records(CommandKind::Stat, None, false), None);
}

#[test]
fn typed_slots_keep_the_contract_spelling_in_json() {
    let p = plan_on("spr-2socket", &kernel("6.8.0"), &request(CommandKind::Top));
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["records"], "aggregated");
    assert_eq!(json["tick"]["source"], "kernel-tick");
    for (slot, j) in p.slots.iter().zip(json["slots"].as_array().unwrap()) {
        let role = match slot.role {
            SlotRole::Traffic(_) => "traffic",
            SlotRole::Weight(_) | SlotRole::RemoteWeight(_) => "weight",
            SlotRole::Stall(_) => "stall",
            SlotRole::Other => "other",
        };
        assert_eq!(j["role"], role, "{j}");
        assert_eq!(j["scope"], slot.scope.as_str(), "{j}");
        let remote = matches!(slot.role, SlotRole::RemoteWeight(_));
        assert_eq!(j.get("remote").is_some_and(|r| r == true), remote, "{j}");
        // What attribution gets is the slot's own role, not a re-reading of strings.
        assert_eq!(slot.spec().role, slot.role);
    }
    assert!(
        p.slots
            .iter()
            .any(|s| matches!(s.role, SlotRole::RemoteWeight(_)))
    );
    for (c, j) in p.counters.iter().zip(json["counters"].as_array().unwrap()) {
        assert_eq!(j["role"], c.role.as_str(), "{j}");
    }
}

/// The plan's stall counters: (event, part, config) in slot order.
fn stall_counters(p: &Plan) -> Vec<(&str, StallPart, u64)> {
    p.counters
        .iter()
        .filter(|c| c.role == CounterRole::Stall && c.stall != Some(StallPart::Time))
        .map(|c| (c.value_key.as_str(), c.stall.unwrap(), c.encoded.config))
        .collect()
}

#[test]
fn stall_pairs_are_per_cpu_counters_chosen_per_model_with_their_encoding() {
    // CYCLE_ACTIVITY.STALLS_L3_MISS: event 0xa3, umask 0x06, cmask 6 (config:24-31); the cycles
    // event 0x3c. Zen 4: ex_no_retire.load_not_complete 0xd6/0xa2, ls_not_halted_cyc 0x76.
    let intel = vec![
        (
            "CYCLE_ACTIVITY.STALLS_L3_MISS",
            StallPart::Stalled,
            0x06_00_06_a3,
        ),
        ("CPU_CLK_UNHALTED.THREAD", StallPart::Cycles, 0x3c),
    ];
    for tree in ["skx-2socket", "icx-gaps", "spr-2socket", "gnr-2socket"] {
        let p = plan_on(tree, &kernel("6.8.0"), &request(CommandKind::Top));
        assert_eq!(stall_counters(&p), intel, "{tree}");
        let v = p.victims.as_ref().unwrap();
        assert_eq!(v.stalled.as_deref(), Some("CYCLE_ACTIVITY.STALLS_L3_MISS"));
        assert_eq!(v.cycles.as_deref(), Some("CPU_CLK_UNHALTED.THREAD"));
        for c in p.counters.iter().filter(|c| c.role == CounterRole::Stall) {
            assert_eq!(c.scope, CounterScope::Cpu, "{tree}");
            assert_eq!(c.reader, Reader::Tick, "{tree}");
            assert!(c.weight.is_none() && c.bytes_per_count.is_none(), "{tree}");
            let slot = &p.slots[c.slot.unwrap()];
            assert_eq!(Some(slot.role), c.stall.map(SlotRole::Stall), "{tree}");
        }
        // Weights unchanged beside them.
        assert_eq!(
            p.slots
                .iter()
                .filter(|s| matches!(s.role, SlotRole::Weight(_) | SlotRole::RemoteWeight(_)))
                .count(),
            3
        );
    }
    let p = plan_on("zen4-2socket", &kernel("6.8.0"), &request(CommandKind::Top));
    assert_eq!(
        stall_counters(&p),
        [
            ("ex_no_retire.load_not_complete", StallPart::Stalled, 0xa2d6),
            ("ls_not_halted_cyc", StallPart::Cycles, 0x76)
        ]
    );
    // stat counts no tasks: no stall pair, no victims.
    let p = plan_on("skx-2socket", &kernel("6.8.0"), &request(CommandKind::Stat));
    assert!(stall_counters(&p).is_empty() && p.victims.is_none());
}

#[test]
fn stalls_are_refused_where_the_core_has_no_counter_left_or_no_event() {
    // Skylake-SP with Hyper-Threading has 4 generic counters: three weights and the stall event
    // fill them, and with the NMI watchdog on the fixed cycles counter the cycles need a fifth.
    let mut k = kernel("6.8.0");
    k.nmi_watchdog = true;
    let p = plan_on("skx-2socket", &k, &request(CommandKind::Top));
    assert!(stall_counters(&p).is_empty());
    let v = p.victims.as_ref().unwrap();
    assert!(v.stalled.is_none() && v.cycles.is_none());
    assert!(
        v.reason.contains("4 generic counters") && v.reason.contains("nmi_watchdog=0"),
        "{}",
        v.reason
    );
    assert!(p.refusals.iter().any(|r| r.reason.contains("not fit")));
    // Ice Lake-SP has 8: the cycles take one of the upper four.
    let p = plan_on("icx-gaps", &k, &request(CommandKind::Top));
    assert_eq!(stall_counters(&p).len(), 2);
    // Zen 4: six counters, the watchdog's one taken, five left for three weights and the pair.
    let p = plan_on("zen4-2socket", &k, &request(CommandKind::Top));
    assert_eq!(stall_counters(&p).len(), 2);
    // POWER9: the four weights hold PMC1-4 and the stall event can only use PMC4.
    let p = plan_on("power9-2chip", &kernel("6.8.0"), &request(CommandKind::Top));
    assert!(stall_counters(&p).is_empty());
    let v = p.victims.unwrap();
    assert!(v.reason.contains("counter 4"), "{}", v.reason);
    // A guest, Zen 2 (no ex_no_retire before Zen 4), Knights Landing (no L3): each says why.
    for (tree, why) in [
        ("vm-guest", "hypervisor"),
        ("zen2-1socket", "Zen 4"),
        ("knl", "no L3"),
    ] {
        let root = fixture(tree);
        let mut req = request(CommandKind::Top);
        req.stand_in = vec![(
            "page-faults".into(),
            crate::events::resolve(&root, "page-faults").unwrap(),
        )];
        let p = plan_on(tree, &kernel("6.8.0"), &req);
        assert!(stall_counters(&p).is_empty(), "{tree}");
        let v = p.victims.unwrap();
        assert!(v.stalled.is_none(), "{tree}");
        assert!(v.reason.contains(why), "{tree}: {}", v.reason);
    }
}

#[test]
fn stalls_take_slots_only_after_the_weights_and_are_refused_without_two() {
    // Per-CPU -e events: no package traffic, so no weights; five leave three slots, for the
    // pair and cpu-clock (its seconds); six leave two, the pair without seconds; seven one,
    // too few.
    let root = fixture("spr-2socket");
    let found = crate::discovery::discover(&root).unwrap();
    let soft = |n: u64| {
        (0..n)
            .map(|i| {
                let e = Encoded {
                    event: format!("software/config={i}/"),
                    pmu: "software".into(),
                    pmu_type: 1,
                    config: i,
                    ..Default::default()
                };
                (e.event.clone(), vec![e])
            })
            .collect::<Vec<_>>()
    };
    let mut req = request(CommandKind::Top);
    let time = |p: &Plan| p.counters.iter().any(|c| c.stall == Some(StallPart::Time));
    req.events = soft(5);
    let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
    assert_eq!(stall_counters(&p).len(), 2);
    assert!(time(&p));
    assert_eq!(p.slots.len(), 8);
    req.events = soft(6);
    let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
    assert_eq!(stall_counters(&p).len(), 2);
    assert!(!time(&p));
    assert!(p.notes.iter().any(|n| n.contains("not seconds")));
    assert_eq!(p.slots.len(), 8);
    req.events = soft(7);
    let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
    assert!(stall_counters(&p).is_empty());
    assert!(p.victims.unwrap().reason.contains("record slots"));
}

/// Generic counters of each package PMU instance (PMU, CPU) in a plan: the fixed DRAM clock
/// aside.
fn generic_per_package_box(p: &Plan) -> std::collections::BTreeMap<(String, u32), usize> {
    let mut m = std::collections::BTreeMap::new();
    for c in p.counters.iter().filter(|c| c.package.is_some()) {
        if c.queue != Some(QueuePart::DramClocks) {
            *m.entry((c.pmu.clone(), c.cpus[0])).or_default() += 1;
        }
    }
    m
}

#[test]
fn sampling_plans_read_the_read_queue_beside_bandwidth_once_per_interval() {
    for (tree, channels) in [("skx-2socket", 6), ("spr-2socket", 8)] {
        for command in [CommandKind::Top, CommandKind::Record, CommandKind::Serve] {
            let p = plan_on(tree, &kernel("6.8.0"), &request(command));
            let lat = latency_counters_of(&p);
            // Every channel of both packages: its DRAM clock and its read queue's pair.
            assert_eq!(lat.len(), channels * 2 * 3, "{tree} {command:?}");
            for pkg in [0, 1] {
                let mut ch: Vec<u32> = lat
                    .iter()
                    .filter(|c| c.package == Some(pkg) && c.queue == Some(QueuePart::ReadInserts))
                    .filter_map(|c| c.channel)
                    .collect();
                ch.sort_unstable();
                assert_eq!(ch, (0..channels as u32).collect::<Vec<_>>(), "{tree}");
            }
            for c in &lat {
                // Read by userspace at each interval, in no record slot: the tick never reads
                // them.
                assert_eq!(c.reader, Reader::Interval { every_ms: 1000 }, "{tree}");
                assert_eq!(c.slot, None);
            }
            // Bandwidth first and whole; the write queue has no room and is said.
            assert_eq!(traffic(&p.counters).count(), channels * 2 * 2, "{tree}");
            assert!(
                generic_per_package_box(&p).values().all(|&n| n <= 4),
                "{tree}"
            );
            assert!(
                p.refusals.iter().any(|r| r
                    .event
                    .as_deref()
                    .is_some_and(|e| e.contains("wpq_occupancy"))
                    && r.reason.contains("count bandwidth")),
                "{tree}: {:?}",
                p.refusals
            );
            let l = p.latency.as_ref().unwrap();
            assert!(l.read && !l.write && !l.utilisation, "{tree}: {l:?}");
            assert_eq!(l.source.as_deref(), Some("intel-imc-queues"));
            // The sampler's package readers never see them.
            let cfg = crate::sampler::from_plan::config_of(&p, &[0, 1], 100, false);
            let read_by_tick: usize = cfg.groups.iter().map(|g| g.counters.len()).sum();
            assert_eq!(read_by_tick, traffic(&p.counters).count(), "{tree}");
            // Shown in the plan's JSON with role latency, its encoding and the reader.
            let json = serde_json::to_value(&p).unwrap();
            let occ = json["counters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["queue"] == "rpq_occupancy")
                .unwrap();
            assert_eq!(occ["role"], "latency");
            assert_eq!(occ["reader"]["kind"], "interval");
            assert_eq!(occ["encoding"]["config"], 0x80);
            assert_eq!(json["latency"]["read"], true);
        }
    }
}

#[test]
fn record_still_sleeps_long_beside_latency_read_at_each_interval() {
    let mut req = request(CommandKind::Record);
    req.batch_ms = Some(1000);
    let p = plan_on("skx-2socket", &kernel("6.8.0"), &req);
    assert!(!latency_counters_of(&p).is_empty());
    let d = p.drain.unwrap();
    assert_eq!(d.every_ms, 1000, "{d:?}");
    assert!(d.intervals_closed_after);
}

#[test]
fn sampling_plans_on_gnr_have_no_room_for_latency_and_say_so() {
    // Four CAS counters (two schedulers × read, write) fill each box's four generic counters.
    let p = plan_on("gnr-2socket", &kernel("6.8.0"), &request(CommandKind::Top));
    assert!(latency_counters_of(&p).is_empty());
    assert_eq!(traffic(&p.counters).count(), 12 * 2 * 4);
    let l = p.latency.unwrap();
    assert!(!l.read && l.source.is_none());
    assert!(
        l.reason.contains("4 generic") && l.reason.contains("count bandwidth"),
        "{}",
        l.reason
    );
    assert!(
        p.refusals
            .iter()
            .any(|r| r.reason.contains("count bandwidth"))
    );
}

#[test]
fn sampling_plans_on_zen4_read_the_l3_latency_of_every_ccx() {
    let p = plan_on(
        "zen4-2socket",
        &kernel("6.10.0"),
        &request(CommandKind::Serve),
    );
    let lat = latency_counters_of(&p);
    assert_eq!(lat.len(), 2 * 4);
    assert!(
        lat.iter()
            .all(|c| c.pmu == "amd_l3" && c.channel == Some(0))
    );
    assert!(
        lat.iter()
            .all(|c| c.reader == Reader::Interval { every_ms: 1000 })
    );
    assert_eq!(traffic(&p.counters).count(), 8, "UMC bandwidth kept");
    let l = p.latency.unwrap();
    assert_eq!(l.source.as_deref(), Some("amd-l3-sampled-latency"));
    assert!(l.read && !l.write);
}

#[test]
fn sampling_plans_without_queues_read_no_latency_and_say_why() {
    for (tree, why) in [
        ("vm-guest", "hypervisor"),
        ("zen2-1socket", "Zen 1-3"),
        ("knl", "OFFCORE_RESPONSE"),
    ] {
        let root = fixture(tree);
        let found = crate::discovery::discover(&root).unwrap();
        let mut req = request(CommandKind::Top);
        req.stand_in = vec![(
            "page-faults".into(),
            crate::events::resolve(&root, "page-faults").unwrap(),
        )];
        let p = plan(&found, &kernel("6.8.0"), &req).unwrap();
        assert!(latency_counters_of(&p).is_empty(), "{tree}");
        assert!(
            text::render(&p).contains("latency: no loaded latency"),
            "{tree}"
        );
        let l = p.latency.unwrap();
        assert!(l.source.is_none() && !l.read, "{tree}");
        assert!(l.reason.contains(why), "{tree}: {}", l.reason);
        assert_eq!(l.reason.lines().count(), 1);
    }
    // Stat plans say nothing of it (stat --latency is its own request).
    assert!(
        plan_on("skx-2socket", &kernel("6.8.0"), &request(CommandKind::Stat))
            .latency
            .is_none()
    );
}
