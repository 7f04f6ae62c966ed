//! tool_sum: registers `sum` and lets the host run the tool loop. The same
//! conversation as the C samples (their upstream transcripts must match).
//! Exit 0 when the answer contains 42, 1 hostcall error, 2 error body, 3 wrong answer.

use spear_guest::{json, tool, Reply, Session};

const SCHEMA: &str = r#"{"type":"function","function":{"name":"sum","description":"Add two integers.","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}}"#;

fn sum(args: &str) -> Result<String, String> {
    let v = json::parse(args)?;
    let a = v.get("a").as_i64().ok_or("a must be an integer")?;
    let b = v.get("b").as_i64().ok_or("b must be an integer")?;
    println!("tool sum(a={}, b={}) -> {}", a, b, a + b);
    Ok(format!("{{\"sum\":{}}}", a + b))
}
tool!(fn sum_tool => sum);

fn run() -> Result<i32, String> {
    let s = Session::new().map_err(|e| e.to_string())?;
    s.system("You are a calculator. Use the sum tool for arithmetic.").map_err(|e| e.to_string())?;
    s.user("What is 7 + 35?").map_err(|e| e.to_string())?;
    s.register_tool(sum_tool, SCHEMA).map_err(|e| e.to_string())?;
    let body = s.send(spear_guest::sys::AUTO_TOOL_CALL).and_then(|r| r.text()).map_err(|e| e.to_string())?;
    let reply = Reply::parse(&body)?;
    if let Some(code) = reply.error() {
        println!("error body: {}", code);
        return Ok(2);
    }
    let answer = reply.content().unwrap_or("");
    println!("answer: {}", answer);
    Ok(if answer.contains("42") { 0 } else { 3 })
}

fn main() {
    let code = run().unwrap_or_else(|e| {
        println!("{}", e);
        1
    });
    std::process::exit(code);
}
