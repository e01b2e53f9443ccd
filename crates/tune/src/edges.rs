//! Which edge of a distributed graph carries each message of an episode (pure; no MPI).
//!
//! MPI_Ineighbor_alltoallw sends block `i` along destination edge `i` and receives block `j`
//! from source edge `j`; between one pair of ranks the k-th edge a sender lists meets the k-th
//! edge its receiver lists from it. Point-to-point matching is by tag instead: a receive takes
//! the sender's first message to this rank, in posting order, with its tag that no earlier
//! receive took. So the receiver lists the edges from each source in that source's posting order
//! and puts each receive on the edge of the send it would have matched.

use std::collections::HashMap;

/// One message of an episode, as the edge pairing needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub send: bool,
    pub peer: i32,
    pub tag: i32,
    pub bytes: i64,
}

/// A rank's edges, and the block of each of its messages.
#[derive(Debug, PartialEq, Eq)]
pub struct Edges {
    pub destinations: Vec<i32>,
    pub sources: Vec<i32>,
    /// Per message, in posting order: its index among `destinations` (a send) or `sources`.
    pub blocks: Vec<usize>,
}

/// The edges for `messages` (this rank's, in posting order), given for every source the tags
/// and sizes of the messages it sends to this rank, in its posting order. An error says why the
/// messages cannot travel as one neighbourhood collective.
pub fn pair(
    messages: &[Message],
    incoming: &HashMap<i32, Vec<(i32, i64)>>,
) -> Result<Edges, String> {
    let mut destinations = Vec::new();
    let mut sources = Vec::new();
    // Per source: where its edges start among `sources`, and which of its sends are taken.
    let mut from: HashMap<i32, (usize, Vec<bool>)> = HashMap::new();
    let mut blocks = Vec::with_capacity(messages.len());
    for m in messages {
        if m.send {
            blocks.push(destinations.len());
            destinations.push(m.peer);
            continue;
        }
        let sent = incoming
            .get(&m.peer)
            .ok_or_else(|| format!("rank {} sends nothing this receive could match", m.peer))?;
        let (start, taken) = from.entry(m.peer).or_insert_with(|| {
            let start = sources.len();
            sources.extend(std::iter::repeat_n(m.peer, sent.len()));
            (start, vec![false; sent.len()])
        });
        let k = (0..sent.len())
            .find(|&k| !taken[k] && sent[k].0 == m.tag)
            .ok_or_else(|| {
                format!(
                    "a receive from rank {} with tag {} matches no send of its episode",
                    m.peer, m.tag
                )
            })?;
        if sent[k].1 != m.bytes {
            return Err(format!(
                "rank {} sends {} bytes with tag {} into a receive of {} bytes",
                m.peer, sent[k].1, m.tag, m.bytes
            ));
        }
        taken[k] = true;
        blocks.push(*start + k);
    }
    for (source, sent) in incoming {
        let received = from
            .get(source)
            .map_or(0, |(_, t)| t.iter().filter(|&&t| t).count());
        if received != sent.len() {
            return Err(format!(
                "rank {source} sends {} messages, this episode receives {received} of them",
                sent.len()
            ));
        }
    }
    Ok(Edges {
        destinations,
        sources,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(peer: i32, tag: i32) -> Message {
        Message {
            send: true,
            peer,
            tag,
            bytes: 8,
        }
    }

    fn recv(peer: i32, tag: i32) -> Message {
        Message {
            send: false,
            ..send(peer, tag)
        }
    }

    #[test]
    fn receives_take_the_send_with_their_tag() {
        // Two ranks on a ring: both neighbours are rank 1, which sends tag 10 then tag 20.
        let messages = [recv(1, 20), recv(1, 10), send(1, 10), send(1, 20)];
        let incoming = HashMap::from([(1, vec![(10, 8), (20, 8)])]);
        let edges = pair(&messages, &incoming).unwrap();
        assert_eq!(edges.destinations, [1, 1]);
        assert_eq!(edges.sources, [1, 1]);
        assert_eq!(edges.blocks, [1, 0, 0, 1]);
    }

    #[test]
    fn equal_tags_match_in_posting_order() {
        let messages = [recv(2, 5), send(3, 5), recv(2, 5), recv(0, 5)];
        let incoming = HashMap::from([(2, vec![(5, 8), (5, 8)]), (0, vec![(5, 8)])]);
        let edges = pair(&messages, &incoming).unwrap();
        assert_eq!(edges.sources, [2, 2, 0]);
        assert_eq!(edges.blocks, [0, 0, 1, 2]);
    }

    #[test]
    fn unpaired_messages_are_refused() {
        let incoming = HashMap::from([(1, vec![(10, 8)])]);
        assert!(
            pair(&[recv(1, 11)], &incoming)
                .unwrap_err()
                .contains("tag 11")
        );
        assert!(
            pair(&[recv(2, 10)], &incoming)
                .unwrap_err()
                .contains("rank 2")
        );
        assert!(pair(&[], &incoming).unwrap_err().contains("receives 0"));
        let short = Message {
            bytes: 16,
            ..recv(1, 10)
        };
        assert!(pair(&[short], &incoming).unwrap_err().contains("16 bytes"));
    }
}
