//! The correctness suites once across hosts: the cluster in a box (scripts/cluster: one rank per
//! network namespace, TCP between every pair of ranks, NICs shaped to 10 Gbit/s) under both
//! MPIs (Open MPI on 3 hosts; MPICH, which busy-polls, on 2), so that shared memory never hides a bug. The differential program compares every
//! collective codelet with PMPI (each round forces one codelet of every operation, covering them
//! all); the stencil's checksum under every forced halo codelet must be native's bit for bit;
//! the randomized halo test finds nothing wrong under tuning (with `neighbor` in its quiet run).
//! Needs root (network namespaces), as CI has.

mod common;

use common::{
    ALLGATHERV, ALLREDUCE, ALLTOALL, Cluster, Flavour, Mpich, OpenMpi, compile, run, scratch,
};

const HOSTS: usize = 3;

fn ranks(flavour: Flavour) -> usize {
    match flavour {
        OpenMpi => HOSTS,
        Mpich => 2,
    }
}

const HALO: &[&str] = &[
    "native",
    "persistent",
    "irecv_first",
    "pack",
    "pairwise",
    "neighbor",
];

fn differential(flavour: Flavour) {
    let dir = scratch(&format!("cluster-differential-{}", flavour.name()));
    let exe = compile(flavour, "differential.c", &dir);
    let rounds = ALLREDUCE.len().max(ALLTOALL.len()).max(ALLGATHERV.len());
    for round in 0..rounds {
        let pick = |names: &[&str]| names[round % names.len()].to_string();
        let force = format!(
            "allreduce={},alltoall={},allgatherv={}",
            pick(ALLREDUCE),
            pick(ALLTOALL),
            pick(ALLGATHERV)
        );
        let job = run(flavour, ranks(flavour), &exe, &dir)
            .on_cluster()
            .env("COMMTUNE_FORCE", &force)
            .args(&["--quick", "--large", "1100000", "--random", "20"])
            .finishes_with("differential: ")
            .go();
        let out = job.stdout();
        let verdict = out
            .lines()
            .find(|l| l.starts_with("differential: ") && l.ends_with(" failures"));
        assert!(
            job.output.status.success() && verdict.is_some_and(|v| v.ends_with(" 0 failures")),
            "{flavour:?} across hosts, COMMTUNE_FORCE={force}: {verdict:?}\n{}\n{}",
            out.lines()
                .filter(|l| l.contains("FAIL"))
                .take(20)
                .collect::<Vec<_>>()
                .join("\n"),
            job.stderr()
        );
    }
}

fn stencil(flavour: Flavour) {
    let dir = scratch(&format!("cluster-stencil-{}", flavour.name()));
    let exe = compile(flavour, "stencil.c", &dir);
    let args = ["2", "10", "1", "1", "30", "waitany", "allreduce", "mixed"];
    let checksum = |job: common::Job| {
        job.assert_success();
        job.stdout()
            .lines()
            .find(|l| l.starts_with("checksum "))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no checksum: {}", job.stdout()))
    };
    let expected = checksum(
        run(flavour, ranks(flavour), &exe, &dir)
            .on_cluster()
            .native()
            .args(&args)
            .finishes_with("checksum ")
            .go(),
    );
    for codelet in HALO {
        let job = run(flavour, ranks(flavour), &exe, &dir)
            .on_cluster()
            .env("COMMTUNE_FORCE", &format!("halo={codelet}"))
            .args(&args)
            .finishes_with("checksum ")
            .go();
        assert_eq!(
            checksum(job),
            expected,
            "{flavour:?} across hosts, halo={codelet}"
        );
    }
}

/// The randomized halo test (tests/programs/fuzz_halo.c) under tuning: a quiet seed, where
/// episodes repeat alike and ranks may agree on `neighbor` (COMMTUNE_HALO_NEIGHBOR=on), and a
/// noisy one, where each rank varies its episodes.
fn fuzz_halo(flavour: Flavour) {
    let dir = scratch(&format!("cluster-fuzz-halo-{}", flavour.name()));
    let exe = compile(flavour, "fuzz_halo.c", &dir);
    for (seed, neighbor) in [("5", "on"), ("3", "off")] {
        run(flavour, ranks(flavour), &exe, &dir)
            .on_cluster()
            .env("COMMTUNE_MODE", "tune")
            .env("COMMTUNE_HALO_NEIGHBOR", neighbor)
            .args(&["--seconds", "8", "--seed", seed])
            .finishes_with("fuzz: ")
            .go()
            .assert_fuzz_passed();
    }
}

#[test]
fn correctness_across_hosts() {
    let _cluster = Cluster::up(HOSTS, "10gbit");
    for flavour in [OpenMpi, Mpich] {
        differential(flavour);
        stencil(flavour);
        fuzz_halo(flavour);
    }
}
