//! mcp_time: a guest using a tool from an MCP server (the Rust twin of
//! guest/c/samples/mcp_time.c). It narrows the run's MCP servers to "time"
//! and its tools to get_*, asks the model for the time, and lets the host
//! run the loop (AUTO_TOOL_CALL): the model's call goes to the MCP server,
//! its result back to the model. Prints the answer. Exit 0 ok, 1 a hostcall
//! failed, 2 the body was an error, 3 the run's task does not allow MCP
//! (run with --mcp-dir DIR --mcp time).

use spear_guest::{mcp, Errno, Reply, Session};

fn run() -> Result<i32, String> {
    let s = Session::new().map_err(|e| format!("cchat_create: {}", e.name()))?;
    let narrowed = s
        .mcp_enable(true)
        .and_then(|_| s.mcp_servers(&["time"]))
        .and_then(|_| s.mcp_allow_tools(&["get_*"]));
    match narrowed {
        Ok(()) => {}
        Err(Errno::Access) => {
            println!("mcp: not allowed by the run's task");
            return Ok(3);
        }
        Err(e) => return Err(format!("mcp params: {}", e.name())),
    }
    s.user("What time is it in UTC?").map_err(|e| e.to_string())?;
    let resp = s.send_auto().map_err(|e| format!("cchat_send: {}", e.name()))?;
    let body = resp.text().map_err(|e| format!("cchat_recv: {}", e.name()))?;
    let reply = Reply::parse(&body)?;
    let answer = match (reply.error(), reply.content()) {
        (None, Some(text)) => text,
        _ => {
            println!("error body: {}", body);
            return Ok(2);
        }
    };
    println!("answer: {}", answer);
    println!("tool calls: {}", reply.spear().get("tool_calls").as_i64().unwrap_or(-1));
    println!("the time tool is offered as {}", mcp::tool_name("time", "get_current_time"));
    Ok(0)
}

fn main() {
    let code = run().unwrap_or_else(|e| {
        println!("{}", e);
        1
    });
    std::process::exit(code);
}
