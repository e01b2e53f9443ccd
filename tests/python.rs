//! mpi4py (Debian's python3-mpi4py, built for Open MPI): Allreduce calls are seen and each
//! Python source line is its own site.

mod common;

use common::{OpenMpi, marker_line, root, run, scratch, site_at_line, sites};

#[test]
fn mpi4py_allreduce_sites() {
    let dir = scratch("mpi4py");
    let script = root().join("tests/programs/allreduce_sites.py");
    let job = run(OpenMpi, 2, "/usr/bin/python3".as_ref(), &dir)
        .args(&[script.to_str().unwrap()])
        .go();
    job.assert_success();
    assert!(job.stdout().contains("allreduce_sites: results correct"));
    let report = job.report();
    assert_eq!(sites(&report).len(), 2, "{report:#}");
    for (marker, function, calls) in [
        ("SITE:py_total", "total", 5),
        ("SITE:py_max", "<module>", 3),
    ] {
        let line = marker_line("allreduce_sites.py", marker);
        let site = site_at_line(&report, line);
        assert_eq!(site["op"], "allreduce");
        assert_eq!(site["calls"], calls, "{marker}");
        assert_eq!(site["function"], function, "{marker}");
        assert_eq!(
            site["location"],
            format!("allreduce_sites.py:{line} ({function})")
        );
    }
}
