//! Messages on stderr. Each message goes out in one write(2), its lines and final newline
//! together: ranks share the launcher's stderr, and a line written in pieces can be split by
//! another rank's output (a test suite's "No Errors" line was lost that way). Errors are
//! ignored: a closed stderr must not stop the application (`eprintln!` panics, and panics
//! abort).

use std::io::Write;

/// Writes `text`, with a newline added if it has none, in one write.
pub fn text(mut text: String) {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    // Stderr is unbuffered: one `write_all` of one buffer is one write(2) unless the kernel
    // takes only part of it, which a pipe does not do for messages this short.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// `format!` a message and write it in one piece (see `text`).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say::text(format!($($arg)*))
    };
}

pub(crate) use say;
