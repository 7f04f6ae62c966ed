//! Guest SDK for the `spear` hostcall ABI (spearpy, SPEAR).
//!
//! ```ignore
//! use spear_guest::{tool, Session};
//!
//! fn sum(args: &str) -> Result<String, String> {
//!     let v = spear_guest::json::parse(args)?;
//!     let (a, b) = (v.get("a").as_i64().unwrap_or(0), v.get("b").as_i64().unwrap_or(0));
//!     Ok(format!("{{\"sum\":{}}}", a + b))
//! }
//! tool!(fn sum_tool => sum);
//!
//! let s = Session::new()?;
//! s.user("What is 7 + 35?")?;
//! s.register_tool(sum_tool, SCHEMA)?;
//! let reply = spear_guest::Reply::parse(&s.send_auto()?.text()?)?;
//! ```
//!
//! Beyond chat: [`Epoll`] for readiness, user streams ([`stream`], SSF
//! frames in [`ssf`]), audio in ([`audio`]: [`Mic`], [`Rtasr`]) and MCP
//! tool selection on a [`Session`] ([`mcp`]).
//!
//! Link with `-C link-arg=--export-table` so the host can find tools in
//! `__indirect_function_table`. No dependencies; builds with rustc 1.63 for
//! wasm32-wasi and wasm32-unknown-unknown, and with current Rust for
//! wasm32-wasip1 (the same target, renamed in Rust 1.78).

pub mod alloc;
pub mod audio;
pub mod epoll;
pub mod errno;
pub mod json;
pub mod log;
pub mod mcp;
mod outbuf;
pub mod reply;
pub mod session;
pub mod ssf;
pub mod stream;
pub mod sys;
pub mod tool;

pub use audio::{Mic, Rtasr};
pub use epoll::{Epoll, Event};
pub use errno::{check, Errno};
pub use reply::{Reply, ToolCall};
pub use session::{Param, Response, Session};
pub use ssf::Frame;
pub use stream::{Control, CtlEvent, Direction, Stream};
pub use tool::{Handler, RawTool};

/// Wall clock, milliseconds since the Unix epoch.
pub fn time_now_ms() -> i64 {
    unsafe { sys::time_now_ms() }
}

/// Wall clock, seconds since the Unix epoch.
pub fn wall_time_s() -> i64 {
    unsafe { sys::wall_time_s() }
}

/// 64 random bits from the host.
pub fn random_i64() -> i64 {
    unsafe { sys::random_i64() }
}

/// Sleeps (the host never sleeps past the run's deadline).
pub fn sleep_ms(ms: i32) {
    unsafe { sys::sleep_ms(ms) }
}
