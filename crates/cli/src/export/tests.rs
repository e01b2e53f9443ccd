use super::*;
use commtune_history::{Estimate, How, Platform};

/// A search's entry timed `local`, its winner the fastest of `estimates` (also `commtune map`'s
/// tests).
pub(crate) fn entry(
    mpi: &str,
    op: &str,
    comm_size: u32,
    bytes: u64,
    estimates: &[(&str, f64)],
) -> Entry {
    let estimates: Vec<Estimate> = estimates
        .iter()
        .map(|(codelet, us)| Estimate {
            codelet: codelet.to_string(),
            us: *us,
            error_us: 0.1,
        })
        .collect();
    let winner = estimates
        .iter()
        .min_by(|a, b| a.us.total_cmp(&b.us))
        .map(|e| e.codelet.clone())
        .unwrap_or_default();
    Entry {
        op: op.into(),
        comm_size,
        ranks_per_node: None,
        size_class: String::new(),
        bytes,
        signature: String::new(),
        facts: format!("size={comm_size}"),
        mpi: mpi.into(),
        platform: Platform {
            host: "node#".into(),
            cpu: "cpu".into(),
            transport: "shared memory".into(),
        },
        estimates,
        timing: Some("local".into()),
        reopened_from: None,
        realised_us: None,
        winner,
        replaced: None,
        time: 0,
        how: How::Search,
    }
}

/// `select` with no `--mpi` or `--platform`: for stores of one version and platform.
fn from_any(entries: &[Entry], flavour: Flavour, timing: Timing, comm_sizes: &[u32]) -> Selection {
    select(entries, flavour, timing, comm_sizes, &Choice::default()).expect("one group")
}

pub(crate) const OMPI: &str = "Open MPI v4.1.4";
const MPICH: &str = "MPICH Version: 4.0.2";

#[test]
fn groups_by_operation_and_size_and_splits_at_geometric_midpoints() {
    let entries = vec![
        entry(
            OMPI,
            "allreduce",
            4,
            1 << 20,
            &[("native", 9.0), ("ring", 5.0)],
        ),
        entry(OMPI, "allreduce", 4, 8, &[("native", 2.0), ("ring", 5.0)]),
        entry(OMPI, "allreduce", 4, 64, &[("native", 3.0), ("ring", 5.0)]),
        entry(OMPI, "allreduce", 2, 8, &[("native", 3.0), ("linear", 1.0)]),
        entry(MPICH, "allreduce", 4, 8, &[("native", 3.0), ("ring", 1.0)]),
    ];
    let selection = from_any(&entries, Flavour::OpenMpi, Timing::Local, &[]);
    assert_eq!(selection.other_mpi, 1);
    assert_eq!(selection.filtered, 0);
    let shape: Vec<String> = selection
        .tables
        .iter()
        .map(|t| {
            let ranges: Vec<String> = t
                .ranges
                .iter()
                .map(|r| format!("{} {} {:?}", r.from, r.winner, r.measured))
                .collect();
            format!("{} {}: {}", t.op, t.comm_size, ranges.join(", "))
        })
        .collect();
    // sqrt(64 * 2^20) = 8192: the first size ruled by the 1 MiB decision.
    assert_eq!(
        shape,
        [
            "allreduce 2: 0 linear [8]",
            "allreduce 4: 0 native [8, 64], 8192 ring [1048576]"
        ]
    );
}

#[test]
fn disagreeing_jobs_take_the_best_median_estimate() {
    let entries = vec![
        entry(
            OMPI,
            "alltoall",
            4,
            512,
            &[("native", 10.0), ("bruck", 9.0), ("pairwise", 30.0)],
        ),
        entry(
            OMPI,
            "alltoall",
            4,
            512,
            &[("native", 10.0), ("bruck", 12.0), ("pairwise", 8.0)],
        ),
        entry(
            OMPI,
            "alltoall",
            4,
            512,
            &[("native", 10.0), ("bruck", 11.0), ("pairwise", 31.0)],
        ),
    ];
    let selection = from_any(&entries, Flavour::OpenMpi, Timing::Local, &[]);
    // Medians: native 10, bruck 11, pairwise 30.
    assert_eq!(selection.tables[0].ranges[0].winner, "native");
}

#[test]
fn agreeing_jobs_keep_their_winner() {
    let mut one = entry(
        OMPI,
        "alltoall",
        4,
        512,
        &[("native", 10.0), ("bruck", 9.9)],
    );
    // The search kept native: bruck did not beat it by enough.
    one.winner = "native".into();
    let selection = from_any(&[one.clone(), one], Flavour::OpenMpi, Timing::Local, &[]);
    assert_eq!(selection.tables[0].ranges[0].winner, "native");
}

#[test]
fn comm_size_filter_and_flavours() {
    let entries = vec![
        entry(MPICH, "allgatherv", 2, 64, &[("native", 1.0)]),
        entry(MPICH, "allgatherv", 4, 64, &[("native", 1.0)]),
        entry(MPICH, "halo", 4, 64, &[("native", 1.0)]),
        entry(MPICH, "allgatherv", 0, 64, &[("native", 1.0)]),
    ];
    let selection = from_any(&entries, Flavour::Mpich, Timing::Local, &[]);
    assert_eq!(selection.filtered, 2, "halo and size 0");
    let selection = from_any(&entries, Flavour::Mpich, Timing::Local, &[4]);
    assert_eq!(selection.filtered, 3);
    assert_eq!(selection.tables.len(), 1);
    assert_eq!(selection.tables[0].comm_size, 4);
    assert!(measured_with("Open MPI v5.0.3", Flavour::OpenMpi));
    assert!(!measured_with("MPICH Version: 4.0.2", Flavour::OpenMpi));
}

#[test]
fn midpoints_stay_between_their_sizes() {
    assert_eq!(geometric_midpoint(1, 2), 2);
    assert_eq!(geometric_midpoint(8, 32), 16);
    assert_eq!(geometric_midpoint(100, 101), 101);
}

/// `entry` timed otherwise (None: a format-1 entry, of unknown timing).
fn timed(timing: Option<&str>, entry: Entry) -> Entry {
    Entry {
        timing: timing.map(str::to_string),
        ..entry
    }
}

#[test]
fn only_the_requested_timing_is_exported() {
    let local = |bytes, times: &[(&str, f64)]| entry(OMPI, "allreduce", 4, bytes, times);
    let entries = vec![
        local(8, &[("native", 2.0), ("ring", 5.0)]),
        local(1 << 20, &[("native", 9.0), ("ring", 5.0)]),
        // Barrier timing measured a size local timing did not: no local rule may follow it.
        timed(
            Some("barrier"),
            local(4096, &[("native", 9.0), ("recursive_doubling", 3.0)]),
        ),
        timed(None, local(64, &[("native", 9.0), ("bruck", 1.0)])),
    ];
    let shape = |selection: &Selection| -> Vec<String> {
        selection.tables[0]
            .ranges
            .iter()
            .map(|r| format!("{} {}", r.winner, r.measured.len()))
            .collect()
    };
    let local_only = from_any(&entries, Flavour::OpenMpi, Timing::Local, &[]);
    assert_eq!(shape(&local_only), ["native 1", "ring 1"]);
    assert_eq!(local_only.exported, 2);
    assert_eq!(
        local_only.timing_note(),
        "timed local; left out 2 entries of other timings (barrier 1, unknown 1)"
    );
    let barrier = from_any(&entries, Flavour::OpenMpi, Timing::Barrier, &[]);
    assert_eq!(shape(&barrier), ["recursive_doubling 1"]);
    assert_eq!(
        barrier.timing_note(),
        "timed barrier; left out 3 entries of other timings (local 2, unknown 1)"
    );
    let period = from_any(&entries, Flavour::OpenMpi, Timing::Period, &[]);
    assert!(period.tables.is_empty());
    assert_eq!(period.other_timings.values().sum::<usize>(), 4);
}

#[test]
fn another_timing_does_not_change_the_choice() {
    // Two local jobs chose bruck at 512 B; a barrier job (what local timing misses: the skew
    // a switch leaves) measured it far slower. Pooled, the medians would make pairwise win.
    let bruck = |timing, times: &[(&str, f64)]| {
        let mut e = timed(timing, entry(OMPI, "alltoall", 4, 512, times));
        e.winner = "bruck".into();
        e
    };
    let local = Some("local");
    let mut entries = vec![
        bruck(local, &[("bruck", 9.0), ("pairwise", 10.0)]),
        bruck(local, &[("bruck", 9.5), ("pairwise", 9.8)]),
    ];
    let alone = from_any(&entries, Flavour::OpenMpi, Timing::Local, &[]);
    assert_eq!(alone.tables[0].ranges[0].winner, "bruck");
    let mut barrier = bruck(Some("barrier"), &[("bruck", 40.0), ("pairwise", 9.0)]);
    barrier.winner = "pairwise".into();
    entries.push(barrier.clone());
    entries.push(barrier);
    let pooled: Vec<Entry> = entries.iter().map(|e| timed(local, e.clone())).collect();
    assert_eq!(
        from_any(&pooled, Flavour::OpenMpi, Timing::Local, &[]).tables[0].ranges[0].winner,
        "pairwise",
        "the other timing's entries, counted as local, would change the choice"
    );
    let selection = from_any(&entries, Flavour::OpenMpi, Timing::Local, &[]);
    assert_eq!(selection.tables, alone.tables);
    assert_eq!(selection.other_timings.get("barrier"), Some(&2));
}

/// `entry` measured on the cluster-in-a-box rig instead of the shared-memory machine.
fn on_rig(entry: Entry) -> Entry {
    Entry {
        platform: Platform {
            host: "rig#".into(),
            cpu: "cpu".into(),
            transport: "OMPI_MCA_btl=tcp,self".into(),
        },
        ..entry
    }
}

const SHM: &str = "Open MPI v4.1.4 on node# (cpu, transport shared memory)";
const RIG: &str = "Open MPI v4.1.4 on rig# (cpu, transport OMPI_MCA_btl=tcp,self)";

/// Native wins at 512 B on shared memory (two jobs); ring on the rig (three jobs), which would
/// win pooled.
fn two_platforms() -> Vec<Entry> {
    let shm = || entry(OMPI, "allreduce", 4, 512, &[("native", 5.0), ("ring", 6.0)]);
    let rig = || {
        on_rig(entry(
            OMPI,
            "allreduce",
            4,
            512,
            &[("native", 90.0), ("ring", 40.0)],
        ))
    };
    vec![shm(), rig(), shm(), rig(), rig()]
}

#[test]
fn two_platforms_and_no_choice_is_an_error_listing_both() {
    let entries = two_platforms();
    let unchosen = select(
        &entries,
        Flavour::OpenMpi,
        Timing::Local,
        &[],
        &Choice::default(),
    )
    .expect_err("two platforms: which one is the user's choice");
    assert_eq!(
        unchosen.message(&Choice::default(), "Open MPI", Timing::Local),
        format!(
            "the store has 2 MPI versions or platforms with Open MPI entries timed local, and a \
             rules file is for one: choose it with --platform and/or --mpi (any part of its name \
             below, as `commtune map` shows it)\n  {SHM}: 2 entries\n  {RIG}: 3 entries"
        )
    );
}

#[test]
fn the_requested_platform_only_and_the_note_names_the_rest() {
    let entries = two_platforms();
    let on = |platform: &str| {
        let choice = Choice {
            mpi: None,
            platform: Some(platform.into()),
        };
        select(&entries, Flavour::OpenMpi, Timing::Local, &[], &choice).unwrap()
    };
    let shm = on("NODE#");
    assert_eq!(shm.exported, 2);
    assert_eq!(shm.tables[0].ranges[0].winner, "native");
    assert_eq!(
        shm.note(),
        format!(
            "{SHM}, timed local; no entries of other timings; left out 3 entries of other MPI \
             versions or platforms ({RIG} 3)"
        )
    );
    let rig = on("tcp");
    assert_eq!(rig.exported, 3);
    assert_eq!(rig.tables[0].ranges[0].winner, "ring");
    assert_eq!(rig.other_groups.values().sum::<usize>(), 2);
}

#[test]
fn a_choice_must_name_one_group() {
    let mut entries = two_platforms();
    entries.push(entry(
        "Open MPI v5.0.3",
        "allreduce",
        4,
        8,
        &[("native", 1.0)],
    ));
    let both = Choice {
        mpi: Some("4.1".into()),
        platform: None,
    };
    let unchosen = select(&entries, Flavour::OpenMpi, Timing::Local, &[], &both).unwrap_err();
    assert_eq!(unchosen.matched, 2);
    let message = unchosen.message(&both, "Open MPI", Timing::Local);
    assert!(
        message.starts_with(
            "--mpi \"4.1\" matches 2 (marked *) of the 3 MPI versions or platforms with Open MPI \
             entries timed local: name one"
        ),
        "{message}"
    );
    assert!(
        message.contains(&format!("\n  * {SHM}: 2 entries")),
        "{message}"
    );
    assert!(
        message.contains("\n  Open MPI v5.0.3 on node# (cpu, transport shared memory): 1 entry"),
        "{message}"
    );
    let none = Choice {
        mpi: Some("5.0".into()),
        platform: Some("rig".into()),
    };
    let unchosen = select(&entries, Flavour::OpenMpi, Timing::Local, &[], &none).unwrap_err();
    assert_eq!(unchosen.matched, 0);
    assert!(
        unchosen
            .message(&none, "Open MPI", Timing::Local)
            .starts_with("--mpi \"5.0\" --platform \"rig\" matches none of the 3"),
    );
    let one = Choice {
        mpi: Some("5.0".into()),
        platform: None,
    };
    let selection = select(&entries, Flavour::OpenMpi, Timing::Local, &[], &one).unwrap();
    assert_eq!(selection.exported, 1);
    assert_eq!(selection.other_groups.len(), 2);
}

#[test]
fn the_only_group_of_the_timing_is_taken_and_the_others_named() {
    // The rig measured with barrier timing only: for local timing, shared memory is the one.
    let entries: Vec<Entry> = two_platforms()
        .into_iter()
        .map(|e| match e.platform.host.as_str() {
            "rig#" => timed(Some("barrier"), e),
            _ => e,
        })
        .collect();
    let selection = from_any(&entries, Flavour::OpenMpi, Timing::Local, &[]);
    assert_eq!(
        selection.group.as_ref().map(Group::to_string).as_deref(),
        Some(SHM)
    );
    assert_eq!(selection.exported, 2);
    assert!(
        selection.note().ends_with(&format!(
            "left out 3 entries of other MPI versions or platforms ({RIG} 3)"
        )),
        "{}",
        selection.note()
    );
}
