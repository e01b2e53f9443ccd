//! The calibration program (calibrate.c, embedded): compiled once per MPI and source with the
//! MPI's compiler wrapper into the user's cache, then run under the launcher with the library
//! preloaded, as `commtune run` runs jobs; its output lines are parsed as they come.

use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use commtune_tune::Timing;

use crate::flavour::{self, Flavour};
use crate::inject;
use crate::launcher::{self, Launcher};

const SOURCE: &str = include_str!("calibrate.c");

/// The compiler wrappers to try for `flavour`: Debian's names first, then the plain one (whose
/// MPI the built program's dependencies are checked against).
fn compilers(flavour: Flavour) -> [&'static str; 2] {
    match flavour {
        Flavour::OpenMpi => ["mpicc.openmpi", "mpicc"],
        Flavour::Mpich => ["mpicc.mpich", "mpicc"],
    }
}

/// `$XDG_CACHE_HOME/commtune`, else `~/.cache/commtune`, else the temporary directory.
fn cache_dir() -> PathBuf {
    let absolute = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| v.starts_with('/'))
            .map(PathBuf::from)
    };
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("commtune")
}

/// The program for `flavour`, compiled unless the cache has it (named by the source's hash).
pub fn compile(flavour: Flavour) -> Result<PathBuf, String> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    SOURCE.hash(&mut hasher);
    let name = format!("calibrate-{}-{:016x}", flavour.key(), hasher.finish());
    let dir = cache_dir();
    let exe = dir.join(&name);
    if exe.is_file() {
        return Ok(exe);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot make the cache directory {}: {e}", dir.display()))?;
    let compiler = compilers(flavour)
        .into_iter()
        .find(|c| launcher::which(c).is_some())
        .ok_or_else(|| {
            format!(
                "no MPI compiler wrapper found for {flavour} ({}): calibrate compiles its \
                 program with it",
                compilers(flavour).join(", ")
            )
        })?;
    // Calibrations started at once each write their own file, then rename it into place.
    let source = dir.join(format!(".{name}.{}.c", std::process::id()));
    let built = dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&source, SOURCE)
        .map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let output = Command::new(compiler)
        .args(["-O2", "-o"])
        .arg(&built)
        .arg(&source)
        .arg("-lm")
        .output();
    let _ = std::fs::remove_file(&source);
    let output = output.map_err(|e| format!("cannot run {compiler}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{compiler} could not compile the calibration program:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let linked = flavour::flavour_of_needed(&flavour::needed(&built)?).map(|(f, _)| f);
    if linked != Some(flavour) {
        let _ = std::fs::remove_file(&built);
        return Err(format!(
            "{compiler} built the calibration program for another MPI than {flavour}"
        ));
    }
    std::fs::rename(&built, &exe).map_err(|e| format!("cannot write {}: {e}", exe.display()))?;
    Ok(exe)
}

/// One line of the program's output.
#[derive(Debug, PartialEq)]
pub enum Line {
    Ranks(u32),
    /// Bytes, one-way µs, its standard error.
    Pingpong(u64, f64, f64),
    /// A point finished: operation, bytes, seconds.
    Point(String, u64, f64),
}

impl Line {
    /// A line of the program, or None for anything else rank 0 printed (the library's summary).
    pub fn parse(text: &str) -> Option<Line> {
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            ["ranks", n] => Some(Line::Ranks(n.parse().ok()?)),
            ["pingpong", b, us, e] => Some(Line::Pingpong(
                b.parse().ok()?,
                us.parse().ok()?,
                e.parse().ok()?,
            )),
            ["point", op, b, s] => Some(Line::Point(
                op.to_string(),
                b.parse().ok()?,
                s.parse().ok()?,
            )),
            _ => None,
        }
    }
}

/// The launcher's process group while a job runs (0: none), for the Ctrl-C handler.
static RUNNING: AtomicI32 = AtomicI32::new(0);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// On Ctrl-C, stops the running job's process group (the launcher and what it started in it)
/// and lets the calibration end with what finished. A second Ctrl-C kills the group: MPICH's
/// mpiexec can hang when the first comes while it starts its ranks.
pub fn on_interrupt() -> Result<(), String> {
    ctrlc::set_handler(|| {
        let again = INTERRUPTED.swap(true, Ordering::SeqCst);
        let signal = if again { libc::SIGKILL } else { libc::SIGINT };
        stop(RUNNING.load(Ordering::SeqCst), signal);
    })
    .map_err(|e| format!("cannot catch Ctrl-C: {e}"))
}

/// Sends `signal` to process group `group` (0: none).
fn stop(group: i32, signal: i32) {
    if group > 0 {
        // SAFETY: kill has no memory effects; a group that has ended already makes it fail with
        // ESRCH, which is fine.
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// How to start the program under the user's launcher.
pub struct Job<'a> {
    pub launcher: Launcher,
    pub flavour: Flavour,
    /// The launcher and its arguments, as after `--`.
    pub command: &'a [String],
    pub library: &'a Path,
    pub program: &'a Path,
    /// COMMTUNE_SAMPLES of the job.
    pub samples: u32,
    /// COMMTUNE_TIMING of the job.
    pub timing: Timing,
}

impl Job<'_> {
    /// Runs the program with `args` (`calibrate.c`'s), the library writing its history entries
    /// to `store`; `seen` gets each output line as it comes. An error when the job fails.
    pub fn run(
        &self,
        args: &[String],
        store: &Path,
        mut seen: impl FnMut(Line),
    ) -> Result<(), String> {
        let store = store.to_string_lossy();
        let samples = self.samples.to_string();
        let overrides = [
            ("COMMTUNE_SAMPLES", Some(samples.as_str())),
            ("COMMTUNE_TIMING", Some(self.timing.name())),
            ("COMMTUNE_MODE", Some("tune")),
            ("COMMTUNE_SEARCH", Some("brute")),
            ("COMMTUNE_BUDGET", Some("1")),
            ("COMMTUNE_CALIBRATE", Some("on")),
            ("COMMTUNE_REPORT", Some("none")),
            ("COMMTUNE_HISTORY", Some(store.as_ref())),
        ];
        let environment = std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        });
        let existing_preload = std::env::var("LD_PRELOAD").ok();
        let vars = inject::job_variables(
            self.library,
            existing_preload.as_deref(),
            environment,
            &overrides,
        );
        let command: Vec<String> = self
            .command
            .iter()
            .cloned()
            .chain(std::iter::once(self.program.to_string_lossy().into_owned()))
            .chain(args.iter().cloned())
            .collect();
        let srun_mpi = inject::srun_mpi(
            self.flavour,
            &command,
            std::env::var("SLURM_MPI_TYPE").ok().as_deref(),
        );
        let plan = inject::plan(self.launcher, &command, &vars, srun_mpi);
        let (program, rest) = plan.argv.split_first().ok_or("no command given")?;
        let mut child = Command::new(program)
            .args(rest)
            .envs(plan.env.iter().map(|(n, v)| (n, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own: Ctrl-C stops the job through `on_interrupt`, and only it.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        RUNNING.store(child.id() as i32, Ordering::SeqCst);
        if interrupted() {
            // Ctrl-C came while the job was being started.
            stop(child.id() as i32, libc::SIGINT);
        }
        let mut stderr = child.stderr.take().map(BufReader::new);
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(stderr) = stderr.as_mut() {
                let _ = stderr.read_to_string(&mut text);
            }
            text
        });
        let mut others = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match Line::parse(&line) {
                    Some(line) => seen(line),
                    None => others.push(line),
                }
            }
        }
        let status = child
            .wait()
            .map_err(|e| format!("cannot wait for {program}: {e}"));
        RUNNING.store(0, Ordering::SeqCst);
        let errors = errors.join().unwrap_or_default();
        let status = status?;
        if status.success() {
            for line in errors.lines().filter(|l| l.contains("warning")) {
                eprintln!("{line}");
            }
            return Ok(());
        }
        if interrupted() {
            return Err("interrupted".to_string());
        }
        let tail = |text: &str| {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        Err(format!(
            "the calibration job failed ({status}): {}\n{}\n{}",
            inject::shell_line(&plan.argv),
            tail(&others.join("\n")),
            tail(&errors)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines() {
        assert_eq!(Line::parse("ranks 4"), Some(Line::Ranks(4)));
        assert_eq!(
            Line::parse("pingpong 8 0.3357 0.0057"),
            Some(Line::Pingpong(8, 0.3357, 0.0057))
        );
        assert_eq!(
            Line::parse("point alltoall 65536 0.000510"),
            Some(Line::Point("alltoall".into(), 65536, 0.00051))
        );
        assert_eq!(Line::parse("commtune: 2 ranks, Open MPI v4.1.4"), None);
        assert_eq!(Line::parse("ranks x"), None);
    }
}
