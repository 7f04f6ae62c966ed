//! The out-buffer protocol every reading hostcall uses: capacity in, length
//! out; -28 ENOSPC means "need more, nothing consumed", so grow and call again.

use crate::errno::Errno;
use crate::sys;

/// Calls `call(out_ptr, out_len_ptr)` with `buf`'s spare room (at least
/// `min_capacity` bytes, more if `buf` already has that capacity), growing
/// it on ENOSPC. On success `buf` holds exactly the payload; returns its
/// length and how many ENOSPC round trips it took. On failure `buf` is empty.
pub(crate) fn read_into(
    buf: &mut Vec<u8>,
    min_capacity: usize,
    call: impl Fn(i32, i32) -> i32,
) -> Result<(usize, u32), Errno> {
    buf.clear();
    buf.reserve(min_capacity.max(1));
    let mut grows = 0;
    // The payload does not change between attempts; a few rounds is plenty.
    for _ in 0..8 {
        let cap = buf.capacity().min(u32::MAX as usize) as u32;
        let mut len = cap;
        let rc = call(sys::ptr(buf.as_mut_ptr()), sys::ptr(&mut len));
        if rc >= 0 {
            if len > cap {
                return Err(Errno::Io);
            }
            // The host wrote `len` bytes at the start of the allocation.
            unsafe { buf.set_len(len as usize) };
            return Ok((len as usize, grows));
        }
        if rc != Errno::NoSpc.code() {
            return Err(Errno::from_code(rc));
        }
        if len <= cap {
            // -28 without asking for more would loop forever.
            return Err(Errno::Io);
        }
        grows += 1;
        buf.reserve(len as usize);
    }
    Err(Errno::Io)
}

/// [`read_into`] into a fresh buffer, as UTF-8 text.
pub(crate) fn read_text(capacity: usize, call: impl Fn(i32, i32) -> i32) -> Result<(String, u32), Errno> {
    let mut buf = Vec::new();
    let (_, grows) = read_into(&mut buf, capacity, call)?;
    String::from_utf8(buf).map(|s| (s, grows)).map_err(|_| Errno::Io)
}

/// A ctl call whose argument is `json` (`*arg_len_ptr` = its length).
pub(crate) fn ctl_json(json: &str, call: impl Fn(i32, i32) -> i32) -> Result<(), Errno> {
    let mut len = json.len() as u32;
    crate::check(call(sys::ptr(json.as_ptr()), sys::ptr(&mut len))).map(|_| ())
}
