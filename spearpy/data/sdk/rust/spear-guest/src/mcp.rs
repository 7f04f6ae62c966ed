//! MCP tools on a chat session (SPEAR's MCP session layer, docs/mcp.md).
//!
//! The run's task decides which MCP servers and tools a guest may use; a
//! session can only narrow that: turn MCP on, pick servers, and allow or
//! deny tools by glob (`*`, `?`). Anything past what the task allows is
//! `Err(Errno::Access)`, so `mcp_enable(true)` failing with `Access` means
//! the run did not enable MCP. The host runs MCP tools in the auto tool loop
//! like the guest's own; the model sees them as
//! `mcp__<base64url(server_id)>__<base64url(tool)>` ([`tool_name`]).

use crate::errno::Errno;
use crate::session::{Param, Session};

impl Session {
    /// `mcp.enabled`.
    pub fn mcp_enable(&self, on: bool) -> Result<(), Errno> {
        self.set_param("mcp.enabled", on)
    }

    /// `mcp.server_ids`: the servers this session uses (instead of the
    /// task's defaults); each must be one the task allows.
    pub fn mcp_servers(&self, server_ids: &[&str]) -> Result<(), Errno> {
        self.set_param("mcp.server_ids", server_ids)
    }

    /// `mcp.tool_allowlist`: only tools matching one of these globs.
    pub fn mcp_allow_tools(&self, globs: &[&str]) -> Result<(), Errno> {
        self.set_param("mcp.tool_allowlist", globs)
    }

    /// `mcp.tool_denylist`: no tool matching one of these globs.
    pub fn mcp_deny_tools(&self, globs: &[&str]) -> Result<(), Errno> {
        self.set_param("mcp.tool_denylist", globs)
    }

    /// Sets one `mcp.*` key back to the task's default (JSON `null`).
    pub fn mcp_unset(&self, key: &str) -> Result<(), Errno> {
        self.set_param(key, Param::Raw("null".to_string()))
    }
}

const B64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity((bytes.len() * 4 + 2) / 3);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..chunk.len() + 1 {
            out.push(B64URL[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn b64url_decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for chunk in text.as_bytes().chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            let v = B64URL.iter().position(|x| x == c)? as u32;
            n |= v << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// The name the model sees for `tool` of MCP server `server_id`:
/// `mcp__<base64url-nopad(server_id)>__<base64url-nopad(tool)>`.
pub fn tool_name(server_id: &str, tool: &str) -> String {
    format!("mcp__{}__{}", b64url_encode(server_id.as_bytes()), b64url_encode(tool.as_bytes()))
}

/// `(server_id, tool)` of an MCP tool name in SPEAR's form; `None` for any
/// other name (a guest's own tool, or the short alias spearpy offers when
/// the SPEAR name would pass OpenAI's 64 characters), e.g. when reading the
/// calls of a plain send. Splits at the last `__`, as the host does (a
/// server token may end in `_`; a tool token never holds `__`), and takes
/// only canonical tokens.
pub fn split_tool_name(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix("mcp__")?;
    let at = rest.rfind("__")?;
    let (server, tool) = (&rest[..at], &rest[at + 2..]);
    let decode = |t: &str| {
        let text = b64url_decode(t).and_then(|b| String::from_utf8(b).ok())?;
        if t.is_empty() || b64url_encode(text.as_bytes()) != t {
            return None;
        }
        Some(text)
    };
    Some((decode(server)?, decode(tool)?))
}
