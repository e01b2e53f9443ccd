//! The I/O of `commtune export`: read the store, write the file, say how to use it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use commtune_history::UNKNOWN_TIMING;
use commtune_tune::Timing;
use commtune_tune::settings::Settings;

use super::{Choice, mpich, openmpi};
use crate::Failure;
use crate::flavour::Flavour;

#[derive(Args)]
pub struct ExportArgs {
    /// The MPI library whose rules to write (only its entries are exported)
    #[arg(long, value_enum, value_name = "MPI")]
    format: Flavour,

    /// The store (default: as `commtune history` finds it)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// The file to write (default: commtune-openmpi.rules or commtune-mpich.json)
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Export only these communicator sizes (default: every size in the store)
    #[arg(long, value_name = "N", num_args = 1..)]
    comm_size: Vec<u32>,

    /// Export only decisions whose searches were timed so (local, barrier, period; default: the
    /// library's default COMMTUNE_TIMING): times measured otherwise do not compare
    #[arg(long, value_name = "TIMING", value_parser = timing)]
    timing: Option<Timing>,

    /// The MPI library version to export, when the store has several: any part of its name as
    /// `commtune map` shows it (e.g. 4.1.4)
    #[arg(long, value_name = "TEXT")]
    mpi: Option<String>,

    /// The platform to export, when the store has several: any part of its name as `commtune
    /// map` shows it (e.g. node#, or tcp)
    #[arg(long, value_name = "TEXT")]
    platform: Option<String>,

    /// MPICH only: the libmpich.so whose built-in selection tree the file extends (default:
    /// the system's libmpich.so.12)
    #[arg(long, value_name = "LIB")]
    mpich_lib: Option<PathBuf>,
}

/// Where distributions put MPICH's library.
const MPICH_LIBRARIES: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu/libmpich.so.12",
    "/usr/lib/aarch64-linux-gnu/libmpich.so.12",
    "/usr/lib64/libmpich.so.12",
    "/usr/lib/libmpich.so.12",
];

fn timing(name: &str) -> Result<Timing, String> {
    Timing::parse(name).ok_or_else(|| format!("{name:?}: one of local, barrier, period"))
}

pub fn run(args: ExportArgs) -> Result<(), Failure> {
    let dir = crate::history::dir(args.dir).map_err(|m| Failure::new(2, m))?;
    let loaded = crate::history::load(&dir);
    if loaded.entries.is_empty() {
        return Err(Failure::new(
            1,
            format!(
                "the history store {} has no entries: run tuned jobs (COMMTUNE_MODE=tune) first",
                dir.display()
            ),
        ));
    }
    let timing = args.timing.unwrap_or(Settings::default().timing);
    let choice = Choice {
        mpi: args.mpi,
        platform: args.platform,
    };
    let library = args.format.to_string();
    let selection = super::select(
        &loaded.entries,
        args.format,
        timing,
        &args.comm_size,
        &choice,
    )
    .map_err(|unchosen| Failure::new(2, unchosen.message(&choice, &library, timing)))?;
    if selection.other_mpi > 0 {
        eprintln!(
            "commtune: export: skipped {} entries measured with another MPI library than {}",
            selection.other_mpi, args.format
        );
    }
    if selection.filtered > 0 {
        eprintln!(
            "commtune: export: skipped {} {} entries of other (or unknown) communicator sizes or operations",
            selection.filtered, args.format
        );
    }
    if selection.tables.is_empty() {
        let mut hints = Vec::new();
        if selection.other_timings.keys().any(|t| t != UNKNOWN_TIMING) {
            hints.push("--timing chooses another");
        }
        if selection.other_timings.contains_key(UNKNOWN_TIMING) {
            hints.push("entries of unknown timing (format 1) are never exported");
        }
        let hints: String = hints.iter().map(|h| format!("; {h}")).collect();
        return Err(Failure::new(
            1,
            format!(
                "nothing to export: the history store {} has no {library} entries{} {}{hints}",
                dir.display(),
                if args.comm_size.is_empty() {
                    ""
                } else {
                    " of those communicator sizes"
                },
                selection.note()
            ),
        ));
    }
    let output = args.output.unwrap_or_else(|| {
        PathBuf::from(match args.format {
            Flavour::OpenMpi => "commtune-openmpi.rules",
            Flavour::Mpich => "commtune-mpich.json",
        })
    });
    let absolute = std::path::absolute(&output).unwrap_or_else(|_| output.clone());
    let shown = absolute.display().to_string();
    let source = dir.display().to_string();
    let (text, unmapped, usage) = match args.format {
        Flavour::OpenMpi => {
            let (text, unmapped) =
                openmpi::rules(&selection.tables, &source, &selection.note(), &shown);
            (
                text,
                unmapped,
                format!("mpirun {} ...", openmpi::usage(&shown)),
            )
        }
        Flavour::Mpich => {
            let (builtin, algorithms) = mpich_library(args.mpich_lib)?;
            let known = |name: &str| algorithms.contains(name);
            let (text, unmapped) = mpich::selection(&selection.tables, &builtin, &known)
                .map_err(|m| Failure::new(1, m))?;
            (
                text,
                unmapped,
                format!("mpiexec -genv {} {shown} ...", mpich::VARIABLE),
            )
        }
    };
    for why in &unmapped {
        eprintln!("commtune: export: {}", why.line(&library));
    }
    std::fs::write(&output, text)
        .map_err(|e| Failure::new(1, format!("cannot write {}: {e}", output.display())))?;
    let ranges: usize = selection.tables.iter().map(|t| t.ranges.len()).sum();
    crate::emit(&format!(
        "wrote {shown}: {ranges} size ranges of {} (operation, communicator size) pairs from {} entries of {source}: {}\nuse: {usage}\n",
        selection.tables.len(),
        selection.exported,
        selection.note(),
    ))
}

/// MPICH's built-in selection tree and the algorithms it has, from its library.
fn mpich_library(explicit: Option<PathBuf>) -> Result<(String, BTreeSet<String>), Failure> {
    let library = match explicit {
        Some(path) => path,
        None => MPICH_LIBRARIES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| {
                Failure::new(2, "cannot find libmpich.so.12: give it with --mpich-lib")
            })?,
    };
    let bytes = std::fs::read(&library)
        .map_err(|e| Failure::new(1, format!("cannot read {}: {e}", library.display())))?;
    let tree = mpich::builtin_tree(&bytes).ok_or_else(|| {
        Failure::new(
            1,
            format!(
                "{} holds no MPIR collective selection tree (MPICH 4 has one; is it MPICH?)",
                library.display()
            ),
        )
    })?;
    Ok((tree, mpich::algorithms(&bytes)))
}
