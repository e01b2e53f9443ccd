//! Every C entry point the MPI library exports (with its PMPI twin, so that it can be wrapped) is
//! exported by the preload library too: all of them post held-back halo operations first, so no
//! MPI call can block while one waits (ARCHITECTURE.md, invariant 4). Checked on the built libraries with
//! `nm`, for both flavours.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Flavour, Mpich, OpenMpi};

fn exported(library: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(library)
        .output()
        .expect("run nm");
    assert!(out.status.success(), "nm {}", library.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(String::from)
        .collect()
}

/// The flavour's C MPI library, from its compiler wrapper's link line.
fn mpi_library(flavour: Flavour) -> PathBuf {
    let out = Command::new(flavour.cc())
        .arg("-show")
        .output()
        .expect("run the compiler wrapper");
    let show = String::from_utf8_lossy(&out.stdout).into_owned();
    let dirs: Vec<&str> = show
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("-L"))
        .chain(["/usr/lib/x86_64-linux-gnu"])
        .collect();
    let lib = show
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("-l"))
        .find(|l| l.starts_with("mpi"))
        .unwrap_or_else(|| panic!("no MPI library in `{show}`"));
    dirs.iter()
        .map(|d| Path::new(d).join(format!("lib{lib}.so")))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("lib{lib}.so not found in {dirs:?}"))
}

fn every_entry_point_is_wrapped(flavour: Flavour) {
    let mpi = exported(&mpi_library(flavour));
    let ours = exported(&flavour.library());
    let missing: Vec<&String> = mpi
        .iter()
        .filter(|s| s.starts_with("MPI_") && mpi.contains(&format!("P{s}")))
        .filter(|s| !ours.contains(*s))
        .collect();
    assert!(
        missing.is_empty(),
        "{flavour:?}: not wrapped by libcommtune.so: {missing:?}"
    );
}

#[test]
fn every_entry_point_is_wrapped_openmpi() {
    every_entry_point_is_wrapped(OpenMpi);
}

#[test]
fn every_entry_point_is_wrapped_mpich() {
    every_entry_point_is_wrapped(Mpich);
}
