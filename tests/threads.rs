//! MPI_THREAD_MULTIPLE: two threads on their own communicators are profiled separately and
//! correctly, under both MPIs.

mod common;

use common::{Flavour, Mpich, OpenMpi, compile, marker_line, run, scratch, site_at_line, sites};

fn two_threads(flavour: Flavour, np: u64, mode: &str) {
    let dir = scratch(&format!("threads_{mode}_{}", flavour.name()));
    let exe = compile(flavour, "threads.c", &dir);
    let job = run(flavour, np as usize, &exe, &dir)
        .env("COMMTUNE_MODE", mode)
        .go();
    job.assert_success();
    assert!(
        job.stdout().contains("threads: results correct"),
        "{}",
        job.stdout()
    );
    let report = job.report();
    assert_eq!(sites(&report).len(), 4);
    for (marker, op, calls) in [
        ("SITE:thread_first", "allreduce", 50),
        ("SITE:thread_second", "allreduce", 50),
        ("SITE:thread_halo", "halo", 50),
        ("SITE:main_check", "allreduce", 1),
    ] {
        let site = site_at_line(&report, marker_line("threads.c", marker));
        assert_eq!(site["op"], op, "{marker}");
        assert_eq!(site["calls"], calls, "{marker}");
        assert_eq!(site["ranks"]["calls"]["min"], calls, "{marker}");
        assert_eq!(site["ranks"]["count"], np, "{marker}");
    }
}

#[test]
fn two_threads_openmpi() {
    two_threads(OpenMpi, 4, "profile");
}

#[test]
fn two_threads_mpich() {
    two_threads(Mpich, 2, "profile");
}

/// Tuning on two communicators from two threads at once: correct results, every call counted.
#[test]
fn two_threads_tuned_openmpi() {
    two_threads(OpenMpi, 4, "tune");
}

#[test]
fn two_threads_tuned_mpich() {
    two_threads(Mpich, 2, "tune");
}
