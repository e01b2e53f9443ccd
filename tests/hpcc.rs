//! A real third-party application: HPC Challenge (Debian's `hpcc`, built against Open MPI) under
//! tuning and under every forced halo codelet, at 4 ranks with a small problem
//! (tests/programs/hpccinf.txt). Its own checks must pass (HPL and PTRANS residuals,
//! RandomAccess errors) and the values it verifies must equal the native run's: the FFT error
//! bit for bit (its data only moves), the HPL residual within HPL's threshold.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{OpenMpi, run, scratch, sites};

const HPCC: &str = "/usr/bin/hpcc";
const HALO_CODELETS: &[&str] = &["persistent", "irecv_first", "pack", "pairwise"];

/// The `name=value` lines of hpccoutf.txt's summary section.
fn summary(dir: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir.join("hpccoutf.txt")).expect("hpcc wrote hpccoutf.txt");
    assert!(
        text.contains("0 tests completed and failed residual checks"),
        "PTRANS failed its residual checks:\n{text}"
    );
    assert!(text.contains("...... PASSED"), "HPL did not pass:\n{text}");
    let start = text
        .find("Begin of Summary section.")
        .expect("a summary section");
    text[start..]
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn run_hpcc(dir: &Path, env: &[(&str, &str)], native: bool) -> BTreeMap<String, String> {
    let _ = std::fs::remove_file(dir.join("hpccoutf.txt"));
    let mut job = run(OpenMpi, 4, Path::new(HPCC), dir);
    for (name, value) in env {
        job = job.env(name, value);
    }
    if native {
        job = job.native();
    }
    let done = job.go();
    done.assert_success();
    if !native {
        assert!(!sites(&done.report()).is_empty(), "commtune saw no calls");
    }
    let s = summary(dir);
    for check in [
        "MPIRandomAccess_Errors",
        "MPIRandomAccess_LCG_Errors",
        "PTRANS_residual",
    ] {
        assert_eq!(s[check].parse::<f64>().ok(), Some(0.0), "{check}: {s:?}");
    }
    assert_eq!(s["Success"], "1", "{s:?}");
    s
}

#[test]
fn hpcc_passes_its_checks_under_tuning_and_forced_halo_codelets() {
    assert!(
        Path::new(HPCC).exists(),
        "{HPCC} is missing: scripts/install-deps installs Debian's hpcc"
    );
    let dir = scratch("hpcc");
    std::fs::copy(
        common::root().join("tests/programs/hpccinf.txt"),
        dir.join("hpccinf.txt"),
    )
    .expect("copy hpccinf.txt");
    let native = run_hpcc(&dir, &[], true);
    let tuned = run_hpcc(&dir, &[("COMMTUNE_MODE", "tune")], false);
    assert_eq!(tuned["MPIFFT_maxErr"], native["MPIFFT_maxErr"]);
    for codelet in HALO_CODELETS {
        let force = format!("halo={codelet}");
        let forced = run_hpcc(&dir, &[("COMMTUNE_FORCE", &force)], false);
        for value in ["MPIFFT_maxErr", "HPL_RnormI"] {
            assert_eq!(forced[value], native[value], "{value} under {force}");
        }
    }
}
