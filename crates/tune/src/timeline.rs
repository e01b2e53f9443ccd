//! What a tuned key ran when, for the report's `tuning.timeline`: codelets as registry indices and
//! durations in clock ticks until the report names and converts them.

use commtune_report::{Event, TIMELINE_EVENTS};

/// A key's events, at most `TIMELINE_EVENTS` of them.
#[derive(Default, Debug)]
pub struct Timeline {
    marks: Vec<Mark>,
    /// Marks past `TIMELINE_EVENTS`, left out.
    pub dropped: u64,
}

/// One event of a `Timeline` (see `commtune_report::Event`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mark {
    Search {
        call: u64,
        search: u32,
    },
    Sample {
        call: u64,
        codelet: usize,
        ticks: f64,
    },
    Decision {
        call: u64,
        winner: usize,
    },
    Drift {
        call: u64,
        ratio: f64,
        reopened: bool,
    },
}

impl Timeline {
    /// Records `mark` (slow path only: searches, decisions, drift checks), up to the limit.
    pub fn push(&mut self, mark: Mark) {
        if self.marks.len() < TIMELINE_EVENTS {
            self.marks.push(mark);
        } else {
            self.dropped += 1;
        }
    }

    /// The events as the report has them: codelets by name (`names`: the operation's registry),
    /// durations in microseconds.
    pub fn events(&self, names: &[&str], ns_per_tick: f64) -> Vec<Event> {
        let name = |i: usize| names.get(i).copied().unwrap_or("?").to_string();
        self.marks
            .iter()
            .map(|m| match *m {
                Mark::Search { call, search } => Event::Search { call, search },
                Mark::Sample {
                    call,
                    codelet,
                    ticks,
                } => Event::Sample {
                    call,
                    codelet: name(codelet),
                    us: ticks * ns_per_tick * 1e-3,
                },
                Mark::Decision { call, winner } => Event::Decision {
                    call,
                    winner: name(winner),
                },
                Mark::Drift {
                    call,
                    ratio,
                    reopened,
                } => Event::Drift {
                    call,
                    ratio,
                    reopened,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_codelets_and_stop_at_the_limit() {
        let mut t = Timeline::default();
        t.push(Mark::Sample {
            call: 4,
            codelet: 1,
            ticks: 2000.0,
        });
        assert_eq!(
            t.events(&["native", "ring"], 1.0),
            vec![Event::Sample {
                call: 4,
                codelet: "ring".into(),
                us: 2.0
            }]
        );
        for call in 0..TIMELINE_EVENTS as u64 {
            t.push(Mark::Decision { call, winner: 0 });
        }
        assert_eq!(t.dropped, 1);
    }
}
