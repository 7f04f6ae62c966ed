//! Chat sessions and their responses, closed on drop.

use crate::errno::{check, Errno};
use crate::json::quote;
use crate::outbuf::{ctl_json, read_text};
use crate::sys;
use crate::tool::RawTool;

/// A value for [`Session::set_param`]; `From` impls cover the usual types.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Str(String),
    Int(i64),
    Bool(bool),
    /// Already JSON (an object, a list, a float...).
    Raw(String),
}

impl Param {
    pub(crate) fn to_json(&self) -> String {
        match self {
            Param::Str(s) => quote(s),
            Param::Int(n) => n.to_string(),
            Param::Bool(b) => b.to_string(),
            Param::Raw(r) => r.clone(),
        }
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Param {
        Param::Str(v.to_string())
    }
}
impl From<String> for Param {
    fn from(v: String) -> Param {
        Param::Str(v)
    }
}
impl From<bool> for Param {
    fn from(v: bool) -> Param {
        Param::Bool(v)
    }
}
impl From<i32> for Param {
    fn from(v: i32) -> Param {
        Param::Int(v.into())
    }
}
impl From<i64> for Param {
    fn from(v: i64) -> Param {
        Param::Int(v)
    }
}
impl From<u32> for Param {
    fn from(v: u32) -> Param {
        Param::Int(v.into())
    }
}
impl From<usize> for Param {
    fn from(v: usize) -> Param {
        Param::Int(v as i64)
    }
}
/// A JSON array of strings (MCP's `server_ids`, allow- and denylists).
impl<'a> From<&'a [&'a str]> for Param {
    fn from(v: &'a [&'a str]) -> Param {
        Param::Raw(format!("[{}]", v.iter().map(|s| quote(s)).collect::<Vec<_>>().join(",")))
    }
}
impl From<Vec<String>> for Param {
    fn from(v: Vec<String>) -> Param {
        Param::Raw(format!("[{}]", v.iter().map(|s| quote(s)).collect::<Vec<_>>().join(",")))
    }
}

/// One chat session (a `cchat` fd). Dropping it closes the fd.
#[derive(Debug)]
pub struct Session {
    fd: i32,
}

impl Session {
    pub fn new() -> Result<Session, Errno> {
        check(unsafe { sys::cchat_create() }).map(|fd| Session { fd })
    }

    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn write_msg(&self, role: &str, content: &str) -> Result<(), Errno> {
        let rc = unsafe {
            sys::cchat_write_msg(
                self.fd,
                sys::ptr(role.as_ptr()),
                role.len() as i32,
                sys::ptr(content.as_ptr()),
                content.len() as i32,
            )
        };
        check(rc).map(|_| ())
    }

    pub fn system(&self, content: &str) -> Result<(), Errno> {
        self.write_msg("system", content)
    }

    pub fn user(&self, content: &str) -> Result<(), Errno> {
        self.write_msg("user", content)
    }

    /// Answers a pending tool call yourself (after a plain send).
    pub fn write_tool_result(&self, call_id: &str, content: &str) -> Result<(), Errno> {
        let json = format!("{{\"tool_call_id\":{},\"content\":{}}}", quote(call_id), quote(content));
        self.write_msg("tool", &json)
    }

    /// Registers a tool made with [`crate::tool!`] (or any raw-ABI function).
    pub fn register_tool(&self, tool: RawTool, schema_json: &str) -> Result<(), Errno> {
        // In wasm32 a function pointer is its funcref-table index.
        let index = tool as usize as i32;
        let rc = unsafe {
            sys::cchat_write_fn(self.fd, index, sys::ptr(schema_json.as_ptr()), schema_json.len() as i32)
        };
        check(rc).map(|_| ())
    }

    /// `{"key": key, "value": value}` through `cchat_ctl` SET_PARAM.
    pub fn set_param(&self, key: &str, value: impl Into<Param>) -> Result<(), Errno> {
        let json = format!("{{\"key\":{},\"value\":{}}}", quote(key), value.into().to_json());
        self.set_param_json(&json)
    }

    pub fn set_param_json(&self, json: &str) -> Result<(), Errno> {
        let fd = self.fd;
        ctl_json(json, |p, l| unsafe { sys::cchat_ctl(fd, sys::CTL_SET_PARAM, p, l) })
    }

    /// Lets the host put tool I/O in `arena` instead of calling `spear_alloc`.
    pub fn set_tool_arena(&self, arena: &'static mut [u8]) -> Result<(), Errno> {
        self.set_param("tool_arena_ptr", sys::ptr(arena.as_ptr()))?;
        self.set_param("tool_arena_len", arena.len())
    }

    /// `cchat_send` with raw flags ([`sys::SEND_METRICS`], [`sys::AUTO_TOOL_CALL`]).
    pub fn send(&self, flags: i32) -> Result<Response, Errno> {
        check(unsafe { sys::cchat_send(self.fd, flags) }).map(|fd| Response { fd })
    }

    /// One completion; tool calls come back unexecuted.
    pub fn send_plain(&self) -> Result<Response, Errno> {
        self.send(sys::SEND_METRICS)
    }

    /// The host runs the tool-call loop until the model answers.
    pub fn send_auto(&self) -> Result<Response, Errno> {
        self.send(sys::SEND_METRICS | sys::AUTO_TOOL_CALL)
    }

    /// Closes now and reports the result; drop does the same silently.
    pub fn close(self) -> Result<(), Errno> {
        let rc = unsafe { sys::cchat_close(self.fd) };
        std::mem::forget(self);
        check(rc).map(|_| ())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        unsafe { sys::cchat_close(self.fd) };
    }
}

/// The result of a send: a readable fd holding the response body.
#[derive(Debug)]
pub struct Response {
    fd: i32,
}

impl Response {
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// The body as text, growing the buffer on ENOSPC.
    pub fn text(&self) -> Result<String, Errno> {
        self.text_with_capacity(4096).map(|(s, _)| s)
    }

    /// Like [`Response::text`], starting from `capacity` bytes; also returns
    /// how many ENOSPC round trips it took.
    pub fn text_with_capacity(&self, capacity: usize) -> Result<(String, u32), Errno> {
        let fd = self.fd;
        read_text(capacity, |p, l| unsafe { sys::cchat_recv(fd, p, l) })
    }

    /// GET_METRICS: JSON usage summed over the send (`{}` without SEND_METRICS).
    pub fn metrics(&self) -> Result<String, Errno> {
        let fd = self.fd;
        read_text(256, |p, l| unsafe { sys::cchat_ctl(fd, sys::CTL_GET_METRICS, p, l) }).map(|(s, _)| s)
    }
}

impl Drop for Response {
    fn drop(&mut self) {
        unsafe { sys::cchat_close(self.fd) };
    }
}
