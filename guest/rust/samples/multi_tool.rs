//! multi_tool: three tools over several rounds, one round asking for two
//! tools at once (same script as the C sample). Exit 0 when all four calls
//! ran and the final answer carries both results.

use std::cell::Cell;

use spear_guest::{json, tool, Errno, Reply, Session};

thread_local!(static CALLS: Cell<u32> = Cell::new(0));

fn ints(args: &str) -> Result<(i64, i64), String> {
    let v = json::parse(args)?;
    CALLS.with(|c| c.set(c.get() + 1));
    match (v.get("a").as_i64(), v.get("b").as_i64()) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err("a and b must be integers".to_string()),
    }
}
fn add(args: &str) -> Result<String, String> {
    let (a, b) = ints(args)?;
    println!("tool add({}, {})", a, b);
    Ok(format!("{{\"sum\":{}}}", a + b))
}
fn mul(args: &str) -> Result<String, String> {
    let (a, b) = ints(args)?;
    println!("tool mul({}, {})", a, b);
    Ok(format!("{{\"product\":{}}}", a * b))
}
fn upper(args: &str) -> Result<String, String> {
    let v = json::parse(args)?;
    let text = v.get("text").as_str().ok_or("text must be a string")?.to_uppercase();
    CALLS.with(|c| c.set(c.get() + 1));
    println!("tool upper({})", text);
    Ok(format!("{{\"text\":{}}}", json::quote(&text)))
}
tool!(fn add_tool => add);
tool!(fn mul_tool => mul);
tool!(fn upper_tool => upper);

const INT_PARAMS: &str = r#""parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}"#;

fn run() -> Result<i32, String> {
    let e = |e: Errno| e.to_string();
    let s = Session::new().map_err(e)?;
    s.system("Use the tools for every step.").map_err(e)?;
    s.user("Compute (2 + 3) * 4, then shout the word done.").map_err(e)?;
    s.register_tool(add_tool, &format!(r#"{{"name":"add","description":"a + b",{}}}"#, INT_PARAMS)).map_err(e)?;
    s.register_tool(mul_tool, &format!(r#"{{"name":"mul","description":"a * b",{}}}"#, INT_PARAMS)).map_err(e)?;
    s.register_tool(
        upper_tool,
        r#"{"type":"function","function":{"name":"upper","description":"Upper-case text.","parameters":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}}"#,
    )
    .map_err(e)?;
    s.set_param("max_iterations", 6).map_err(e)?;
    let dup = s.register_tool(add_tool, &format!(r#"{{"name":"add",{}}}"#, INT_PARAMS));
    println!("duplicate add: {}", dup.err().map(|e| e.name()).unwrap_or("OK"));

    let resp = s.send_auto().map_err(e)?;
    let reply = Reply::parse(&resp.text().map_err(e)?)?;
    if let Some(code) = reply.error() {
        println!("error body: {}", code);
        return Ok(2);
    }
    let answer = reply.content().unwrap_or("").to_string();
    println!("answer: {}", answer);
    let metrics = json::parse(&resp.metrics().map_err(e)?)?;
    let (iters, tool_calls) = (metrics.get("iterations").as_i64(), metrics.get("tool_calls").as_i64());
    let calls = CALLS.with(|c| c.get());
    println!(
        "tools run: {}, metrics: iterations={} tool_calls={}",
        calls,
        iters.unwrap_or(-1),
        tool_calls.unwrap_or(-1)
    );
    let ok = calls == 4 && tool_calls == Some(4) && dup == Err(Errno::Exist) && answer.contains("20") && answer.contains("DONE");
    Ok(if ok { 0 } else { 3 })
}

fn main() {
    let code = run().unwrap_or_else(|e| {
        println!("{}", e);
        1
    });
    std::process::exit(code);
}
