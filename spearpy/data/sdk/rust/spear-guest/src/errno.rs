//! Negative return values of hostcalls as a Rust error.

use std::fmt;

/// A failed hostcall. `Other` keeps any number this crate does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errno {
    Io,
    BadFd,
    Again,
    NoMem,
    Access,
    Fault,
    Exist,
    Inval,
    MFile,
    NoSpc,
    /// A user stream's session ended, or it is closed and drained.
    Pipe,
    NoSys,
    ConnReset,
    /// No client (yet) on a user stream.
    NotConn,
    TimedOut,
    /// **(spearpy)** the run's audio budget is spent (`mic_read`, `rtasr_write`).
    DQuot,
    Other(i32),
}

const TABLE: [(Errno, i32, &str); 16] = [
    (Errno::Io, -5, "EIO"),
    (Errno::BadFd, -9, "EBADF"),
    (Errno::Again, -11, "EAGAIN"),
    (Errno::NoMem, -12, "ENOMEM"),
    (Errno::Access, -13, "EACCES"),
    (Errno::Fault, -14, "EFAULT"),
    (Errno::Exist, -17, "EEXIST"),
    (Errno::Inval, -22, "EINVAL"),
    (Errno::MFile, -24, "EMFILE"),
    (Errno::NoSpc, -28, "ENOSPC"),
    (Errno::Pipe, -32, "EPIPE"),
    (Errno::NoSys, -38, "ENOSYS"),
    (Errno::ConnReset, -104, "ECONNRESET"),
    (Errno::NotConn, -107, "ENOTCONN"),
    (Errno::TimedOut, -110, "ETIMEDOUT"),
    (Errno::DQuot, -122, "EDQUOT"),
];

impl Errno {
    /// The errno for a negative hostcall result.
    pub fn from_code(rc: i32) -> Errno {
        TABLE.iter().find(|e| e.1 == rc).map(|e| e.0).unwrap_or(Errno::Other(rc))
    }

    /// The negative number the host returns for this errno.
    pub fn code(self) -> i32 {
        match self {
            Errno::Other(rc) => rc,
            known => TABLE.iter().find(|e| e.0 == known).map(|e| e.1).unwrap_or(-5),
        }
    }

    pub fn name(self) -> &'static str {
        TABLE.iter().find(|e| e.0 == self).map(|e| e.2).unwrap_or("E?")
    }
}

/// `Ok(rc)` for `rc >= 0`, else the errno.
pub fn check(rc: i32) -> Result<i32, Errno> {
    if rc >= 0 {
        Ok(rc)
    } else {
        Err(Errno::from_code(rc))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

impl std::error::Error for Errno {}
