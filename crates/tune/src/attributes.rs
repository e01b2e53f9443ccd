//! What a codelet is like: the attributes the attribute-based search prunes on, and that
//! `commtune codelets` prints.

/// How many partners a rank exchanges data with at a time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Partners {
    /// Everyone at once (or a root with everyone).
    All,
    /// One partner per step.
    Pair,
    /// A tree: a few partners over logarithmically many steps.
    Tree,
}

impl Partners {
    pub fn name(self) -> &'static str {
        match self {
            Partners::All => "all",
            Partners::Pair => "pair",
            Partners::Tree => "tree",
        }
    }
}

/// What a codelet is like, for attribute-based search and for `commtune codelets`.
#[derive(Clone, Copy, Debug)]
pub struct Attributes {
    pub partners: Partners,
    /// Built on MPI collectives (native, MPI_Reduce + MPI_Bcast, ...) rather than point-to-point.
    pub uses_collectives: bool,
}
