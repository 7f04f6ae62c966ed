//! hello: logging, clocks and randomness through the host; no model.
//! Exit 0 when the clocks agree and random_i64 varies, 1 otherwise.

fn main() {
    let mut bad = false;
    let logged = spear_guest::log::log(spear_guest::log::Level::Info, "hello from the Rust guest");
    println!("log: {}", if logged.is_ok() { "0" } else { "failed" });
    bad |= logged.is_err();
    spear_guest::info!("structured-ish: {} + {} = {}", 1, 2, 1 + 2);

    let (ms, s) = (spear_guest::time_now_ms(), spear_guest::wall_time_s());
    let clocks_ok = ms > 1_600_000_000_000 && (ms / 1000 - s).abs() <= 2;
    println!("clocks: {}", if clocks_ok { "ok" } else { "BAD" });
    bad |= !clocks_ok;

    let random_ok = spear_guest::random_i64() != spear_guest::random_i64();
    println!("random: {}", if random_ok { "ok" } else { "BAD" });
    bad |= !random_ok;

    spear_guest::sleep_ms(1);
    for arg in std::env::args().skip(1) {
        println!("arg: {}", arg);
    }
    println!("hello from Rust: {}", if bad { "FAILED" } else { "ok" });
    std::process::exit(bad as i32);
}
