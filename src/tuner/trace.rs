//! COMMTUNE_TRACE: every instance of every tuned key, kept in memory and written by each rank to
//! `PREFIX.RANK.tsv` at the end of the run, for the simulator that replays a run under other
//! settings (`commtune_tune::simulate`, `commtune simulate`).
//!
//! When the knob is set every call of a tuned key is timed (production calls otherwise are one
//! in eight, see `sampled`); when it is not, an untimed settled call pays one load of a static
//! flag and a branch that always goes the same way. The flag is armed off the settled path, when
//! a key is first linked to its tuner, which every key is before it can settle.
//!
//! The file: `#` lines (the format, the rank, the MPI, the settings, each operation's codelets
//! with their attributes, and how many records were dropped when the bound was reached), a header
//! line, then one tab-separated line per instance: the key's agreed identity (the same on every
//! rank), operation, bytes per call, the key's instance number, codelet index and name, the
//! instance's entry (`start_ns`, before any barrier), the call's own start (`call_start_ns`,
//! after its barrier) and end, in nanoseconds from this rank's first record, and what the call
//! was (`warmup`, `search`, `production`; production includes keys that settled untuned). Ranks'
//! clocks are not synchronised: only differences on one rank mean anything.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use commtune_report::Op;
pub use commtune_tune::trace::Kind;

use crate::codelets::Operation;
use crate::keys::Entry;
use crate::say::say;
use crate::sync::lock;
use crate::{clock, mpi, runtime};

/// Records one rank keeps at most (about 48 MB in memory, 90 MB of text): later instances are
/// counted, not kept, and the file says how many.
pub const MAX_RECORDS: usize = 1_000_000;

/// One instance: the `k`th call of the key with agreed identity `agree_hash`, measured on
/// `entry`, ran `codelet` (its registry index) from `call_start` (after its barrier; it was
/// entered at `start`) to `end`, in clock ticks.
pub struct Instance {
    pub entry: &'static Entry,
    pub agree_hash: u64,
    pub k: u64,
    /// A byte, not a usize: a million records are kept (an operation has far fewer than 256
    /// codelets).
    pub codelet: u8,
    pub kind: Kind,
    pub start: u64,
    pub call_start: u64,
    pub end: u64,
}

/// An operation's codelets as the file's header lists them: name, partners, uses collectives.
struct Codelets {
    op: Op,
    list: Vec<(&'static str, &'static str, bool)>,
}

struct Trace {
    records: Vec<Instance>,
    dropped: u64,
    ops: Vec<Codelets>,
}

static TRACE: Mutex<Trace> = Mutex::new(Trace {
    records: Vec::new(),
    dropped: 0,
    ops: Vec::new(),
});
static WRITE_AT_EXIT: Once = Once::new();
/// COMMTUNE_TRACE is set (known once a key was linked to its tuner, see `arm`).
static ON: AtomicBool = AtomicBool::new(false);

/// Reads COMMTUNE_TRACE into the flag `on` reads; called when a key is linked to its tuner, before
/// any of its calls can take the settled path.
pub fn arm() {
    if runtime::config().trace.is_some() && !ON.load(Ordering::Relaxed) {
        ON.store(true, Ordering::Relaxed);
    }
}

/// Whether instances are recorded.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Keeps one instance of a key of operation `C`.
pub fn record<C: Operation>(instance: Instance) {
    WRITE_AT_EXIT.call_once(|| mpi::at_exit(write_at_exit));
    let trace = &mut *lock(&TRACE);
    if trace.records.len() >= MAX_RECORDS {
        trace.dropped += 1;
        return;
    }
    if !trace.ops.iter().any(|o| o.op == C::OP) {
        trace.ops.push(Codelets {
            op: C::OP,
            list: C::codelets()
                .iter()
                .map(|c| {
                    let a = c.attributes;
                    (c.name, a.partners.name(), a.uses_collectives)
                })
                .collect(),
        });
    }
    trace.records.push(instance);
}

/// Writes this rank's file when the process ends (after MPI_Finalize, or at an exit without it).
/// Only the process that initialised MPI writes: a child it forked runs the same handlers.
extern "C" fn write_at_exit() {
    let (Some(prefix), Some(process)) = (&runtime::config().trace, runtime::process()) else {
        return;
    };
    if process.pid != std::process::id() {
        return;
    }
    let path = PathBuf::from(format!("{}.{}.tsv", prefix.display(), process.rank));
    let trace = lock(&TRACE);
    let text = file_text(&trace, process);
    if let Err(e) = write(&path, &text) {
        say!(
            "commtune: rank {}: trace {} not written: {e}",
            process.rank,
            path.display()
        );
    } else if trace.dropped > 0 {
        say!(
            "commtune: rank {}: trace {} cut after {MAX_RECORDS} instances ({} more not kept)",
            process.rank,
            path.display(),
            trace.dropped
        );
    }
}

fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(text.as_bytes())?;
    file.flush()
}

fn file_text(trace: &Trace, process: &runtime::Process) -> String {
    let config = runtime::config();
    let t = &config.tuning;
    let ns_per_tick = clock::ns_per_tick();
    let mut out = String::with_capacity(96 * (trace.records.len() + 8));
    let _ = writeln!(out, "# commtune trace 1");
    let _ = writeln!(out, "# rank {} of {}", process.rank, process.size);
    let _ = writeln!(out, "# mpi {}", process.mpi);
    let _ = writeln!(
        out,
        "# settings search={:?} timing={} filter={:?} samples={} block={} warmup={} min_gain={} \
         budget={}",
        t.search,
        t.timing_name(),
        t.filter,
        t.samples,
        t.block,
        t.warmup,
        t.min_gain,
        t.budget
    );
    for ops in &trace.ops {
        let _ = write!(out, "# codelets\t{}", ops.op.name());
        for (name, partners, collectives) in &ops.list {
            let _ = write!(out, "\t{name}:{partners}:{}", u8::from(*collectives));
        }
        out.push('\n');
    }
    if trace.dropped > 0 {
        let _ = writeln!(out, "# dropped {} (after {MAX_RECORDS})", trace.dropped);
    }
    out.push_str("key\top\tbytes\tk\tcodelet\tname\tstart_ns\tcall_start_ns\tend_ns\tkind\n");
    let origin = trace.records.first().map_or(0, |r| r.start);
    let ns = |ticks: u64| (ticks.saturating_sub(origin) as f64 * ns_per_tick).round() as u64;
    for r in &trace.records {
        let names = trace
            .ops
            .iter()
            .find(|o| o.op == r.entry.op)
            .map_or(&[][..], |o| &o.list[..]);
        let name = names.get(usize::from(r.codelet)).map_or("?", |c| c.0);
        let _ = writeln!(
            out,
            "{:016x}\t{}\t{}\t{}\t{}\t{name}\t{}\t{}\t{}\t{}",
            r.agree_hash,
            r.entry.op.name(),
            r.entry.description.bytes_per_call,
            r.k,
            r.codelet,
            ns(r.start),
            ns(r.call_start),
            ns(r.end),
            r.kind.name()
        );
    }
    out
}
