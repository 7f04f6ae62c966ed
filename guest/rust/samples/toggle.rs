//! toggle: a plain send shows the tool call the model wants; the guest runs
//! it itself and answers with a tool message, then a plain send finishes.
//! (The C toggle sample lets the host run the pending call instead.)

use spear_guest::{json, tool, Errno, Reply, Session};

const SCHEMA: &str = r#"{"type":"function","function":{"name":"sum","description":"Add two integers.","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}}"#;

fn sum(args: &str) -> Result<String, String> {
    let v = json::parse(args)?;
    let (a, b) = (v.get("a").as_i64().unwrap_or(0), v.get("b").as_i64().unwrap_or(0));
    Ok(format!("{{\"sum\":{}}}", a + b))
}
tool!(fn sum_tool => sum);

fn run() -> Result<i32, String> {
    let e = |e: Errno| e.to_string();
    let s = Session::new().map_err(e)?;
    s.system("You are a calculator. Use the sum tool for arithmetic.").map_err(e)?;
    s.user("What is 7 + 35?").map_err(e)?;
    s.register_tool(sum_tool, SCHEMA).map_err(e)?;

    let first = Reply::parse(&s.send_plain().and_then(|r| r.text()).map_err(e)?)?;
    let calls = first.tool_calls();
    if calls.len() != 1 || first.finish_reason() != Some("tool_calls") {
        println!("plain send: expected one tool call, got {:?}", first.value);
        return Ok(3);
    }
    let call = &calls[0];
    println!("plain send: model asks for {} with {} (not run)", call.name, call.arguments);
    let output = sum(&call.arguments)?;
    println!("guest ran it: {}", output);
    s.write_tool_result(&call.id, &output).map_err(e)?;
    let again = s.write_tool_result(&call.id, &output);
    println!("answering twice: {}", again.err().map(|e| e.name()).unwrap_or("OK"));

    let last = Reply::parse(&s.send_plain().and_then(|r| r.text()).map_err(e)?)?;
    if let Some(code) = last.error() {
        println!("error body: {}", code);
        return Ok(2);
    }
    let answer = last.content().unwrap_or("");
    println!("second plain send: answer: {}", answer);
    Ok(if answer.contains("42") && again == Err(Errno::Inval) { 0 } else { 3 })
}

fn main() {
    let code = run().unwrap_or_else(|e| {
        println!("{}", e);
        1
    });
    std::process::exit(code);
}
