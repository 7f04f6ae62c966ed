//! Logging through the host (`spear.log`), plus `info!`-style macros.

use crate::errno::{check, Errno};
use crate::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
}

/// Sends one line to the host log. Lines over 16 KiB are cut at a char
/// boundary rather than refused: a log line is for humans.
pub fn log(level: Level, msg: &str) -> Result<(), Errno> {
    let mut end = msg.len().min(sys::MAX_LOG_LEN);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    check(unsafe { sys::log(level as i32, sys::ptr(msg.as_ptr()), end as i32) }).map(|_| ())
}

#[macro_export]
macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {{
        let _ = $crate::log::log($level, &::std::format!($($arg)*));
    }};
}
#[macro_export]
macro_rules! trace { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Trace, $($arg)*) }; }
#[macro_export]
macro_rules! debug { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Debug, $($arg)*) }; }
#[macro_export]
macro_rules! info { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Info, $($arg)*) }; }
#[macro_export]
macro_rules! warn { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Warn, $($arg)*) }; }
#[macro_export]
macro_rules! error { ($($arg:tt)*) => { $crate::log_at!($crate::log::Level::Error, $($arg)*) }; }
