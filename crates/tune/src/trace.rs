//! The trace format COMMTUNE_TRACE writes (one file per rank, `PREFIX.RANK.tsv`), parsed for the
//! simulator. Pure: text in, records out.
//!
//! `#` lines first: `# commtune trace 1`, `# rank R of N`, `# mpi ...`, `# settings ...`, one
//! `# codelets<TAB>OP<TAB>NAME:PARTNERS:COLLECTIVES...` line per operation traced (registry
//! order; COLLECTIVES is 1 when the codelet is built on MPI collectives), and `# dropped N` when
//! the rank kept only its first records. Then a header line and one line per instance, tab-
//! separated: `key op bytes k codelet name start_ns call_start_ns end_ns kind` (see
//! `Record`).

use crate::attributes::Partners;

/// What a traced call was.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Before the key's first decision (warm-up, or waiting for another key's search).
    Warmup,
    Search,
    /// After a decision (the winner, or native for a key that is not tuned).
    Production,
}

impl Kind {
    pub fn parse(name: &str) -> Option<Kind> {
        match name {
            "warmup" => Some(Kind::Warmup),
            "search" => Some(Kind::Search),
            "production" => Some(Kind::Production),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Warmup => "warmup",
            Kind::Search => "search",
            Kind::Production => "production",
        }
    }
}

/// One instance of a key on one rank. Times are nanoseconds on this rank's clock (ranks' clocks
/// are not synchronised: only differences on one rank mean anything).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The key's agreed identity (the same on every rank).
    pub key: u64,
    pub op: String,
    pub bytes: u64,
    /// The key's instance number (1 = its first call).
    pub k: u64,
    /// Registry index of the codelet that ran.
    pub codelet: usize,
    /// When the application entered the call (before a barrier of barrier or period timing).
    pub start: u64,
    /// When the call itself started (after its barrier; `start` without one).
    pub call_start: u64,
    pub end: u64,
    pub kind: Kind,
}

/// A codelet as the trace's header lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Codelet {
    pub name: String,
    pub partners: Partners,
    pub collectives: bool,
}

/// One rank's trace file.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub rank: u32,
    pub ranks: u32,
    /// The library's settings of the traced run, as written.
    pub settings: String,
    /// Each traced operation's codelets, in registry order.
    pub codelets: Vec<(String, Vec<Codelet>)>,
    /// Instances the rank did not keep (the file holds the first ones).
    pub dropped: u64,
    pub records: Vec<Record>,
}

impl Trace {
    /// The codelets of operation `op`, in registry order.
    pub fn codelets_of(&self, op: &str) -> Option<&[Codelet]> {
        self.codelets
            .iter()
            .find(|(o, _)| o == op)
            .map(|(_, c)| c.as_slice())
    }
}

fn partners(name: &str) -> Option<Partners> {
    [Partners::All, Partners::Pair, Partners::Tree]
        .into_iter()
        .find(|p| p.name() == name)
}

/// Parses one rank's trace file.
pub fn parse(text: &str) -> Result<Trace, String> {
    let mut trace = Trace::default();
    let mut header = false;
    let mut format = false;
    for (number, line) in text.lines().enumerate() {
        let at = |what: &str| format!("line {}: {what}", number + 1);
        if let Some(comment) = line.strip_prefix("# ") {
            let (word, rest) = comment.split_once([' ', '\t']).unwrap_or((comment, ""));
            match word {
                "commtune" => format = rest == "trace 1",
                "rank" => {
                    let (rank, ranks) = rest
                        .split_once(" of ")
                        .and_then(|(r, n)| Some((r.parse().ok()?, n.parse().ok()?)))
                        .ok_or_else(|| at("`# rank R of N` expected"))?;
                    (trace.rank, trace.ranks) = (rank, ranks);
                }
                "settings" => trace.settings = rest.to_string(),
                "dropped" => {
                    let count = rest.split(' ').next().unwrap_or("");
                    trace.dropped = count.parse().map_err(|_| at("bad dropped count"))?;
                }
                "codelets" => {
                    let mut fields = rest.split('\t');
                    let op = fields.next().unwrap_or("").to_string();
                    let codelets = fields
                        .map(|f| {
                            let mut parts = f.split(':');
                            let (Some(name), Some(p), Some(c)) =
                                (parts.next(), parts.next(), parts.next())
                            else {
                                return Err(at("codelet NAME:PARTNERS:COLLECTIVES expected"));
                            };
                            Ok(Codelet {
                                name: name.to_string(),
                                partners: partners(p).ok_or_else(|| at("unknown partners"))?,
                                collectives: c == "1",
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    trace.codelets.push((op, codelets));
                }
                _ => {}
            }
            continue;
        }
        if !format {
            return Err("not a commtune trace (no `# commtune trace 1` line first)".into());
        }
        if !header {
            if !line.starts_with("key\t") {
                return Err(at("the column header expected"));
            }
            header = true;
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let [
            key,
            op,
            bytes,
            k,
            codelet,
            _name,
            start,
            call_start,
            end,
            kind,
        ] = fields[..]
        else {
            return Err(at("10 tab-separated fields expected"));
        };
        let number = |s: &str| s.parse::<u64>().map_err(|_| at("a number expected"));
        trace.records.push(Record {
            key: u64::from_str_radix(key, 16).map_err(|_| at("a hexadecimal key expected"))?,
            op: op.to_string(),
            bytes: number(bytes)?,
            k: number(k)?,
            codelet: number(codelet)? as usize,
            start: number(start)?,
            call_start: number(call_start)?,
            end: number(end)?,
            kind: Kind::parse(kind).ok_or_else(|| at("warmup, search or production expected"))?,
        });
    }
    if !format {
        return Err("not a commtune trace (no `# commtune trace 1` line first)".into());
    }
    if trace.ranks == 0 {
        return Err("no `# rank R of N` line".into());
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# commtune trace 1\n# rank 1 of 2\n# mpi Open MPI v4.1.4\n\
        # settings search=Brute timing=local\n\
        # codelets\tallreduce\tnative:tree:1\tring:pair:0\n\
        key\top\tbytes\tk\tcodelet\tname\tstart_ns\tcall_start_ns\tend_ns\tkind\n\
        00000000000000ff\tallreduce\t64\t1\t0\tnative\t0\t0\t10\twarmup\n\
        00000000000000ff\tallreduce\t64\t2\t1\tring\t20\t25\t40\tsearch\n";

    #[test]
    fn a_trace_parses() {
        let t = parse(TEXT).unwrap();
        assert_eq!((t.rank, t.ranks), (1, 2));
        let codelets = t.codelets_of("allreduce").unwrap();
        assert_eq!(codelets[1].name, "ring");
        assert_eq!(codelets[1].partners, Partners::Pair);
        assert!(codelets[0].collectives && !codelets[1].collectives);
        assert_eq!(t.records.len(), 2);
        let r = &t.records[1];
        assert_eq!(
            (r.key, r.k, r.codelet, r.start, r.call_start, r.end),
            (255, 2, 1, 20, 25, 40)
        );
        assert_eq!(r.kind, Kind::Search);
    }

    #[test]
    fn bad_lines_are_named() {
        assert!(
            parse("hello\n")
                .unwrap_err()
                .contains("not a commtune trace")
        );
        let bad = TEXT.replace("\t40\tsearch", "\tforty\tsearch");
        assert!(parse(&bad).unwrap_err().starts_with("line 8:"));
    }
}
