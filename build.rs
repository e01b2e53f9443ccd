//! Builds the C shim with the MPI flavour's own compiler wrapper and exports its MPI symbols.
//!
//! `$MPICC` (default `mpicc`) selects the MPI. mpi-sys probes the same variable but does not
//! rebuild when it changes, so src/mpi/mod.rs checks at compile time that the bindings match the
//! flavour detected here; use one `--target-dir` per flavour.

#[path = "build/entry_points.rs"]
mod entry_points;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SHIM_SOURCES: &[&str] = &["shim/constants.c", "shim/tuned.c", "shim/walk.c"];
const OPENMPI_FORTRAN: &str = "shim/fortran_openmpi.c";
const MPICH_FORTRAN: &str = "shim/fortran_mpich.c";

fn main() {
    let mpicc = env::var("MPICC").unwrap_or_else(|_| "mpicc".to_string());
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rerun-if-changed=shim");
    println!("cargo:rerun-if-changed=build");
    println!("cargo::rustc-check-cfg=cfg(mpi_flavour, values(\"openmpi\", \"mpich\"))");

    let flavour = detect_flavour(&mpicc, &out);
    check_target_dir(flavour, &out);
    println!("cargo:rustc-cfg=mpi_flavour=\"{flavour}\"");
    println!("cargo:rustc-env=COMMTUNE_BUILD_FLAVOUR={flavour}");

    let fortran = if flavour == "openmpi" {
        OPENMPI_FORTRAN
    } else {
        MPICH_FORTRAN
    };
    let hand_written: Vec<&str> = SHIM_SOURCES.iter().copied().chain([fortran]).collect();
    let generated = entry_points::generate(&mpicc, &out, &hand_written);

    let mut build = cc::Build::new();
    build
        .compiler(&mpicc)
        .files(&hand_written)
        .file(&generated)
        .include("shim")
        .flag("-Wall")
        .flag("-Wextra")
        .flag("-Werror")
        .flag("-Wno-unused-parameter")
        .cargo_metadata(false);
    build.compile("commtune_shim");

    // The shim defines the MPI_* symbols the application must see. rustc gives a cdylib a version
    // script that hides every non-Rust symbol, so the archive is linked whole and a second
    // script makes the MPI entry points global again.
    let archive = out.join("libcommtune_shim.a");
    let script = out.join("exports.map");
    // Open MPI's mpi_f08 Test family calls these Fortran profiling symbols (shim/fortran_openmpi.c).
    let f08_tests = if flavour == "openmpi" {
        " pmpi_test_; pmpi_testall_; pmpi_testany_; pmpi_testsome_;"
    } else {
        ""
    };
    std::fs::write(
        &script,
        format!("{{ global: MPI_*; mpi_*; ompi_*_f;{f08_tests} }};\n"),
    )
    .expect("write version script");
    println!(
        "cargo:rustc-link-arg-cdylib=-Wl,--whole-archive,{},--no-whole-archive",
        archive.display()
    );
    println!(
        "cargo:rustc-link-arg-cdylib=-Wl,--version-script={}",
        script.display()
    );
    // The shim calls backtrace() (glibc); the library dlopen and dlsym (libdl, part of glibc 2.34+).
    println!("cargo:rustc-link-arg-cdylib=-ldl");
}

/// mpi-sys keeps the bindings of the first MPI a target directory was built for, so a second
/// flavour in the same directory would compile against the wrong mpi.h: refuse it clearly.
fn check_target_dir(flavour: &str, out: &Path) {
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out
    let Some(profile_dir) = out.ancestors().nth(3) else {
        return;
    };
    let marker = profile_dir.join("commtune-mpi-flavour");
    match std::fs::read_to_string(&marker) {
        Ok(previous) if previous.trim() != flavour => panic!(
            "\n\ncommtune: {} was built for {} but MPICC ({}) is {flavour}. mpi-sys does not \
             rebuild its bindings when MPICC changes: build each MPI in its own target \
             directory, e.g.\n  MPICC=mpicc.mpich cargo build --release --target-dir target/mpich\n\
             (or `cargo clean` to switch this one).\n",
            profile_dir.display(),
            previous.trim(),
            env::var("MPICC").unwrap_or_else(|_| "mpicc".into()),
        ),
        Ok(_) => {}
        Err(_) => std::fs::write(&marker, flavour).expect("write the flavour marker"),
    }
}

/// Asks the compiler wrapper which MPI its `mpi.h` belongs to.
fn detect_flavour(mpicc: &str, out: &Path) -> &'static str {
    let probe = out.join("flavour_probe.c");
    std::fs::write(
        &probe,
        "#include <mpi.h>\n#if defined(OPEN_MPI)\ncommtune_flavour openmpi\n\
         #elif defined(MPICH)\ncommtune_flavour mpich\n#else\ncommtune_flavour unknown\n#endif\n",
    )
    .expect("write flavour probe");
    let output = Command::new(mpicc)
        .arg("-E")
        .arg(&probe)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "commtune: cannot run the MPI compiler wrapper `{mpicc}` ({e}). Install Open MPI \
                 (libopenmpi-dev) or MPICH (libmpich-dev), or set MPICC to the wrapper of your MPI."
            )
        });
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("commtune_flavour "))
        .unwrap_or("unknown");
    match line.trim() {
        "openmpi" => "openmpi",
        "mpich" => "mpich",
        other => panic!(
            "commtune: `{mpicc}` is neither Open MPI nor MPICH (probe said `{other}`; stderr: {}). \
             commtune supports these two flavours.",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
}
